package memstore

import (
	"encoding/json"
	"fmt"
	"image/color"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"

	"github.com/bellows-kv/bellows/bench/report"
	"github.com/bellows-kv/bellows/internal/contract"
	"github.com/bellows-kv/bellows/storage-engine/memstore"
)

// Name is the report's default name: Write writes NAME.json, NAME.md and
// NAME.png.
const Name = "memstore"

// Files are the names Write writes into its directory for a report named
// name.
func Files(name string) []string { return []string{name + ".json", name + ".md", name + ".png"} }

// ReadJSON loads a memstore.json written by Write.
func ReadJSON(path string) (Report, error) {
	var rep Report
	b, err := os.ReadFile(path)
	if err != nil {
		return rep, err
	}
	if err := json.Unmarshal(b, &rep); err != nil {
		return rep, err
	}
	// A figure added to the report after the file was written is
	// derived from its runs where they hold what it needs.
	for i := range rep.Results {
		r := &rep.Results[i]
		if r.Spread == nil {
			r.Spread = map[string]Spread{}
		}
		for _, m := range runMetrics {
			if _, ok := r.Spread[m.name]; !ok {
				r.Spread[m.name] = spreadOf(values(r.Runs, m.of))
			}
		}
	}
	return rep, nil
}

// Write writes NAME.json, NAME.md and NAME.png into dir.
func Write(dir, name string, rep Report) error {
	if err := report.Write(dir, name, rep, Markdown(rep)); err != nil {
		return err
	}
	return plotPNG(filepath.Join(dir, Files(name)[2]), rep)
}

// Verdict is one goal, judged from the numbers.
type Verdict struct {
	Goal string
	// Judged is false when the run lacks what the goal needs (a policy
	// or distribution not run).
	Judged, Met bool
	Measured    string
}

// Verdicts judges the goals from the medians.
func Verdicts(rep Report) []Verdict {
	var out []Verdict
	// Basic ≥ +25% write throughput over None on Zipf.
	v := Verdict{Goal: GoalBasicThroughput}
	if b, ok := rep.Find(string(memstore.Basic), Zipf); ok && b.WriteRatioVsNone != nil {
		v.Judged, v.Met = true, *b.WriteRatioVsNone >= basicMinWriteRatio
		v.Measured = fmt.Sprintf("Basic/None write throughput on Zipf %s (%+.1f%%)%s", ratioString(b.WriteRatioVsNone),
			(*b.WriteRatioVsNone-1)*100, pairedString(b, "write_ops_per_s"))
	} else {
		v.Measured = "not judged: Basic on Zipf was not run"
	}
	out = append(out, v)
	// Adaptive ≤ 0.5× None's flushes and ≤ 0.75× its SST bytes (Zipf,
	// where the paper measured it).
	v = Verdict{Goal: GoalAdaptiveIO}
	if a, ok := rep.Find(string(memstore.Adaptive), Zipf); ok && a.FlushesRatioVsNone != nil && a.SSTBytesRatioVsNone != nil {
		f, s := *a.FlushesRatioVsNone <= adaptiveMaxFlushRatio, *a.SSTBytesRatioVsNone <= adaptiveMaxSSTRatio
		v.Judged, v.Met = true, f && s
		v.Measured = fmt.Sprintf("Adaptive/None on Zipf: flushes %s (%s)%s, SST bytes %s (%s)%s",
			ratioString(a.FlushesRatioVsNone), metString(f), pairedString(a, "flushes"),
			ratioString(a.SSTBytesRatioVsNone), metString(s), pairedString(a, "sst_bytes"))
	} else {
		v.Measured = "not judged: Adaptive on Zipf was not run (or None flushed nothing)"
	}
	out = append(out, v)
	// No policy worse than 1.10× None's get p99 or mean scan, on every
	// distribution: during the writes at full speed, and during the paced
	// writes.
	out = append(out, readsVerdict(rep, goalReadsSaturated,
		func(r Result) *float64 { return r.GetP99RatioVsNone }, func(r Result) *float64 { return r.ScanRatioVsNone }))
	if rep.Config.PacedWrites > 0 {
		out = append(out, readsVerdict(rep, goalReadsPaced,
			func(r Result) *float64 { return r.PacedGetP99RatioVsNone }, func(r Result) *float64 { return r.PacedScanRatioVsNone }))
	}
	return out
}

