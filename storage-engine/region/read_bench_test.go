package region

import (
	"fmt"
	"runtime"
	"testing"

	"github.com/bellows-kv/bellows/storage-engine/blockcache"
	"github.com/bellows-kv/bellows/storage-engine/kv"
	"github.com/bellows-kv/bellows/storage-engine/wal"
)

// BenchmarkScan measures a region scan of 100 live keys forward and in
// reverse over what a scan meets in practice: four SSTs (two versions of
// most keys, some tombstones, all blocks cached) under a memstore holding
// the newest writes. allocs/key is the allocations of the scan, iterator
// set-up included, per key returned.
func BenchmarkScan(b *testing.B) {
	const keys, n = 20000, 100
	opts := testOptions(b, b.TempDir())
	opts.BlockCache = blockcache.New(256 << 20)
	opts.DisableAutoCompaction = true
	opts.WALMode = wal.ModeAsync
	r := mustOpen(b, opts)
	defer r.Close()
	key := func(i int) []byte { return []byte(fmt.Sprintf("user%08d", i)) }
	val := make([]byte, 100)
	for pass := 0; pass < 5; pass++ {
		batch := new(Batch)
		for i := pass; i < keys; i += 1 + pass%2 {
			if i%13 == pass {
				batch.Delete(key(i))
			} else {
				batch.Put(key(i), val)
			}
			if batch.Len() == 200 {
				if _, err := r.Apply(batch); err != nil {
					b.Fatal(err)
				}
				batch = new(Batch)
			}
		}
		if batch.Len() > 0 {
			if _, err := r.Apply(batch); err != nil {
				b.Fatal(err)
			}
		}
		if pass < 4 {
			if err := r.Flush(bg); err != nil {
				b.Fatal(err)
			}
		}
	}
	for _, reverse := range []bool{false, true} {
		b.Run(fmt.Sprintf("keys=%d/reverse=%v", n, reverse), func(b *testing.B) {
			i, got := 0, 0
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			for b.Loop() {
				i = (i + 7919) % (keys - 2*n)
				it, err := r.NewIterator(key(i), key(i+2*n), kv.MaxTimestamp)
				if err != nil {
					b.Fatal(err)
				}
				first, next := it.First, it.Next
				if reverse {
					first, next = it.Last, it.Prev
				}
				j := 0
				for ok := first(); ok && j < n; ok = next() {
					j++
				}
				if err := it.Close(); err != nil {
					b.Fatal(err)
				}
				got += j
			}
			runtime.ReadMemStats(&after)
			b.ReportMetric(float64(after.Mallocs-before.Mallocs)/float64(max(got, 1)), "allocs/key")
		})
	}
}
