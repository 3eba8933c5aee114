package engine

import (
	"fmt"
	"strings"
	"time"
)

func ms(d time.Duration) string { return fmt.Sprintf("%.3f", float64(d)/float64(time.Millisecond)) }

func mib(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }

// Goal is the Bellows/Pebble throughput ratio every workload must reach,
// fixed before the run.
const Goal = 1.0

// Memory is what the report says about the memory budget: how Bellows'
// block cache was sized at each open and its index and filter memory at
// the end of the run.
type Memory struct {
	BellowsOpens      []CacheSizing
	BellowsTableBytes int64 // at the end of the run
}

// Markdown renders the comparison: the regime, Pebble's configuration, the
// memory accounting and the goal, then per workload both engines'
// throughput and latency and the Bellows/Pebble throughput ratio.
func Markdown(c Config, header string, bellows, pebble []Result, mem Memory) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# Engine benchmark: Bellows vs Pebble\n\n%s\n\n", header)

	fmt.Fprintf(&b, "**Goal** (fixed before the run): Bellows/Pebble throughput **≥ %.1f× on every workload**.\n\n", Goal)

	b.WriteString("## Regime\n\n")
	raw := int64(c.Keys) * int64(c.KeySize+c.ValueSize)
	fmt.Fprintf(&b, "- Data: %d keys × (%d B key, %d B value) = %s raw, against a %s cache budget per engine "+
		"(%.1f× the budget: reads that miss the cache go to the file system, which has the machine's free memory as page cache).\n",
		c.Keys, c.KeySize, c.ValueSize, mib(raw), mib(c.Budget.CacheBytes), float64(raw)/float64(c.Budget.CacheBytes))
	fmt.Fprintf(&b, "- Workloads, in this order on each engine, one engine after the other in one process: fill-random (%d puts, 1 goroutine); "+
		"flush, close and reopen with a cold cache; read-random, YCSB-A and YCSB-B (%d ops each), %d scans of %d keys and %d scans of %d keys "+
		"(start key Zipf-chosen, θ=%.2f), from %d client goroutines; then a reopen with an fsync per write and %d uniform updates from %d goroutines.\n",
		c.Keys, c.Ops, c.ScanOps, c.ScanLen, c.LongScanOps, c.LongScanLen, c.Theta, c.Threads, c.SyncOps, c.Threads)
	b.WriteString("- WAL: every workload but the last acknowledges a write without an fsync on both engines (Bellows WAL mode async, " +
		"fsync every 100 ms; Pebble `NoSync`). The sync-write workload fsyncs before acknowledging each write on both " +
		"(Bellows WAL mode sync; Pebble `WriteOptions{Sync: true}`); both group-commit concurrent writers.\n")
	fmt.Fprintf(&b, "- Memtable: %d MiB per engine. Bellows stalls writers while a full memstore waits behind one frozen memstore still flushing "+
		"(`MaxImmutableMemstores` 1); Pebble stops writes at %d memtables in use (CockroachDB's `MemTableStopWritesThreshold`).\n",
		c.Budget.MemtableBytes>>20, PebbleMemTableStopWrites)
	b.WriteString("- One run per engine, no repeats: the table has no spread, and the machine's cores are shared with other work, " +
		"so a ratio within a few percent of the goal is not a clear pass or miss.\n\n")

	b.WriteString("## Pebble configuration\n\n")
	fmt.Fprintf(&b, "As CockroachDB configures it (`DefaultPebbleOptions`, cockroachdb/cockroach `pkg/storage/pebble.go`): "+
		"bloom filter of 10 bits per key on every level (`bloom.FilterPolicy(10)`, `TableFilter`), `L0CompactionThreshold` 2, "+
		"`LBaseMaxBytes` 64 MiB, `MemTableStopWritesThreshold` %d, compaction concurrency 1 to %d "+
		"(CockroachDB's min(GOMAXPROCS−1, 3), at least 1, on this machine). Memtable %d MiB and block cache %d MiB from the budget. "+
		"Left at Pebble's defaults: `L0StopWritesThreshold` 12 (CockroachDB sets 1000 and relies on its admission control, "+
		"which this benchmark does not have), 4 KiB data blocks (the size Bellows writes here; CockroachDB uses 32 KiB), Snappy compression, "+
		"the default comparer. Pebble builds the filters on every level but its `Get` consults none in L6 "+
		"(`IterOptions.UseL6Filters` is off by default, as in CockroachDB's point reads): where all keys exist, filters skip the upper levels only.\n\n", PebbleMemTableStopWrites, PebbleCompactions(), c.Budget.MemtableBytes>>20, c.Budget.CacheBytes>>20)

	b.WriteString("## Memory: indexes and filters inside the budget\n\n")
	fmt.Fprintf(&b, "Both engines get %s for data blocks, indexes and bloom filters together. Pebble's block cache is the whole budget: "+
		"its index and filter blocks live in it. Bellows holds its SST indexes and bloom filters in memory outside its block cache, "+
		"so each time the region is opened its block cache is the budget less the index and filter memory its tables hold then:\n\n",
		mib(c.Budget.CacheBytes))
	phases := []string{"the load", "the read and scan workloads", "the sync writes"}
	for i, o := range mem.BellowsOpens {
		phase := fmt.Sprintf("open %d", i+1)
		if i < len(phases) {
			phase = phases[i]
		}
		fmt.Fprintf(&b, "- for %s (WAL %s): indexes and filters %s, block cache %s\n", phase, o.WALMode, mib(o.TableBytes), mib(o.CacheBytes))
	}
	fmt.Fprintf(&b, "\nAt the end of the run Bellows' indexes and filters took %s; compactions between two opens can move it from the figure its cache was sized against.\n\n",
		mib(mem.BellowsTableBytes))

	b.WriteString("## Results\n\n")
	b.WriteString("| workload | Bellows ops/s | Pebble ops/s | ratio (Bellows/Pebble) | goal met | Bellows p50 ms | Pebble p50 ms | Bellows p99 ms | Pebble p99 ms | reads that found data (B / P) |\n")
	b.WriteString("|---|---:|---:|---:|:-:|---:|---:|---:|---:|---:|\n")
	met := 0
	for i := range bellows {
		be, pe := bellows[i], pebble[i]
		ratio := be.OpsPerSec() / pe.OpsPerSec()
		ok := "no"
		if ratio >= Goal {
			ok = "yes"
			met++
		}
		fmt.Fprintf(&b, "| %s | %.0f | %.0f | **%.2f** | %s | %s | %s | %s | %s | %s |\n",
			be.Workload, be.OpsPerSec(), pe.OpsPerSec(), ratio, ok,
			ms(be.P50), ms(pe.P50), ms(be.P99), ms(pe.P99), found(be, pe))
	}
	fmt.Fprintf(&b, "\nGoal ≥ %.1f× met on %d of %d workloads (\"goal met\" compares the ratio before rounding).\n", Goal, met, len(bellows))
	return b.String()
}

func found(be, pe Result) string {
	if be.Reads == 0 {
		return "–"
	}
	return fmt.Sprintf("%.1f%% / %.1f%%", 100*float64(be.Found)/float64(be.Reads), 100*float64(pe.Found)/float64(pe.Reads))
}