// readsVerdict judges the reads goal on one of the reader's phases: the
// worst policy per distribution, for get p99 and for mean scan.
func readsVerdict(rep Report, goal string, getP99, scanMean func(Result) *float64) Verdict {
	v := Verdict{Goal: goal, Met: true}
	var parts []string
	for _, dist := range rep.Config.Distributions {
		for _, m := range []struct {
			what    string
			ratioOf func(Result) *float64
		}{{"get p99", getP99}, {"mean scan", scanMean}} {
			worst, worstP := 0.0, ""
			for _, r := range rep.Results {
				ratio := m.ratioOf(r)
				if r.Distribution != dist || r.Policy == string(memstore.None) || ratio == nil {
					continue
				}
				v.Judged = true
				if *ratio > worst {
					worst, worstP = *ratio, r.Policy
				}
				if *ratio > maxReadRatioVsNone {
					v.Met = false
				}
			}
			if worstP != "" {
				parts = append(parts, fmt.Sprintf("%s: worst %s at %.2f× None's %s", dist, worstP, worst, m.what))
			}
		}
	}
	v.Met = v.Met && v.Judged
	v.Measured = strings.Join(parts, "; ")
	if !v.Judged {
		v.Measured = "not judged: no policy but None was run"
	}
	return v
}

func metString(ok bool) string {
	if ok {
		return "met"
	}
	return "missed"
}

func ratioString(r *float64) string {
	if r == nil {
		return "n/a"
	}
	return fmt.Sprintf("%.2f×", *r)
}

// pairedString is the range of the per-round ratios of a figure.
func pairedString(r Result, name string) string {
	s, ok := r.PairedRatioVsNone[name]
	if !ok || s.N < 2 {
		return ""
	}
	return fmt.Sprintf(" [per round %.2f–%.2f]", s.Min, s.Max)
}

