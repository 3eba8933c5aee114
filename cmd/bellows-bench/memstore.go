package main

import (
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"syscall"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"

	"github.com/bellows-kv/bellows/bench/memstore"
	"github.com/bellows-kv/bellows/bench/report"
	"github.com/bellows-kv/bellows/internal/contract"
)

func newMemstoreCommand() *cobra.Command {
	cfg := memstore.Default()
	var out, name, policies, dists, fromJSON, work, cpuprofile, memprofile string
	var memstoreMiB, cacheMiB int64
	cmd := &cobra.Command{
		Use:   "memstore",
		Short: "Reproduce Accordion's write results: the four memstore policies on the same write workload, with a reader",
		Long: "Runs each in-memory compaction policy (None, Basic, Eager, Adaptive) on the same write-only workload in the\n" +
			"paper's shape scaled to this machine: 16 B keys, 100 B values, batches of ~10 KB from --writers goroutines, async WAL,\n" +
			"a 64 MiB memstore, retention of one version, Zipf θ = 0.99 and uniform keys; a reader alternates gets and 20-key\n" +
			"scans during the writes. Runs are interleaved over the policies (--runs rounds), each on a fresh region in a fresh\n" +
			"directory. Per policy and distribution: write throughput, disk flushes, compactions, SST bytes written (flush +\n" +
			"compaction), WAL bytes, in-memory flushes/merges/compactions, versions dropped, GC CPU share, get p99 and scan\n" +
			"latency; medians, spread and ratios to None. Writes memstore.json, memstore.md and memstore.png into --out.\n\n" +
			"The defaults are the full run: 2M keys, 3.5M puts (≈ 6 × 64 MiB of raw data, ~10 disk flushes under None) per\n" +
			"run, 5 runs × 4 policies × 2 distributions = 40 runs, each with a paced phase after the full-speed writes: about\n" +
			"25 minutes on two idle cores (make bench-memstore); the committed report is --runs 10 (about 45 minutes), which the\n" +
			"full-speed read goal needs on two cores. Run it on an otherwise idle machine; --writes, --keys, --runs and\n" +
			"--memstore-mib scale it.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if fromJSON != "" {
				rep, err := memstore.ReadJSON(fromJSON)
				if err != nil {
					return fmt.Errorf("--from-json: %w", err)
				}
				if err := memstore.Write(out, name, rep); err != nil {
					return err
				}
				fmt.Fprint(cmd.OutOrStdout(), memstore.Markdown(rep))
				return nil
			}
			cfg.Policies = splitList(policies)
			cfg.Distributions = splitList(dists)
			cfg.MemstoreBytes = memstoreMiB << 20
			cfg.CacheBytes = cacheMiB << 20
			if !cmd.Flags().Changed("writes") {
				cfg.Writes = memstore.DefaultWrites(cfg.MemstoreBytes, cfg.KeySize+cfg.ValueSize)
			}
			cfg = cfg.Resolved()
			if err := cfg.Validate(); err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			dir, err := os.MkdirTemp(work, "bellows-memstore-")
			if err != nil {
				return err
			}
			defer os.RemoveAll(dir)
			if cpuprofile != "" {
				f, err := os.Create(cpuprofile)
				if err != nil {
					return err
				}
				defer f.Close()
				if err := pprof.StartCPUProfile(f); err != nil {
					return err
				}
				defer pprof.StopCPUProfile()
			}
			if memprofile != "" {
				// Every allocation the run made (alloc_space), to find the
				// garbage that sets the GC's pace: go tool pprof -sample_index=alloc_space.
				// Created now, so a path that cannot be written fails before the run.
				f, err := os.Create(memprofile)
				if err != nil {
					return err
				}
				defer func() {
					if err := pprof.Lookup("allocs").WriteTo(f, 0); err != nil {
						fmt.Fprintf(cmd.ErrOrStderr(), "--memprofile %s: %v\n", memprofile, err)
					}
					_ = f.Close()
				}()
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "memstore bench: %s\n", cfg)
			bar := progressbar.NewOptions(1000, progressbar.OptionSetWriter(cmd.ErrOrStderr()),
				progressbar.OptionSetWidth(30), progressbar.OptionShowElapsedTimeOnFinish(), progressbar.OptionSetPredictTime(true))
			cfg.Command, cfg.Provenance = report.Command(os.Args[1:]), report.Now()
			rep, err := memstore.Run(ctx, cfg, dir, func(what string, done float64) {
				bar.Describe(fmt.Sprintf("%-48s", what))
				_ = bar.Set(int(done * 1000))
			})
			_ = bar.Finish()
			fmt.Fprintln(cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			if err := memstore.Write(out, name, rep); err != nil {
				return err
			}
			fmt.Fprint(cmd.OutOrStdout(), memstore.Markdown(rep))
			var files []string
			for _, f := range memstore.Files(name) {
				files = append(files, filepath.Join(out, f))
			}
			fmt.Fprintf(cmd.OutOrStdout(), "\nwrote %s\n", strings.Join(files, ", "))
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&out, "out", "bench/results", "directory for the report: NAME.json, NAME.md and NAME.png")
	f.StringVar(&name, "name", memstore.Name, "the report's name in --out: NAME.json, NAME.md and NAME.png")
	f.StringVar(&fromJSON, "from-json", "", "re-render memstore.md and memstore.png from an earlier memstore.json instead of running")
	f.StringVar(&cpuprofile, "cpuprofile", "", "write a CPU profile of the whole run to this file")
	f.StringVar(&memprofile, "memprofile", "", "write a profile of every allocation the run made (alloc_space) to this file")
	f.StringVar(&cfg.TraceDir, "trace-dir", "", "write a runtime execution trace of 3 s of each run's full-speed writes, from 4 s in, into this directory (where the reader waited: go tool trace -pprof=sched FILE, then pprof -focus 'reader\\).run')")
	f.DurationVar(&cfg.TraceSlow, "trace-slow", 0, "with --trace-dir: instead of the fixed window, keep a flight recorder over each run's full-speed writes and write its last 2 s at the first read that took this long or longer (<distribution>-<policy>-<round>-slow.trace; then bellows-bench tracewaits)")
	f.StringVar(&work, "dir", "", "where the runs' regions live (a temporary directory under it; default: $TMPDIR)")
	f.StringVar(&policies, "policies", strings.Join(cfg.Policies, ","), "memstore policies, in the order each round runs them (None is required: the ratios are against it)")
	f.StringVar(&dists, "distributions", strings.Join(cfg.Distributions, ","), "key distributions: zipf, uniform")
	f.IntVar(&cfg.Runs, "runs", cfg.Runs, "runs per policy and distribution, interleaved; the report gives medians and spread")
	f.IntVar(&cfg.Writes, "writes", cfg.Writes, "puts per run, all writers together (default: 6 × the memstore of raw data, rounded up to 100K)")
	f.IntVar(&cfg.PacedWrites, "paced-writes", cfg.PacedWrites, "puts after --writes at --paced-rate, with the reader measuring again: read latency under the same write load for every policy (0: skip)")
	f.IntVar(&cfg.PacedWritesPerSec, "paced-rate", cfg.PacedWritesPerSec, "puts per second, all writers together, of the paced writes (below every policy's full speed)")
	f.IntVar(&cfg.Keys, "keys", cfg.Keys, "key space: keys are drawn from [0, keys)")
	f.Int64Var(&memstoreMiB, "memstore-mib", cfg.MemstoreBytes>>20, "memstore flush size (MiB)")
	f.Int64Var(&cacheMiB, "cache-mib", cfg.CacheBytes>>20, "block cache (MiB)")
	f.BoolVar(&cfg.CacheFlushes, "cache-flushes", cfg.CacheFlushes, "cache each block a flush writes as it is written (engine.yaml blockCacheOnFlush)")
	f.IntVar(&cfg.Writers, "writers", cfg.Writers, "writer goroutines")
	f.IntVar(&cfg.BatchBytes, "batch-bytes", cfg.BatchBytes, "client-side batch size; a batch holds batch-bytes / (key + value size) puts")
	f.IntVar(&cfg.KeySize, "key-size", cfg.KeySize, "key bytes (at least 16)")
	f.IntVar(&cfg.ValueSize, "value-size", cfg.ValueSize, "value bytes")
	f.Float64Var(&cfg.Theta, "theta", cfg.Theta, "Zipf skew θ")
	f.IntVar(&cfg.ReadsPerSec, "reads", cfg.ReadsPerSec, "reader pace during the writes, reads per second (gets and scans alternate; 0: no reader)")
	f.BoolVar(&cfg.ReaderOwnCore, "reader-core", cfg.ReaderOwnCore, "give the reader the last CPU to itself in both phases (the writers, background work and GC on the others, GOMAXPROCS doubled so a P is free when it wakes): its latency is then its read path's, not time waiting for a CPU")
	f.BoolVar(&cfg.IdleWriters, "idle-writers", cfg.IdleWriters, "with --reader-core and --writer-yield=false: run each writer of the full-speed writes on a thread of its own under SCHED_IDLE (a starved idle writer holds its P through the GC's stop-the-world, up to a second: docs/memstore.md)")
	f.BoolVar(&cfg.WriterYield, "writer-yield", cfg.WriterYield, "with --reader-core: each writer of the full-speed writes yields its CPU (sched_yield) after each batch, as a server's handler does between requests")
	f.IntVar(&cfg.ScanLength, "scan-length", cfg.ScanLength, "keys per scan")
	f.IntVar(&cfg.MaxVersions, "max-versions", cfg.MaxVersions, "retention: versions kept per key (1: Eager/Adaptive can drop older versions; 0: no count bound, --gc-ttl decides)")
	f.DurationVar(&cfg.GCTTL, "gc-ttl", contract.DefaultGCTTL, "retention with --max-versions 0: the GC window (the engine's default retention); versions superseded longer ago are dropped. 0 keeps every version")
	f.Float64Var(&cfg.ActiveFraction, "active-fraction", cfg.ActiveFraction, "A: the active segment's share of the memstore")
	f.IntVar(&cfg.PipelineSegments, "pipeline-segments", cfg.PipelineSegments, "S: pipeline segments before a merge")
	f.Float64Var(&cfg.RedundancyThreshold, "redundancy-threshold", cfg.RedundancyThreshold, "R: Adaptive's redundancy threshold")
	f.Uint64Var(&cfg.Seed, "seed", cfg.Seed, "seed of the key and value streams")
	return cmd
}

func splitList(s string) []string {
	var out []string
	for _, v := range strings.Split(s, ",") {
		if v = strings.TrimSpace(v); v != "" {
			out = append(out, v)
		}
	}
	return out
}
