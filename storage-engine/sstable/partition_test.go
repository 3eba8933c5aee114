package sstable

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/bellows-kv/bellows/storage-engine/blockcache"
	"github.com/bellows-kv/bellows/storage-engine/kv"
)

// A format 2 file holds only its top level in memory; its partitions are
// cache entries, charged to the cache's budget. A format 1 file of the same
// data holds its whole index and filter.
func TestAFormat2FileKeepsItsIndexAndFiltersInTheCache(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	vs := randomVersions(rng, 40000)
	v1 := openTable(t, buildTable(t, vs, WriterOptions{BlockSize: 1024, FormatVersion: FormatVersion1}), nil)
	cache := blockcache.New(1 << 20)
	v2 := openTable(t, buildTable(t, vs, WriterOptions{BlockSize: 1024}), cache)
	if v2.FormatVersion() != FormatVersion || len(v2.parts) < 10 {
		t.Fatalf("format %d with %d partitions; want format %d with many", v2.FormatVersion(), len(v2.parts), FormatVersion)
	}
	if v2.MemoryBytes()*10 > v1.MemoryBytes() {
		t.Fatalf("format 2 holds %d bytes outside the cache, format 1 %d: want a tenth or less", v2.MemoryBytes(), v1.MemoryBytes())
	}
	for _, v := range vs {
		if _, _, ok, err := v2.Get(v.key.UserKey, v.key.TS); err != nil || !ok {
			t.Fatalf("Get(%v): %v %v", v.key, ok, err)
		}
	}
	st := cache.Stats()
	if st.MetaBytes == 0 || st.MetaBytes > st.UsedBytes || st.UsedBytes > st.Capacity {
		t.Fatalf("cache holds %d bytes of partitions of %d used, capacity %d", st.MetaBytes, st.UsedBytes, st.Capacity)
	}
	if st.MetaMisses == 0 || st.MetaHits == 0 {
		t.Fatalf("partition lookups: %d hits, %d misses; want both", st.MetaHits, st.MetaMisses)
	}
	// CachedBlocks counts the data blocks the cache holds, not partitions.
	cached := 0
	for i := range v2.NumBlocks() {
		if v2.BlockCached(i) {
			cached++
		}
	}
	if got := v2.CachedBlocks(); got != cached || cached == 0 {
		t.Fatalf("CachedBlocks() = %d; %d data blocks are cached", got, cached)
	}
	// Evicting the file evicts its partitions.
	cache.EvictFile(v2.FileID())
	if st := cache.Stats(); st.MetaBytes != 0 || st.UsedBytes != 0 {
		t.Fatalf("after the file's eviction the cache holds %d bytes, %d of partitions", st.UsedBytes, st.MetaBytes)
	}
}

// A damaged partition fails the reads it serves with an error that names
// it, and no other; in its filter or in its index.
func TestADamagedPartitionNamesItself(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	vs := randomVersions(rng, 4000)
	data := buildTable(t, vs, WriterOptions{BlockSize: 512, PartitionBytes: 256})
	clean := openTable(t, data, blockcache.New(1<<20))
	if len(clean.parts) < 4 {
		t.Fatalf("%d partitions; want several", len(clean.parts))
	}
	h := clean.index.handle(2)
	for _, at := range []uint64{2, h.Length - 8} {
		bad := bytes.Clone(data)
		bad[h.Offset+at] ^= 0x10
		r := openTable(t, bad, blockcache.New(1<<20))
		inside := mustLastUserKey(t, clean, clean.parts[2].firstBlock)
		_, _, _, err := r.Get(inside, kv.MaxTimestamp)
		if !errors.Is(err, ErrCorruption) || !strings.Contains(err.Error(), "partition 2") {
			t.Fatalf("a read in partition 2, damaged at byte %d: %v; want a corruption naming partition 2", at, err)
		}
		outside := mustLastUserKey(t, clean, 0)
		if _, _, ok, err := r.Get(outside, kv.MaxTimestamp); err != nil || !ok {
			t.Fatalf("a read in partition 0: %v %v", ok, err)
		}
	}
	if _, err := Open(bytes.NewReader(data[:len(data)-1]), int64(len(data)-1), "t.sst", nil); err == nil {
		t.Fatal("a truncated file opened")
	}
}

// The writer refuses a format it cannot write, naming it.
func TestTheWriterRefusesAnUnknownFormat(t *testing.T) {
	var buf bytes.Buffer
	w := NewWriter(&buf, WriterOptions{FormatVersion: 7})
	err := w.Add(kv.InternalKey{UserKey: []byte("a"), TS: 1, Kind: kv.KindSet}, nil)
	if err == nil || !strings.Contains(err.Error(), "format version 7") {
		t.Fatalf("Add with format 7: %v", err)
	}
}

// Spans lists a small file block by block and a large one by partition,
// with the same total bytes.
func TestSpansCountEveryDataBlock(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	vs := randomVersions(rng, 20000)
	for _, pb := range []int{64 << 10, 256} {
		r := openTable(t, buildTable(t, vs, WriterOptions{BlockSize: 512, PartitionBytes: pb}), blockcache.New(1<<20))
		var want int64
		for i := range r.NumBlocks() {
			h, err := r.BlockHandle(i)
			if err != nil {
				t.Fatal(err)
			}
			want += int64(h.Length)
		}
		var got int64
		spans := 0
		var prev []byte
		if err := r.Spans(func(s Span) {
			if prev != nil && bytes.Compare(prev, s.LastUserKey) > 0 {
				t.Fatalf("span keys out of order: %q after %q", s.LastUserKey, prev)
			}
			prev = s.LastUserKey
			got += s.Bytes
			spans++
		}); err != nil {
			t.Fatal(err)
		}
		fine := len(r.parts) <= finePartitions
		if got != want || (fine && spans != r.NumBlocks()) || (!fine && spans != len(r.parts)) {
			t.Fatalf("%d partitions: %d spans of %d bytes; want %d bytes in %d blocks", len(r.parts), spans, got, want, r.NumBlocks())
		}
	}
}