// Markdown is the report: the goals first, the regime, a table per
// distribution (medians and spread), and a verdict per goal.
func Markdown(rep Report) string {
	c := rep.Config
	var b strings.Builder
	b.WriteString("# In-memory compaction: the four memstore policies on the paper's write workload (Accordion, VLDB 2018, §5)\n\n")
	command := c.Command
	if command == "" {
		command = "bellows-bench memstore"
	}
	prov := c.Provenance
	if prov.Date == "" && len(c.Started) >= len("2006-01-02") {
		prov.Date = c.Started[:len("2006-01-02")]
	}
	b.WriteString(report.Header(command, prov))
	b.WriteString("**Goals (stated before the run, issue #12):**\n\n")
	for _, g := range c.Goals {
		fmt.Fprintf(&b, "- %s\n", g)
	}
	b.WriteString("\n")
	fmt.Fprintf(&b, "**Workload:** per run, %d writer goroutines issue %d puts of a %d B key and a %d B value (%s of raw data, %.1f × the memstore), "+
		"in batches of %d puts (≈ %d B, the paper's 10 KB client buffers); async WAL; one region with a %s memstore; retention %s; "+
		"A = %g, S = %d, R = %g; automatic minor compactions on; block cache %s; the other engine settings at their defaults "+
		"(maxWALBytes %d × the memstore, writers stall behind 2 frozen memstores, 32 KiB S2-compressed SST blocks). "+
		"A reader runs during the writes, paced at up to %d reads/s (the rate it managed is in the tables below), alternating point gets and %d-key scans, keys from the writers' distribution. "+
		"%s"+
		"Zipf θ = %.2f (YCSB's scrambled generator) and uniform, over %d keys. Machine: %s. Started %s.\n\n",
		c.Writers, c.Writes, c.KeySize, c.ValueSize, mib(float64(c.Writes*(c.KeySize+c.ValueSize))), float64(c.Writes*(c.KeySize+c.ValueSize))/float64(max(c.MemstoreBytes, 1)),
		c.PutsPerBatch, c.PutsPerBatch*(c.KeySize+c.ValueSize), mib(float64(c.MemstoreBytes)), retentionString(c.MaxVersions, c.GCTTL),
		c.ActiveFraction, c.PipelineSegments, c.RedundancyThreshold, mib(float64(c.CacheBytes)), contract.DefaultMaxWALMemstores,
		c.ReadsPerSec, c.ScanLength, pacedString(c), c.Theta, c.Keys, c.Machine, c.Started)
	b.WriteString("Every setting the run used is the `config` of the JSON file beside this report (the same name), and " +
		"`--from-json` with that file renders this report again from it.\n\n")
	b.WriteString("**Regime:** " + regime(rep) + "\n\n")
	fmt.Fprintf(&b, "**Method:** %d runs per policy and distribution, interleaved (round 1 runs %s, then round 2, …), each in a fresh directory "+
		"and a fresh region; the policies of one round see the same key sequences. Each figure is the median over the runs, with the "+
		"range (min–max) in brackets; ×None is the ratio of the medians to None's on the same distribution, and per-round ratios "+
		"(paired with None's run of the same round) are in memstore.json (`paired_ratio_vs_none`).\n\n",
		c.Runs, strings.Join(c.Policies, ", "))
	b.WriteString("Write throughput is puts over the time the writers took. Flushes are the disk flushes the full-speed writes caused (a full memstore, or the WAL bound); " +
		"after them a final flush puts what is left in memory on disk (not counted as a flush) and the region's minor compactions are allowed to finish: " +
		"compactions, SST bytes (bytes flushed + bytes written by compaction) and WAL bytes are those of getting the full-speed writes onto disk. " +
		"GC CPU is the GC's share of all CPU (GOMAXPROCS × wall time, `runtime/metrics`) during the writes. Get p99 and scan latency are the reader's, " +
		"measured during the writes (open loop, so every policy gets the same read load).\n\n")
	if c.ReaderOwnCore {
		b.WriteString("**The reader has a core of its own** (`--reader-core`, `bench/cpu.OwnCore`), in both phases: every thread of the process " +
			"but the reader's is confined to the other CPUs (the writers, the memstore's in-memory flushes and merges, disk flushes, " +
			"compactions and the GC's workers), the reader is locked to its thread on the last CPU, and GOMAXPROCS is doubled so that a P " +
			"is free when the reader wakes (with one P more, two writers and the in-memory flush held all three, and a woken reader waited " +
			"out a 10 ms time slice). GC CPU is then a share of the doubled Ps. Its latency is then its read path's: the segments it searches, " +
			"the SST blocks it reads, the garbage it makes, and the locks it shares with the writers (a writer holding one may wait for " +
			"its CPU). The writers get the rest of the machine (here one CPU), so the write " +
			"throughputs are of the writers on that.")
		if c.IdleWriters {
			b.WriteString(" During the full-speed writes each writer runs on a thread of its own under SCHED_IDLE (`--idle-writers`, `bench/cpu.LockIdle`): a reader " +
				"preempted by the GC, or woken, runs again only once a runtime thread on the writers' CPU hands it its thread back, and " +
				"behind writer threads of the normal policy that handoff waited out their time slices (1–16 ms, a few times a second). The memstore's background work, disk flushes, compactions and the GC then run before the " +
				"writers on their CPU, so an in-memory flush starts when the active segment reaches A instead of waiting behind the writers. " +
				"The paced writers keep the normal policy: a limiter's wakeup of an idle thread came too late to hold the pace.")
		}
		if c.WriterYield {
			b.WriteString(" During the full-speed writes each writer yields its CPU after each batch (`--writer-yield`, `bench/cpu.Yield`, " +
				"sched_yield), as a server's request handler leaves it while it waits on the network: a runtime thread on the writers' CPU " +
				"that must hand the reader its thread back after a preemption, or stop for the GC, waits one batch at most. The writers keep " +
				"the normal policy: under SCHED_IDLE (`--idle-writers`) a writer's thread holding a P ran about every half second " +
				"behind the background work, and every goroutine, the reader too, waited that long at the GC's stop-the-world " +
				"(single reads of 0.2–1.1 s; docs/memstore.md, \"Measuring reads while writers run flat out\").")
		}
		if c.PacedWrites > 0 {
			b.WriteString(" Two reader phases: during the writes at full speed, where the policies' memstores differ most (the pipeline's " +
				"segments, merges under the reader), and during the paced writes, every policy at the same write rate.")
		}
		b.WriteString("\n\n")
	}
	if c.PacedWrites > 0 && !c.ReaderOwnCore {
		b.WriteString("Two reader phases, because on two cores they answer different questions. During the writes at full speed the writers " +
			"saturate the CPU, and a policy that writes twice as fast also takes more of the CPU the reader waits for: its latency there " +
			"is mostly time spent runnable, not reading (the memstore's own lookup is a few microseconds under every policy; " +
			"`go test ./storage-engine/memstore -bench Get` measures it). During the paced writes every policy takes the same write load, " +
			"so the reader's latency compares the read paths: the pipeline's extra segments, and what the memstore holds in memory.\n\n")
	}

	for _, dist := range c.Distributions {
		fmt.Fprintf(&b, "## %s\n\n", distTitle(dist, c.Theta))
		b.WriteString("| policy | write ops/s | ×None | flushes | ×None | of which WAL-forced | compactions | SST MiB written | ×None | WAL MiB | write stalls |\n")
		b.WriteString("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
		for _, r := range rep.Results {
			if r.Distribution != dist {
				continue
			}
			fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", r.Policy,
				spreadString(r.Spread["write_ops_per_s"], 1, "%.0f"), ratioString(r.WriteRatioVsNone),
				spreadString(r.Spread["flushes"], 1, "%.0f"), ratioString(r.FlushesRatioVsNone),
				spreadString(r.Spread["wal_forced_flushes"], 1, "%.0f"),
				spreadString(r.Spread["compactions"], 1, "%.0f"),
				spreadString(r.Spread["sst_bytes"], 1.0/(1<<20), "%.0f"), ratioString(r.SSTBytesRatioVsNone),
				spreadString(r.Spread["wal_bytes"], 1.0/(1<<20), "%.0f"),
				spreadString(r.Spread["write_stalls"], 1, "%.0f"))
		}
		b.WriteString("\n| policy | in-memory flushes | merges | in-memory compactions | versions dropped | GC CPU % | ×None | get p99 ms | ×None | scan mean ms | ×None | scan p99 ms |\n")
		b.WriteString("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
		for _, r := range rep.Results {
			if r.Distribution != dist {
				continue
			}
			fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", r.Policy,
				spreadString(r.Spread["in_memory_flushes"], 1, "%.0f"), spreadString(r.Spread["merges"], 1, "%.0f"),
				spreadString(r.Spread["in_memory_compactions"], 1, "%.0f"), spreadString(r.Spread["versions_dropped"], 1, "%.0f"),
				spreadString(r.Spread["gc_cpu_share"], 100, "%.1f"), ratioString(r.GCCPURatioVsNone),
				spreadString(r.Spread["get_p99_ms"], 1, "%.3f"), ratioString(r.GetP99RatioVsNone),
				spreadString(r.Spread["scan_mean_ms"], 1, "%.3f"), ratioString(r.ScanRatioVsNone),
				spreadString(r.Spread["scan_p99_ms"], 1, "%.3f"))
		}
		if c.PacedWrites > 0 {
			fmt.Fprintf(&b, "\nDuring the paced writes (%d puts at %d/s):\n\n", c.PacedWrites, c.PacedWritesPerSec)
			b.WriteString("| policy | paced write ops/s | get mean ms | get p99 ms | ×None | scan mean ms | ×None | scan p99 ms | ×None |\n")
			b.WriteString("|---|---:|---:|---:|---:|---:|---:|---:|---:|\n")
			for _, r := range rep.Results {
				if r.Distribution != dist {
					continue
				}
				fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", r.Policy,
					spreadString(r.Spread["paced_write_ops_per_s"], 1, "%.0f"),
					spreadString(r.Spread["paced_get_mean_ms"], 1, "%.3f"),
					spreadString(r.Spread["paced_get_p99_ms"], 1, "%.3f"), ratioString(r.PacedGetP99RatioVsNone),
					spreadString(r.Spread["paced_scan_mean_ms"], 1, "%.3f"), ratioString(r.PacedScanRatioVsNone),
					spreadString(r.Spread["paced_scan_p99_ms"], 1, "%.3f"), ratioString(r.PacedScanP99RatioVsNone))
			}
		}
		b.WriteString("\nWhat a read searched and what it cost: the reads the reader managed per second (it asks for " + fmt.Sprint(rep.Config.ReadsPerSec) + "; " +
			"a read's timer fires late when the runtime is busy, so it falls short, and further the faster the writes); then mean per read: memstore skiplists (active segments and pushed ones not yet flattened) and the versions they held, and flat segments, frozen memstores included; SST files; the block-cache misses per 1,000 reads (blocks read from a file and decoded; compactions read past the cache, so each is a read's); the GC's cycles and stop-the-world time per second of the writes (a pause stops the reader too, and a cycle's stack scans and assists can park it until a P on the writers' CPU hands it back); the reads that took 5 ms or more, and the slowest (a few reads that long move a mean no percentile shows); and the reader's CPU time per get and per scan (its thread's CPU clock; a read's latency less its CPU was spent waiting).\n\n")
		// A report from before the slow reads were recorded has none.
		slowOnRecord := slices.ContainsFunc(rep.Results, func(r Result) bool {
			return slices.ContainsFunc(r.Runs, func(run RunResult) bool { return run.ReadMaxMs > 0 })
		})
		sourceTable := func(phase, prefix string, pauses bool) {
			fmt.Fprintf(&b, "%s:\n\n", phase)
			head, rule := "| policy | reads/s | skiplists | skiplist versions | flat segments | SST files | misses /1k reads |", "|---|---:|---:|---:|---:|---:|---:|"
			if pauses {
				head, rule = head+" GC cycles/s | GC pauses ms/s |", rule+"---:|---:|"
			}
			if pauses && slowOnRecord {
				head, rule = head+fmt.Sprintf(" reads ≥ %v | slowest read ms |", slowReadAt), rule+"---:|---:|"
			}
			fmt.Fprintf(&b, "%s get CPU ms | scan CPU ms |\n%s---:|---:|\n", head, rule)
			for _, r := range rep.Results {
				if r.Distribution != dist {
					continue
				}
				cells := []string{r.Policy,
					spreadString(r.Spread[prefix+"reads_per_s"], 1, "%.0f"),
					spreadString(r.Spread[prefix+"skiplists_per_read"], 1, "%.1f"),
					spreadString(r.Spread[prefix+"skiplist_versions_per_read"], 1, "%.0f"),
					spreadString(r.Spread[prefix+"flat_segments_per_read"], 1, "%.1f"),
					spreadString(r.Spread[prefix+"files_per_read"], 1, "%.1f"),
					spreadString(r.Spread[prefix+"misses_per_1k_reads"], 1, "%.0f")}
				if pauses {
					cells = append(cells, spreadString(r.Spread["gc_cycles_per_s"], 1, "%.1f"), spreadString(r.Spread["gc_pause_ms_per_s"], 1, "%.1f"))
				}
				if pauses && slowOnRecord {
					cells = append(cells, spreadString(r.Spread["slow_reads"], 1, "%.0f"), spreadString(r.Spread["read_max_ms"], 1, "%.1f"))
				}
				cells = append(cells, spreadString(r.Spread[prefix+"get_cpu_ms"], 1, "%.3f"), spreadString(r.Spread[prefix+"scan_cpu_ms"], 1, "%.3f"))
				fmt.Fprintf(&b, "| %s |\n", strings.Join(cells, " | "))
			}
			b.WriteString("\n")
		}
		sourceTable("During the writes at full speed", "", true)
		if rep.Config.PacedWrites > 0 {
			sourceTable("During the paced writes", "paced_", false)
		}
	}

	b.WriteString("## Goals: met or missed\n\n")
	for _, v := range Verdicts(rep) {
		status := "**missed**"
		switch {
		case !v.Judged:
			status = "**not judged**"
		case v.Met:
			status = "**met**"
		}
		fmt.Fprintf(&b, "- %s — %s: %s.\n", v.Goal, status, v.Measured)
	}
	b.WriteString("\n")
	b.WriteString("## Retention\n\n")
	fmt.Fprintf(&b, "This run's retention is %s. Eager and Adaptive drop only what retention allows (storage-engine/retention): a "+
		"version is dropped only when a newer version of its key at or below the merge's horizon is kept and no open snapshot reads it. "+
		"Under a GC window (`gcTTL`, the engine's default) the horizon is now − gcTTL, so only versions superseded longer ago go: while "+
		"a memstore is younger than the window there is nothing to drop, and Eager and Adaptive act as Basic (a compaction would only "+
		"copy the data). With a retention that keeps every version (`--max-versions 0 --gc-ttl 0`) they always act as Basic.\n",
		retentionString(c.MaxVersions, c.GCTTL))
	return b.String()
}

