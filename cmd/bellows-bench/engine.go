package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strings"

	"github.com/spf13/cobra"

	"github.com/bellows-kv/bellows/bench/engine"
	"github.com/bellows-kv/bellows/bench/report"
)

// newEngineCommand runs the engine workloads against Bellows and Pebble in
// one process, one engine after the other on fresh directories, and writes
// a Markdown report with the Bellows/Pebble ratio per workload.
func newEngineCommand() *cobra.Command {
	var c engine.Config
	var out, dir, cpuprofile string
	var memtable, cache int64
	var pebbleFirst bool
	var nruns int
	cmd := &cobra.Command{
		Use:   "engine",
		Short: "Bellows vs Pebble (configured as CockroachDB runs it) on the same workloads (fill, reads, YCSB A/B, short and long scans, sync writes); writes a Markdown report",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c.Budget = engine.Budget{MemtableBytes: memtable << 20, CacheBytes: cache << 20}
			if c.Keys <= 0 || c.Threads <= 0 || c.KeySize < 8 || c.ScanLen <= 0 || c.LongScanLen <= 0 {
				return errors.New("--keys, --threads, --scan-len and --long-scan-len must be positive and --key-size at least 8")
			}
			if nruns < 1 {
				return errors.New("--runs must be at least 1")
			}
			if c.Ops < c.Threads || c.ScanOps < c.Threads || c.LongScanOps < c.Threads || c.SyncOps < c.Threads {
				return errors.New("--ops, --scan-ops, --long-scan-ops and --sync-ops must be at least --threads")
			}
			work := dir
			if work == "" {
				d, err := os.MkdirTemp("", "engine-bench-")
				if err != nil {
					return err
				}
				defer os.RemoveAll(d)
				work = d
			}
			progress := func(s string) { fmt.Fprintln(cmd.ErrOrStderr(), s) }
			var prof *os.File
			if cpuprofile != "" {
				f, err := os.Create(cpuprofile)
				if err != nil {
					return err
				}
				defer f.Close()
				prof = f
			}
			prov := report.Now()
			var runs []engine.Run
			for i := 0; i < nruns; i++ {
				// The order alternates, starting with Bellows unless
				// --pebble-first.
				run := engine.Run{BellowsFirst: (i%2 == 0) != pebbleFirst}
				rdir := filepath.Join(work, fmt.Sprintf("run-%d", i+1))
				progress(fmt.Sprintf("run %d of %d: %s first", i+1, nruns, map[bool]string{true: "bellows", false: "pebble"}[run.BellowsFirst]))
				for _, bellowsTurn := range []bool{run.BellowsFirst, !run.BellowsFirst} {
					var err error
					if bellowsTurn {
						run.Bellows, run.Memory, err = runBellows(filepath.Join(rdir, "bellows"), c, progress, prof, i == 0)
					} else {
						run.Pebble, err = runPebble(filepath.Join(rdir, "pebble"), c, progress)
					}
					if err != nil {
						return err
					}
				}
				runs = append(runs, run)
				// Each run's files go once it is done: a 2M-key run
				// leaves about a gigabyte.
				if err := os.RemoveAll(rdir); err != nil {
					return err
				}
			}
			header := engineHeader(prov)
			return writeEngineReport(cmd, out, engine.Markdown(c, header, runs), struct {
				Header string `json:"header"`
				report.Provenance
				Config engine.Config `json:"config"`
				Runs   []engine.Run  `json:"runs"`
			}{header, prov, c, runs})
		},
	}
	f := cmd.Flags()
	f.StringVar(&out, "out", "bench/results/engine.md", "report file")
	f.StringVar(&dir, "dir", "", "working directory (default: a temporary directory)")
	f.IntVar(&c.Keys, "keys", 1_000_000, "keys loaded by fill-random")
	f.IntVar(&c.KeySize, "key-size", 16, "key bytes")
	f.IntVar(&c.ValueSize, "value-size", 100, "value bytes")
	f.IntVar(&c.Ops, "ops", 400_000, "operations per read or mixed workload")
	f.IntVar(&c.ScanOps, "scan-ops", 100_000, "scans in the short-scan workload")
	f.IntVar(&c.ScanLen, "scan-len", 20, "keys per short scan")
	f.IntVar(&c.LongScanOps, "long-scan-ops", 20_000, "scans in the long-scan workload")
	f.IntVar(&c.LongScanLen, "long-scan-len", 100, "keys per long scan")
	f.IntVar(&c.SyncOps, "sync-ops", 20_000, "writes in the sync-write workload (fsync per write)")
	f.IntVar(&c.Threads, "threads", 2, "client goroutines for read, mixed and sync-write workloads")
	f.Float64Var(&c.Theta, "theta", 0.99, "Zipf skew")
	f.Uint64Var(&c.Seed, "seed", 42, "workload seed")
	f.Int64Var(&memtable, "memtable-mib", 32, "memtable budget per engine (MiB)")
	f.Int64Var(&cache, "cache-mib", 64, "block cache budget per engine (MiB)")
	f.BoolVar(&pebbleFirst, "pebble-first", false, "run Pebble before Bellows in the first run (the order alternates from run to run)")
	f.IntVar(&nruns, "runs", 3, "runs of the whole suite on both engines, the engines' order alternating; the report gives medians and ranges")
	f.StringVar(&cpuprofile, "cpuprofile", "", "write a CPU profile of the first run's Bellows turn to this file")
	return cmd
}

// engineHeader is an engine report's provenance line and machine.
func engineHeader(prov report.Provenance) string {
	return report.Header(report.Command(os.Args[1:]), prov) +
		fmt.Sprintf("Machine: %s/%s, %d CPUs, %s.", runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), runtime.Version())
}

// writeEngineReport prints md and writes it to out, and data as JSON beside
// it (out's name with .json).
func writeEngineReport(cmd *cobra.Command, out, md string, data any) error {
	fmt.Fprint(cmd.OutOrStdout(), md)
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(out, []byte(md), 0o644); err != nil {
		return err
	}
	raw, err := json.MarshalIndent(data, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(strings.TrimSuffix(out, filepath.Ext(out))+".json", raw, 0o644)
}

// runPebble runs the suite on a fresh Pebble in dir.
func runPebble(dir string, c engine.Config, progress func(string)) ([]engine.Result, error) {
	p, err := engine.OpenPebble(dir, c.Budget)
	if err != nil {
		return nil, err
	}
	res, err := engine.Workloads(p, c, progress)
	return res, errors.Join(err, p.Close())
}

// runBellows runs the suite on a fresh Bellows region in dir, under the CPU
// profiler writing to prof if profile is set.
func runBellows(dir string, c engine.Config, progress func(string), prof *os.File, profile bool) ([]engine.Result, engine.Memory, error) {
	b, err := engine.OpenBellows(dir, c.Budget)
	if err != nil {
		return nil, engine.Memory{}, err
	}
	if profile && prof != nil {
		if err := pprof.StartCPUProfile(prof); err != nil {
			b.Close()
			return nil, engine.Memory{}, err
		}
	}
	res, err := engine.Workloads(b, c, progress)
	if profile && prof != nil {
		pprof.StopCPUProfile()
	}
	mem := engine.Memory{BellowsOpens: b.Opens, BellowsTableBytes: b.TableMemoryBytes()}
	return res, mem, errors.Join(err, b.Close())
}
