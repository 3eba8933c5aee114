package region

import (
	"context"
	"encoding/binary"
	"math/rand/v2"
	"runtime"
	"runtime/metrics"
	"testing"

	"github.com/bellows-kv/bellows/storage-engine/blockcache"
	"github.com/bellows-kv/bellows/storage-engine/kv"
	"github.com/bellows-kv/bellows/storage-engine/sstable"
	"github.com/bellows-kv/bellows/storage-engine/wal"
)

// heapBytes is the process's live heap as the Go runtime measures it after
// a full collection: the engine's own accounting plays no part.
func heapBytes() int64 {
	runtime.GC()
	runtime.GC()
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(s)
	return int64(s[0].Value.Uint64())
}

// A region of a million keys (ten times the data of the region tests
// before it, and an index and filters larger than its block cache) opens
// and serves reads within its budget: the block cache's capacity, an empty
// memstore and the files' pinned top levels. With format 1 files, whose
// indexes and filters live outside the cache, the same region outgrows it.
func TestARegionServesTenTimesTheDataWithinItsMemoryBudget(t *testing.T) {
	const keys = 1_000_000
	const cacheBytes = 1 << 20
	dir := t.TempDir()
	opts := testOptions(t, dir)
	opts.WALMode = wal.ModeAsync
	opts.MemstoreBytes = 8 << 20
	opts.SST = sstable.WriterOptions{BlockSize: 4 << 10, Compression: sstable.S2Compression, FormatVersion: sstable.FormatVersion1}
	key := func(i int) []byte { return binary.BigEndian.AppendUint64([]byte("k"), uint64(i)*2654435761%keys) }
	r := mustOpen(t, opts)
	for i := 0; i < keys; i += 1000 {
		b := new(Batch)
		for j := i; j < i+1000; j++ {
			b.Put(key(j), binary.LittleEndian.AppendUint64(nil, uint64(j)))
		}
		if _, err := r.Apply(b); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}

	grown, pinnedBy := map[uint32]int64{}, map[uint32]int64{}
	for _, format := range []uint32{sstable.FormatVersion1, sstable.FormatVersion} {
		if format == sstable.FormatVersion {
			// The same data rewritten in format 2 by a major compaction.
			opts.SST.FormatVersion = format
			r := mustOpen(t, opts)
			if _, err := r.Compact(context.Background(), true); err != nil {
				t.Fatal(err)
			}
			if err := r.Close(); err != nil {
				t.Fatal(err)
			}
		}
		opts.BlockCache = blockcache.New(cacheBytes)
		before := heapBytes()
		r := mustOpen(t, opts)
		rng := rand.New(rand.NewPCG(1, 2))
		for range 20_000 {
			i := rng.IntN(keys)
			if v, ok, err := r.Get(key(i), kv.MaxTimestamp); err != nil || !ok || binary.LittleEndian.Uint64(v) != uint64(i) {
				t.Fatalf("format %d: key %d reads %x %v %v", format, i, v, ok, err)
			}
		}
		grown[format] = heapBytes() - before
		pinned := r.TableMemoryBytes()
		pinnedBy[format] = pinned
		st := opts.BlockCache.Stats()
		t.Logf("format %d: the heap grew %d KiB opening and reading; cache %d KiB used of %d (%d KiB index and filters), %d KiB pinned outside it",
			format, grown[format]>>10, st.UsedBytes>>10, st.Capacity>>10, st.MetaBytes>>10, pinned>>10)
		if format == sstable.FormatVersion {
			// The budget, and slack for the region's own structures
			// (manifest, memstore, WAL buffers).
			budget := int64(cacheBytes) + pinned
			if slack := int64(1 << 20); grown[format] > budget+slack {
				t.Errorf("format 2: the heap grew %d KiB, past the budget of %d KiB and %d KiB of slack", grown[format]>>10, budget>>10, slack>>10)
			}
			if pinned > 64<<10 {
				t.Errorf("format 2 pins %d KiB outside the cache for a million keys; want its top levels only", pinned>>10)
			}
		}
		if err := r.Close(); err != nil {
			t.Fatal(err)
		}
	}
	// The test can fail: the same data in format 1 holds its index and
	// filters outside the cache, and the heap shows them.
	if grown[sstable.FormatVersion1]-grown[sstable.FormatVersion] < pinnedBy[sstable.FormatVersion1]/2 {
		t.Errorf("format 1 grew the heap by %d KiB, format 2 by %d KiB: want format 1's pinned index and filters to show",
			grown[sstable.FormatVersion1]>>10, grown[sstable.FormatVersion]>>10)
	}
}