func pacedString(c Config) string {
	if c.PacedWrites == 0 {
		return ""
	}
	return fmt.Sprintf("After those puts (and their final flush and compactions) every policy's region is brought to the same disk: "+
		"a major compaction into one SST file and a scan of the whole key space, which puts every block of it in the cache "+
		"(neither counted in the figures above). Then the same writers issue %d more puts at %d puts/s in all (a rate every policy sustains), "+
		"with the reader running again: the read latency under the same write load, from the same files. ", c.PacedWrites, c.PacedWritesPerSec)
}

func retentionString(maxVersions int, gcTTL time.Duration) string {
	if maxVersions == 0 && gcTTL > 0 {
		return fmt.Sprintf("a GC window of %v (maxVersions 0, gcTTL %v)", gcTTL, gcTTL)
	}
	if maxVersions == 0 {
		return "every version (maxVersions 0, no GC window)"
	}
	if maxVersions == 1 {
		return "one version (maxVersions 1)"
	}
	return fmt.Sprintf("%d versions (maxVersions %d)", maxVersions, maxVersions)
}

func distTitle(dist string, theta float64) string {
	if dist == Zipf {
		return fmt.Sprintf("Zipf (θ = %.2f)", theta)
	}
	return "Uniform (reference)"
}

// spreadString is "median [min–max]" of a figure scaled by scale.
func spreadString(s Spread, scale float64, format string) string {
	if s.N == 0 {
		return "n/a"
	}
	med := fmt.Sprintf(format, s.Median*scale)
	if s.N < 2 {
		return med
	}
	return fmt.Sprintf("%s ["+format+"–"+format+"]", med, s.Min*scale, s.Max*scale)
}

