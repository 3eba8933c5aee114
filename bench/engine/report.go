package engine

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

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

// Run is one run of the whole suite on both engines, on fresh directories,
// one engine after the other in the order BellowsFirst says.
type Run struct {
	BellowsFirst bool     `json:"bellowsFirst"`
	Bellows      []Result `json:"bellows"`
	Pebble       []Result `json:"pebble"`
	Memory       Memory   `json:"memory"`
}

func (r Run) order() string {
	if r.BellowsFirst {
		return "Bellows, then Pebble"
	}
	return "Pebble, then Bellows"
}

// spread is the median of xs and its range.
type spread struct{ med, lo, hi float64 }

func spreadOf(xs []float64) spread {
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	med := s[n/2]
	if n%2 == 0 {
		med = (s[n/2-1] + s[n/2]) / 2
	}
	return spread{med, s[0], s[n-1]}
}

func (s spread) format(f string) string {
	return fmt.Sprintf(f+" ["+f+"–"+f+"]", s.med, s.lo, s.hi)
}

// Markdown renders the comparison: the regime, Pebble's configuration, the
// memory accounting and the goal, then per workload the median over the
// runs of both engines' throughput, latency and CPU per operation and of
// the Bellows/Pebble throughput ratio (each run's ratio is of the two
// engines in that run), with the range over the runs, and every run's
// ratios.
func Markdown(c Config, header string, runs []Run) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# Engine benchmark: Bellows vs Pebble\n\n%s\n\n", header)

	fmt.Fprintf(&b, "**Goal** (fixed before the run): Bellows/Pebble throughput **≥ %.1f× on every workload** (the median of the runs' ratios).\n\n", Goal)

	b.WriteString("## Regime\n\n")
	raw := int64(c.Keys) * int64(c.KeySize+c.ValueSize)
	fmt.Fprintf(&b, "- Data: %d keys × (%d B key, %d B value) = %s raw, against a %s cache budget per engine "+
		"(the data is %.1f× the budget: reads that miss the cache go to the file system, which has the machine's free memory as page cache).\n",
		c.Keys, c.KeySize, c.ValueSize, mib(raw), mib(c.Budget.CacheBytes), float64(raw)/float64(c.Budget.CacheBytes))
	fmt.Fprintf(&b, "- Workloads, in this order on each engine: fill-random (%d puts, 1 goroutine); "+
		"flush, close and reopen with a cold cache; read-random, YCSB-A and YCSB-B (%d ops each), %d scans of %d keys and %d scans of %d keys "+
		"(start key Zipf-chosen, θ=%.2f), from %d client goroutines; then a reopen with an fsync per write and %d uniform updates from %d goroutines.\n",
		c.Keys, c.Ops, c.ScanOps, c.ScanLen, c.LongScanOps, c.LongScanLen, c.Theta, c.Threads, c.SyncOps, c.Threads)
	b.WriteString("- WAL: every workload but the last acknowledges a write without an fsync on both engines (Bellows WAL mode async, " +
		"fsync every 100 ms; Pebble `NoSync`). The sync-write workload fsyncs before acknowledging each write on both " +
		"(Bellows WAL mode sync; Pebble `WriteOptions{Sync: true}`); both group-commit concurrent writers.\n")
	fmt.Fprintf(&b, "- Memtable: %d MiB per engine. Bellows stalls writers while a full memstore waits behind one frozen memstore still flushing "+
		"(`MaxImmutableMemstores` 1); Pebble stops writes at %d memtables in use (CockroachDB's `MemTableStopWritesThreshold`).\n",
		c.Budget.MemtableBytes>>20, PebbleMemTableStopWrites)
	orders := make([]string, len(runs))
	for i, r := range runs {
		orders[i] = fmt.Sprintf("run %d %s", i+1, r.order())
	}
	fmt.Fprintf(&b, "- %d runs in one process, each on fresh directories with the same seed, the engines' order alternating (%s): "+
		"a load on the machine during one engine's turn shows as a spread of the runs' ratios rather than as a bias. "+
		"Tables give the median over the runs and, in brackets, the lowest and highest. The machine's cores are shared with other work: "+
		"a median within the spread of the goal is not a clear pass or miss.\n",
		len(runs), strings.Join(orders, "; "))
	b.WriteString("- CPU µs/op is the process's CPU time (user and system, all threads) during the workload divided by its operations: " +
		"the engine's background work (flushes, compactions, garbage collection) and the client's included. " +
		"Other processes' load does not inflate it as it inflates wall-clock throughput.\n" +
		"- Cache misses/op: block cache misses during the workload per operation, each a block read from the file system and decompressed. " +
		"Both engines' caches hold index and filter blocks beside the data blocks, and both counts include their misses.\n\n")

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
		"its index and filter blocks live in it. Bellows keeps its index and filter partitions in its block cache too and pins only each file's "+
		"top-level index (docs/memory.md), so each time the region is opened its block cache is the budget less the memory its tables pin then:\n\n",
		mib(c.Budget.CacheBytes))
	phases := []string{"the load", "the read and scan workloads", "the sync writes"}
	for ri, r := range runs {
		var parts []string
		for i, o := range r.Memory.BellowsOpens {
			phase := fmt.Sprintf("open %d", i+1)
			if i < len(phases) {
				phase = phases[i]
			}
			parts = append(parts, fmt.Sprintf("for %s (WAL %s) pinned %s, block cache %s", phase, o.WALMode, mib(o.TableBytes), mib(o.CacheBytes)))
		}
		fmt.Fprintf(&b, "- run %d: %s; at the end %s pinned\n", ri+1, strings.Join(parts, "; "), mib(r.Memory.BellowsTableBytes))
	}
	b.WriteString("\nCompactions between two opens can move the pinned memory from the figure the cache was sized against.\n\n")

	b.WriteString("## Results\n\n")
	b.WriteString("| workload | ratio (Bellows/Pebble) | goal met | runs ≥ goal | Bellows ops/s | Pebble ops/s | Bellows p50 / p99 ms | Pebble p50 / p99 ms | CPU µs/op Bellows / Pebble | cache misses/op Bellows / Pebble | reads that found data (B / P) |\n")
	b.WriteString("|---|---:|:-:|:-:|---:|---:|---:|---:|---:|---:|---:|\n")
	met := 0
	nw := len(runs[0].Bellows)
	for w := 0; w < nw; w++ {
		var ratios, bo, po, bp50, bp99, pp50, pp99, bcpu, pcpu, bm, pm []float64
		above := 0
		for _, r := range runs {
			be, pe := r.Bellows[w], r.Pebble[w]
			ratio := be.OpsPerSec() / pe.OpsPerSec()
			if ratio >= Goal {
				above++
			}
			ratios = append(ratios, ratio)
			bo, po = append(bo, be.OpsPerSec()), append(po, pe.OpsPerSec())
			bp50, bp99 = append(bp50, msf(be.P50)), append(bp99, msf(be.P99))
			pp50, pp99 = append(pp50, msf(pe.P50)), append(pp99, msf(pe.P99))
			bcpu, pcpu = append(bcpu, usf(be.CPUPerOp())), append(pcpu, usf(pe.CPUPerOp()))
			bm, pm = append(bm, be.MissesPerOp()), append(pm, pe.MissesPerOp())
		}
		rs := spreadOf(ratios)
		ok := "no"
		if rs.med >= Goal {
			ok = "yes"
			met++
		}
		be, pe := runs[0].Bellows[w], runs[0].Pebble[w]
		fmt.Fprintf(&b, "| %s | **%.2f** [%.2f–%.2f] | %s | %d/%d | %s | %s | %.3f / %.3f | %.3f / %.3f | %.1f / %.1f | %.2f / %.2f | %s |\n",
			be.Workload, rs.med, rs.lo, rs.hi, ok, above, len(runs),
			spreadOf(bo).format("%.0f"), spreadOf(po).format("%.0f"),
			spreadOf(bp50).med, spreadOf(bp99).med, spreadOf(pp50).med, spreadOf(pp99).med,
			spreadOf(bcpu).med, spreadOf(pcpu).med, spreadOf(bm).med, spreadOf(pm).med, found(be, pe))
	}
	fmt.Fprintf(&b, "\nGoal ≥ %.1f× met on %d of %d workloads by the median ratio (\"goal met\" compares it before rounding; "+
		"\"runs ≥ goal\" counts the runs whose own ratio reached it). Latencies and CPU are medians over the runs; "+
		"\"reads that found data\" is from run 1.\n\n", Goal, met, nw)

	b.WriteString("### What a scan merges\n\nEach engine's sorted runs as the short scans began (run 1): a scan seeks every one, and a seek into a file whose block is not cached reads and decompresses it.\n\n")
	for w := 0; w < nw; w++ {
		if be, pe := runs[0].Bellows[w], runs[0].Pebble[w]; strings.HasPrefix(be.Workload, "short scans") && be.Layout != "" {
			fmt.Fprintf(&b, "- Bellows: %s\n- Pebble: %s\n\n", be.Layout, pe.Layout)
		}
	}

	b.WriteString("### Every run's ratio\n\n| workload |")
	for i, r := range runs {
		first := "B"
		if !r.BellowsFirst {
			first = "P"
		}
		fmt.Fprintf(&b, " run %d (%s first) |", i+1, first)
	}
	b.WriteString("\n|---|" + strings.Repeat("---:|", len(runs)) + "\n")
	for w := 0; w < nw; w++ {
		fmt.Fprintf(&b, "| %s |", runs[0].Bellows[w].Workload)
		for _, r := range runs {
			fmt.Fprintf(&b, " %.2f |", r.Bellows[w].OpsPerSec()/r.Pebble[w].OpsPerSec())
		}
		b.WriteString("\n")
	}
	return b.String()
}

func msf(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
func usf(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

func found(be, pe Result) string {
	if be.Reads == 0 {
		return "–"
	}
	return fmt.Sprintf("%.1f%% / %.1f%%", 100*float64(be.Found)/float64(be.Reads), 100*float64(pe.Found)/float64(pe.Reads))
}
