package sstable

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"testing"

	"github.com/bellows-kv/bellows/storage-engine/blockcache"
	"github.com/bellows-kv/bellows/storage-engine/kv"
)

type version struct {
	key kv.InternalKey
	val []byte
}

func buildTable(t *testing.T, vs []version, opts WriterOptions) []byte {
	t.Helper()
	var buf bytes.Buffer
	w := NewWriter(&buf, opts)
	for _, v := range vs {
		if err := w.Add(v.key, v.val); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := w.Finish(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// openTable opens a table buildTable made, reading through cache (nil:
// none, every read misses).
func openTable(t *testing.T, data []byte, cache *blockcache.Cache) *Reader {
	t.Helper()
	r, err := Open(bytes.NewReader(data), int64(len(data)), "t.sst", cache)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func randomVersions(rng *rand.Rand, n int) []version {
	seen := map[string]bool{}
	var vs []version
	ts := uint64(1)
	for len(vs) < n {
		k := fmt.Sprintf("key-%06d", rng.IntN(n))
		for j := 0; j < 1+rng.IntN(3); j++ {
			kind := kv.KindSet
			if rng.IntN(5) == 0 {
				kind = kv.KindDelete
			}
			id := fmt.Sprintf("%s@%d", k, ts)
			if seen[id] {
				continue
			}
			seen[id] = true
			var val []byte
			if kind == kv.KindSet {
				val = []byte(strings.Repeat(fmt.Sprint(ts), 1+rng.IntN(20)))
			}
			vs = append(vs, version{kv.InternalKey{UserKey: []byte(k), TS: ts, Kind: kind}, val})
			ts++
		}
	}
	sort.Slice(vs, func(i, j int) bool { return kv.Compare(vs[i].key, vs[j].key) < 0 })
	return vs
}

// layouts are the index layouts every read is checked on: format 1,
// format 2 with its default partitions, and format 2 with a partition per
// block or two (most lookups cross a partition boundary).
var layouts = []struct {
	name string
	opts WriterOptions
}{
	{"format-1", WriterOptions{FormatVersion: FormatVersion1}},
	{"format-2", WriterOptions{}},
	{"format-2-small-partitions", WriterOptions{PartitionBytes: 64}},
}

// caches are the block caches a reader is checked with: one that holds
// the file, none (format 2 pins its partitions), and one too small to
// hold a partition for long.
var caches = []struct {
	name string
	new  func() *blockcache.Cache
}{
	{"cache", func() *blockcache.Cache { return blockcache.New(1 << 20) }},
	{"no-cache", func() *blockcache.Cache { return nil }},
	{"tiny-cache", func() *blockcache.Cache { return blockcache.New(16 << 10) }},
}

func TestRoundTripGetAndIterate(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	vs := randomVersions(rng, 5000)
	for _, l := range layouts {
		for _, cc := range caches {
			for _, c := range []Compression{NoCompression, S2Compression} {
				t.Run(fmt.Sprintf("%s/%s/compression-%d", l.name, cc.name, c), func(t *testing.T) {
					opts := l.opts
					opts.BlockSize, opts.Compression = 1024, c
					checkRoundTrip(t, vs, buildTable(t, vs, opts), cc.new())
				})
			}
		}
	}
}

func checkRoundTrip(t *testing.T, vs []version, data []byte, cache *blockcache.Cache) {
	{
		r, err := Open(bytes.NewReader(data), int64(len(data)), "t.sst", cache)
		if err != nil {
			t.Fatal(err)
		}
		if r.NumBlocks() < 10 {
			t.Fatalf("expected many blocks, got %d", r.NumBlocks())
		}
		it := r.NewIter()
		i := 0
		for ok := it.First(); ok; ok = it.Next() {
			if kv.Compare(it.Key(), vs[i].key) != 0 || !bytes.Equal(it.Value(), vs[i].val) {
				t.Fatalf("entry %d: got %v=%q want %v=%q", i, it.Key(), it.Value(), vs[i].key, vs[i].val)
			}
			i++
		}
		if it.Err() != nil || i != len(vs) {
			t.Fatalf("iterated %d of %d, err %v", i, len(vs), it.Err())
		}
		// Every version is reachable by Get at its own timestamp, a read
		// just below it finds the version before (or nothing), and a seek
		// lands on the exact version: a key whose versions straddle two
		// partitions is in both filters.
		for j := 0; j < len(vs); j++ {
			v := vs[j]
			got, kind, ok, err := r.Get(v.key.UserKey, v.key.TS)
			if err != nil || !ok || kind != v.key.Kind || !bytes.Equal(got, v.val) {
				t.Fatalf("Get(%v) = %q,%v,%v,%v", v.key, got, kind, ok, err)
			}
			older := j+1 < len(vs) && bytes.Equal(vs[j+1].key.UserKey, v.key.UserKey)
			got, _, ok, err = r.Get(v.key.UserKey, v.key.TS-1)
			if err != nil || ok != older || (older && !bytes.Equal(got, vs[j+1].val)) {
				t.Fatalf("Get(%q, %d) = %q,%v,%v; want the version before %v", v.key.UserKey, v.key.TS-1, got, ok, err, v.key)
			}
			if !it.SeekGE(v.key) || kv.Compare(it.Key(), v.key) != 0 {
				t.Fatalf("SeekGE(%v) landed on %v", v.key, it.Key())
			}
		}
		if _, _, ok, _ := r.Get([]byte("absent"), kv.MaxTimestamp); ok {
			t.Fatal("found an absent key")
		}
		if p := r.Properties(); p.Entries != uint64(len(vs)) || !bytes.Equal(p.Smallest, vs[0].key.UserKey) || !bytes.Equal(p.Largest, vs[len(vs)-1].key.UserKey) {
			t.Fatalf("properties %+v disagree with the input", p)
		}
	}
}

func TestFlippedByteInDataBlockNamesFileAndBlock(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	vs := randomVersions(rng, 2000)
	data := buildTable(t, vs, WriterOptions{BlockSize: 512, Compression: S2Compression})
	clean, err := Open(bytes.NewReader(data), int64(len(data)), "clean.sst", nil)
	if err != nil {
		t.Fatal(err)
	}
	const victim = 3
	h, err := clean.BlockHandle(victim)
	if err != nil {
		t.Fatal(err)
	}
	last, err := clean.BlockLastUserKey(victim)
	if err != nil {
		t.Fatal(err)
	}
	first, err := clean.BlockLastUserKey(0)
	if err != nil {
		t.Fatal(err)
	}
	bad := bytes.Clone(data)
	bad[h.Offset+h.Length/2] ^= 0x40
	r, err := Open(bytes.NewReader(bad), int64(len(bad)), "regions/r1/000042.sst", nil)
	if err != nil {
		t.Fatalf("open must succeed (only a data block is damaged): %v", err)
	}
	// Reading a key in the damaged block fails with a named error.
	_, _, _, err = r.Get(last, kv.MaxTimestamp)
	var ce *CorruptionError
	if !errors.As(err, &ce) || !errors.Is(err, ErrCorruption) {
		t.Fatalf("Get in damaged block: err = %v, want a CorruptionError", err)
	}
	if !strings.Contains(err.Error(), "regions/r1/000042.sst") || !strings.Contains(err.Error(), "data block 3") {
		t.Fatalf("error %q must name the file and the block", err)
	}
	// A full scan stops with the same error instead of skipping the block.
	it := r.NewIter()
	n := 0
	for ok := it.First(); ok; ok = it.Next() {
		n++
	}
	if !errors.Is(it.Err(), ErrCorruption) {
		t.Fatalf("scan over damaged block ended with %v after %d entries", it.Err(), n)
	}
	// Keys in other blocks still read fine.
	if _, _, _, err := r.Get(first, kv.MaxTimestamp); err != nil {
		t.Fatalf("undamaged block: %v", err)
	}
}

func TestOpenRejectsTruncatedAndForeignFiles(t *testing.T) {
	vs := randomVersions(rand.New(rand.NewPCG(5, 6)), 100)
	data := buildTable(t, vs, WriterOptions{})
	for name, b := range map[string][]byte{
		"truncated": data[:len(data)-10],
		"tiny":      data[:5],
		"foreign":   bytes.Repeat([]byte("x"), 200),
	} {
		if _, err := Open(bytes.NewReader(b), int64(len(b)), name, nil); !errors.Is(err, ErrCorruption) {
			t.Errorf("%s: err = %v, want corruption", name, err)
		}
	}
}

func TestWriterRejectsOutOfOrderKeys(t *testing.T) {
	w := NewWriter(&bytes.Buffer{}, WriterOptions{})
	if err := w.Add(kv.InternalKey{UserKey: []byte("b"), TS: 1, Kind: kv.KindSet}, nil); err != nil {
		t.Fatal(err)
	}
	if err := w.Add(kv.InternalKey{UserKey: []byte("a"), TS: 1, Kind: kv.KindSet}, nil); err == nil {
		t.Fatal("out-of-order add accepted")
	}
}

func TestStoredBlockTransferVerifiesAndCaches(t *testing.T) {
	vs := randomVersions(rand.New(rand.NewPCG(7, 8)), 1000)
	data := buildTable(t, vs, WriterOptions{BlockSize: 512, Compression: S2Compression})
	src, _ := Open(bytes.NewReader(data), int64(len(data)), "src.sst", nil)
	dst, _ := Open(bytes.NewReader(data), int64(len(data)), "dst.sst", blockcache.New(1<<20))
	stored, err := src.ReadStoredBlock(2)
	if err != nil {
		t.Fatal(err)
	}
	if err := dst.InsertStoredBlock(2, stored); err != nil {
		t.Fatal(err)
	}
	if !dst.BlockCached(2) || dst.BlockCached(1) {
		t.Fatal("only the transferred block should be cached")
	}
	stored[3] ^= 1
	if err := dst.InsertStoredBlock(3, stored); !errors.Is(err, ErrCorruption) {
		t.Fatalf("damaged transfer accepted: %v", err)
	}
}

// A remote cache that fails a miss sends that miss to the file, and only
// that one: the next miss asks the remote again (its own breaker decides
// when to stop asking). A cancelled request reads nothing.
func TestRemoteFailureFallsBackPerMiss(t *testing.T) {
	vs := randomVersions(rand.New(rand.NewPCG(3, 4)), 1000)
	data := buildTable(t, vs, WriterOptions{BlockSize: 512, Compression: S2Compression})
	src, _ := Open(bytes.NewReader(data), int64(len(data)), "src.sst", nil)
	cache := blockcache.New(1 << 20)
	r, _ := Open(bytes.NewReader(data), int64(len(data)), "dst.sst", cache)
	var asked []int
	fail := true
	r.SetRemote(func(ctx context.Context, i int) ([]byte, error) {
		asked = append(asked, i)
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if fail {
			return nil, errors.New("worker paused")
		}
		return src.ReadStoredBlock(i)
	})
	lastKey := func(i int) kv.InternalKey {
		for _, v := range vs {
			if bytes.Equal(v.key.UserKey, mustLastUserKey(t, r, i)) {
				return v.key
			}
		}
		t.Fatalf("no key of block %d", i)
		return kv.InternalKey{}
	}
	get := func(ctx context.Context, i int) error {
		k := lastKey(i)
		_, _, found, err := r.GetContext(ctx, k.UserKey, kv.MaxTimestamp)
		if err == nil && !found {
			err = fmt.Errorf("block %d: key %s not found", i, k.UserKey)
		}
		return err
	}
	if err := get(context.Background(), 0); err != nil {
		t.Fatalf("a failed remote read was not served from the file: %v", err)
	}
	fail = false
	if err := get(context.Background(), 1); err != nil {
		t.Fatal(err)
	}
	if len(asked) != 2 {
		t.Fatalf("remote asked for %v, want blocks 0 and 1: one failure must not switch it off", asked)
	}
	// Where each miss was read, as a benchmark counts it: block 0 from the
	// file after the worker failed, block 1 from the worker.
	if st := cache.Stats(); st.Misses != 2 || st.BucketReads != 1 || st.WorkerReads != 1 {
		t.Fatalf("misses %d, bucket reads %d, worker reads %d; want 2, 1, 1", st.Misses, st.BucketReads, st.WorkerReads)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := get(ctx, 2); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled request: %v, want context.Canceled", err)
	}
	if r.BlockCached(2) {
		t.Fatal("a cancelled request read the block from the file")
	}
}

// OnDataBlock hands over every data block as a cache holds it, with its
// offset and last user key: a reader opened with the file ID the blocks
// were cached under reads the whole file without a cache miss.
func TestOnDataBlockGivesEachBlockAsCached(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	vs := randomVersions(rng, 3000)
	for _, c := range []Compression{NoCompression, S2Compression} {
		cache := blockcache.New(1 << 24)
		id := blockcache.NewFileID()
		var offsets []uint64
		var lastKeys [][]byte
		data := buildTable(t, vs, WriterOptions{BlockSize: 1024, Compression: c,
			OnDataBlock: func(offset uint64, block, lastUserKey []byte) {
				offsets = append(offsets, offset)
				lastKeys = append(lastKeys, bytes.Clone(lastUserKey))
				cache.Insert(blockcache.Key{File: id, Offset: offset}, bytes.Clone(block), bytes.Clone(lastUserKey))
			}})
		r, err := OpenWithFileID(bytes.NewReader(data), int64(len(data)), "t.sst", cache, id)
		if err != nil {
			t.Fatal(err)
		}
		if len(offsets) != r.NumBlocks() || r.NumBlocks() < 10 {
			t.Fatalf("%v: %d blocks handed over, the file has %d", c, len(offsets), r.NumBlocks())
		}
		for i := range offsets {
			h, err := r.BlockHandle(i)
			if err != nil {
				t.Fatal(err)
			}
			if last := mustLastUserKey(t, r, i); offsets[i] != h.Offset || !bytes.Equal(lastKeys[i], last) {
				t.Fatalf("%v block %d: handed over at %d (last key %q), the index says %d (%q)", c, i, offsets[i], lastKeys[i], h.Offset, last)
			}
		}
		misses := cache.Stats().Misses
		it := r.NewIter()
		n := 0
		for ok := it.First(); ok; ok = it.Next() {
			if kv.Compare(it.Key(), vs[n].key) != 0 || !bytes.Equal(it.Value(), vs[n].val) {
				t.Fatalf("%v entry %d: got %v=%q want %v=%q", c, n, it.Key(), it.Value(), vs[n].key, vs[n].val)
			}
			n++
		}
		if it.Err() != nil || n != len(vs) {
			t.Fatalf("%v: iterated %d of %d, err %v", c, n, len(vs), it.Err())
		}
		if m := cache.Stats().Misses - misses; m != 0 {
			t.Fatalf("%v: %d cache misses reading a file whose blocks were all handed over", c, m)
		}
	}
}

// mustLastUserKey is data block i's last user key.
func mustLastUserKey(t testing.TB, r *Reader, i int) []byte {
	t.Helper()
	last, err := r.BlockLastUserKey(i)
	if err != nil {
		t.Fatal(err)
	}
	return last
}