func mib(n float64) string { return fmt.Sprintf("%.0f MiB", n/(1<<20)) }

// regime states the regime from the run itself: how many puts None took
// per disk flush, and what share of that many draws of each distribution
// are distinct keys (sampled with the run's generators).
func regime(rep Report) string {
	c := rep.Config
	none, ok := rep.Find(string(memstore.None), firstOr(c.Distributions, Zipf))
	if !ok || none.Flushes == 0 {
		return fmt.Sprintf("%d keys; None did not flush, so a memstore's worth of puts is not measured: outside the regime "+
			"(run at least several memstores' worth of writes).", c.Keys)
	}
	perFlush := int(float64(c.Writes) / none.Flushes)
	var parts []string
	for _, dist := range c.Distributions {
		d := distinctShare(c, dist, perFlush)
		parts = append(parts, fmt.Sprintf("%s: %.0f%% distinct (%.0f%% of the writes are to a key already written in that memstore)", dist, d*100, (1-d)*100))
	}
	return fmt.Sprintf("None flushed its %s memstore about every %d puts (%s of raw data), %d keys in all. Of %d draws of the key "+
		"distribution (one memstore's worth): %s. Under Zipf the hot keys are overwritten many times within one memstore, "+
		"the regime where in-memory compaction matters (the paper: 2M keys per region, a region memstore flushed about every 340K puts); "+
		"under uniform keys almost every write is to a new key, the reference case where it cannot help.",
		mib(float64(c.MemstoreBytes)), perFlush, mib(float64(perFlush*(c.KeySize+c.ValueSize))), c.Keys, perFlush, strings.Join(parts, "; "))
}

