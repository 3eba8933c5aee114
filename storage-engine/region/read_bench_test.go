package region

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/bellows-kv/bellows/storage-engine/blockcache"
	"github.com/bellows-kv/bellows/storage-engine/kv"
	"github.com/bellows-kv/bellows/storage-engine/sstable"
	"github.com/bellows-kv/bellows/storage-engine/wal"
)

// scanBenchRegion builds what a scan meets in practice, as the engine
// benchmark's regions hold it: four SSTs whose key ranges all overlap (two
// versions of most keys, some tombstones; all blocks cached) under a
// memstore of several segments (an active one and a pipeline) holding the
// newest writes. Keys are 16 bytes, values 100, as in bellows-bench engine.
func scanBenchRegion(b *testing.B, keys int, cache int64) (*Region, func(int) []byte) {
	b.Helper()
	opts := testOptions(b, b.TempDir())
	opts.BlockCache = blockcache.New(cache)
	opts.DisableAutoCompaction = true
	opts.WALMode = wal.ModeAsync
	opts.SST = sstable.WriterOptions{BlockSize: 4 << 10, Compression: sstable.S2Compression}
	// A small active segment: the memstore's last pass goes through
	// several in-memory flushes into the pipeline.
	opts.MemstoreBytes = 64 << 20
	opts.Memstore.ActiveFraction = 0.004
	r := mustOpen(b, opts)
	key := func(i int) []byte { return []byte(fmt.Sprintf("user%012d", i)) }
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
	// Let the in-memory flushes in flight finish.
	for prev := -1; ; {
		time.Sleep(50 * time.Millisecond)
		n := r.PipelineSegments()
		if n == prev {
			break
		}
		prev = n
	}
	return r, key
}

// BenchmarkScan measures region scans of 20 keys (short) and 100 keys
// (long), forward and in reverse, over scanBenchRegion: each scan is an
// iterator's set-up, the scan and its Close, as bellows-bench engine
// issues them. allocs/key is the allocations of the scan, set-up
// included, per key returned. cpu-ns/op is the process's CPU time (user and
// system, every thread: the collector's share too) per scan, which other
// work on a shared machine inflates less than ns/op's wall time. The lock-order assertions this package's
// tests turn on are off while it measures: production builds do not run
// them.
func BenchmarkScan(b *testing.B) {
	const keys = 20000
	r, keyOf := scanBenchRegion(b, keys, 256<<20)
	defer r.Close()
	// The scans' bounds, made before the clock starts.
	bounds := make([][]byte, keys)
	for i := range bounds {
		bounds[i] = keyOf(i)
	}
	b.Logf("%d files, %d pipeline segments under the active one", r.FileCount(), r.PipelineSegments())
	defer func(was bool) { checkLocks = was }(checkLocks)
	checkLocks = false
	for _, n := range []int{20, 100} {
		for _, reverse := range []bool{false, true} {
			b.Run(fmt.Sprintf("keys=%d/reverse=%v", n, reverse), func(b *testing.B) {
				b.ReportAllocs()
				i, got := 0, 0
				var before, after runtime.MemStats
				runtime.ReadMemStats(&before)
				cpu0 := cpuTime()
				for b.Loop() {
					i = (i + 7919) % (keys - 2*n)
					it, err := r.NewIterator(bounds[i], bounds[i+2*n], kv.MaxTimestamp)
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
				cpu := cpuTime() - cpu0
				runtime.ReadMemStats(&after)
				b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
				b.ReportMetric(float64(after.Mallocs-before.Mallocs)/float64(max(got, 1)), "allocs/key")
			})
		}
	}
}

// cpuTime is the CPU time the process has used.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkScanHotKeys is BenchmarkScan's short and long forward scans
// starting at keys with a thousand versions each in the memstore, as
// Zipf-chosen updates leave the hottest keys (bellows-kv engine's YCSB
// workloads before its scans): a scan must pass every version of the key
// it starts at.
func BenchmarkScanHotKeys(b *testing.B) {
	const keys, hot, versions = 20000, 16, 1000
	r, keyOf := scanBenchRegion(b, keys, 256<<20)
	defer r.Close()
	val := make([]byte, 100)
	var starts [][]byte
	for h := 0; h < hot; h++ {
		starts = append(starts, keyOf(h*(keys/hot)))
	}
	for v := 0; v < versions; v++ {
		batch := new(Batch)
		for _, k := range starts {
			batch.Put(k, val)
		}
		if _, err := r.Apply(batch); err != nil {
			b.Fatal(err)
		}
	}
	ends := make([][]byte, len(starts))
	for h := range starts {
		ends[h] = keyOf(h*(keys/hot) + 1000)
	}
	defer func(was bool) { checkLocks = was }(checkLocks)
	checkLocks = false
	for _, n := range []int{20, 100} {
		b.Run(fmt.Sprintf("keys=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			i, got := 0, 0
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			cpu0 := cpuTime()
			for b.Loop() {
				i = (i + 1) % len(starts)
				it, err := r.NewIterator(starts[i], ends[i], kv.MaxTimestamp)
				if err != nil {
					b.Fatal(err)
				}
				j := 0
				for ok := it.First(); ok && j < n; ok = it.Next() {
					j++
				}
				if err := it.Close(); err != nil {
					b.Fatal(err)
				}
				got += j
			}
			cpu := cpuTime() - cpu0
			runtime.ReadMemStats(&after)
			b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
			b.ReportMetric(float64(after.Mallocs-before.Mallocs)/float64(max(got, 1)), "allocs/key")
		})
	}
}

// BenchmarkScanCacheMisses is BenchmarkScan's forward scans with a block
// cache of 1 MiB, a tenth of the region's blocks: most files' seeks read
// and decompress their block, as in bellows-bench engine, whose data is
// eight times its cache.
func BenchmarkScanCacheMisses(b *testing.B) {
	const keys = 20000
	r, keyOf := scanBenchRegion(b, keys, 1<<20)
	defer r.Close()
	bounds := make([][]byte, keys)
	for i := range bounds {
		bounds[i] = keyOf(i)
	}
	defer func(was bool) { checkLocks = was }(checkLocks)
	checkLocks = false
	for _, n := range []int{20, 100} {
		b.Run(fmt.Sprintf("keys=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			// Random starts: a stride would come back to blocks
			// it just read.
			rng := rand.New(rand.NewPCG(1, uint64(n)))
			got := 0
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			cpu0 := cpuTime()
			for b.Loop() {
				i := rng.IntN(keys - 2*n)
				it, err := r.NewIterator(bounds[i], bounds[i+2*n], kv.MaxTimestamp)
				if err != nil {
					b.Fatal(err)
				}
				j := 0
				for ok := it.First(); ok && j < n; ok = it.Next() {
					j++
				}
				if err := it.Close(); err != nil {
					b.Fatal(err)
				}
				got += j
			}
			cpu := cpuTime() - cpu0
			runtime.ReadMemStats(&after)
			b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
			b.ReportMetric(float64(after.Mallocs-before.Mallocs)/float64(max(got, 1)), "allocs/key")
		})
	}
}
