package sstable

import (
	"math/rand/v2"
	"runtime"
	"testing"

	"github.com/bellows-kv/bellows/storage-engine/kv"
)

// A cache miss reads the stored block into a buffer kept for the next
// miss: it allocates the decoded block it returns (and its block
// iterator's key), and no more after a GC. The buffers must
// outlive a garbage collection: a sync.Pool is emptied by the GC, so the
// first misses after each cycle, during its mark phase, allocated a
// stored block's buffer again, and an allocation then can make a reader
// assist the GC and queue behind the end of its mark phase (14–17 ms in
// the memstore benchmark's traces, docs/memstore.md).
func TestAGCAddsNoAllocationToACacheMiss(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	vs := randomVersions(rng, 2000)
	data := buildTable(t, vs, WriterOptions{BlockSize: 4096, Compression: S2Compression})
	r := openTable(t, data, nil) // no cache: every read misses
	key := vs[len(vs)/2].key.UserKey
	get := func() {
		if _, _, found, err := r.Get(key, kv.MaxTimestamp); err != nil || !found {
			t.Fatalf("get: found %v, err %v", found, err)
		}
	}
	get()
	// A miss allocates its decoded block and the block iterator's key.
	steady := testing.AllocsPerRun(20, get)
	afterGC := testing.AllocsPerRun(20, func() {
		runtime.GC()
		runtime.GC()
		get()
	})
	if steady > 2 || afterGC != steady {
		t.Fatalf("a miss made %.1f allocations, and %.1f after two GC cycles; want at most 2, and no more after a GC", steady, afterGC)
	}
}