func firstOr(s []string, def string) string {
	for _, v := range s {
		if v == def {
			return v
		}
	}
	if len(s) > 0 {
		return s[0]
	}
	return def
}

// distinctShare is the share of distinct keys in n draws of a
// distribution, with the bench's own generator.
func distinctShare(c Config, dist string, n int) float64 {
	if n <= 0 || c.Keys <= 0 {
		return 0
	}
	rng := rand.New(rand.NewPCG(c.Seed, 77))
	next := newKeyGen(c, dist, rng)
	seen := make([]uint64, (c.Keys+63)/64)
	distinct := 0
	for i := 0; i < n; i++ {
		k := next()
		if seen[k/64]&(1<<(k%64)) == 0 {
			seen[k/64] |= 1 << (k % 64)
			distinct++
		}
	}
	return float64(distinct) / float64(n)
}

var distColors = map[string]color.RGBA{Zipf: {0xd6, 0x27, 0x28, 0xff}, Uniform: {0x1f, 0x77, 0xb4, 0xff}}

// medianRange is medians with min/max whiskers, for YErrorBars.
type medianRange struct {
	plotter.XYs
	lo, hi []float64
}

func (m medianRange) YError(i int) (float64, float64) { return m.Y(i) - m.lo[i], m.hi[i] - m.Y(i) }

func (m medianRange) Y(i int) float64 { return m.XYs[i].Y }

// plotPNG draws six panels (write throughput, disk flushes, SST bytes
// written, GC CPU share, get p99, mean scan latency) per policy, a point per
// distribution at the median with a whisker over the runs' range.
func plotPNG(path string, rep Report) error {
	panels := []struct {
		title, unit, metric string
		scale               float64
	}{
		{"Write throughput", "puts/s (thousands)", "write_ops_per_s", 1e-3},
		{"Disk flushes", "flushes per run", "flushes", 1},
		{"SST bytes written (flush + compaction)", "MiB per run", "sst_bytes", 1.0 / (1 << 20)},
		{"GC CPU share during the writes", "% of all CPU", "gc_cpu_share", 100},
		{"Get p99 during the writes", "ms", "get_p99_ms", 1},
		{"20-key scan, mean, during the writes", "ms", "scan_mean_ms", 1},
	}
	const cols = 3
	policies := rep.Config.Policies
	dists := rep.Config.Distributions
	plots := make([][]*plot.Plot, (len(panels)+cols-1)/cols)
	for i, pn := range panels {
		p := plot.New()
		p.Title.Text = pn.title
		p.Y.Label.Text = pn.unit
		p.Y.Min = 0
		p.Legend.Top = true
		p.NominalX(policies...)
		p.Add(plotter.NewGrid())
		top := 0.0
		for di, dist := range dists {
			var mr medianRange
			for pi, pol := range policies {
				r, ok := rep.Find(pol, dist)
				if !ok {
					continue
				}
				s := r.Spread[pn.metric]
				x := float64(pi) + (float64(di)-float64(len(dists)-1)/2)*0.18
				mr.XYs = append(mr.XYs, plotter.XY{X: x, Y: s.Median * pn.scale})
				mr.lo = append(mr.lo, s.Min*pn.scale)
				mr.hi = append(mr.hi, s.Max*pn.scale)
				top = max(top, s.Max*pn.scale)
			}
			if len(mr.XYs) == 0 {
				continue
			}
			col := distColors[dist]
			sc, err := plotter.NewScatter(mr.XYs)
			if err != nil {
				return err
			}
			sc.Color = col
			sc.Radius = vg.Points(3.5)
			sc.Shape = draw.CircleGlyph{}
			eb, err := plotter.NewYErrorBars(mr)
			if err != nil {
				return err
			}
			eb.Color = col
			eb.Width = vg.Points(1.2)
			p.Add(sc, eb)
			if i == 0 {
				p.Legend.Add(dist, sc)
			}
		}
		// Headroom above the highest whisker for the legend.
		p.Y.Max = max(top*1.2, 1e-9)
		p.X.Min, p.X.Max = -0.5, float64(len(policies))-0.5
		plots[i/cols] = append(plots[i/cols], p)
	}
	const w, h = 15 * vg.Inch, 8 * vg.Inch
	img := vgimg.New(w, h)
	dc := draw.New(img)
	title := fmt.Sprintf("Memstore policies: median over %d runs, whiskers min–max (%d keys, %s memstore, retention %s)",
		rep.Config.Runs, rep.Config.Keys, mib(float64(rep.Config.MemstoreBytes)), retentionString(rep.Config.MaxVersions, rep.Config.GCTTL))
	top := dc.Max.Y - vg.Points(4)
	sty := plot.New().Title.TextStyle
	sty.XAlign, sty.YAlign = draw.XCenter, draw.YTop
	dc.FillText(sty, vg.Point{X: (dc.Min.X + dc.Max.X) / 2, Y: top}, title)
	tiles := draw.Tiles{Rows: len(plots), Cols: cols, PadTop: vg.Points(22), PadX: vg.Points(18), PadY: vg.Points(14), PadLeft: vg.Points(6), PadRight: vg.Points(10), PadBottom: vg.Points(6)}
	canvases := plot.Align(plots, tiles, dc)
	for j := range plots {
		for i := range plots[j] {
			plots[j][i].Draw(canvases[j][i])
		}
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	png := vgimg.PngCanvas{Canvas: img}
	if _, err := png.WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
