package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/bellows-kv/bellows/bench/engine"
)

// newEngineCommand runs the engine workloads against Bellows and Pebble in
// one process, one engine after the other on fresh directories, and writes
// a Markdown report with the Bellows/Pebble ratio per workload.
func newEngineCommand() *cobra.Command {
	var c engine.Config
	var out, dir, cpuprofile string
	var memtable, cache int64
	var pebbleFirst bool
	cmd := &cobra.Command{
		Use:   "engine",
		Short: "Bellows vs Pebble (configured as CockroachDB runs it) on the same workloads (fill, reads, YCSB A/B, short and long scans, sync writes); writes a Markdown report",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c.Budget = engine.Budget{MemtableBytes: memtable << 20, CacheBytes: cache << 20}
			if c.Keys <= 0 || c.Threads <= 0 || c.KeySize < 8 || c.ScanLen <= 0 || c.LongScanLen <= 0 {
				return errors.New("--keys, --threads, --scan-len and --long-scan-len must be positive and --key-size at least 8")
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
			runPebble := func() ([]engine.Result, error) {
				p, err := engine.OpenPebble(filepath.Join(work, "pebble"), c.Budget)
				if err != nil {
					return nil, err
				}
				defer p.Close()
				return engine.Workloads(p, c, progress)
			}
			var pr []engine.Result
			var err error
			if pebbleFirst {
				if pr, err = runPebble(); err != nil {
					return err
				}
			}
			b, err := engine.OpenBellows(filepath.Join(work, "bellows"), c.Budget)
			if err != nil {
				return err
			}
			if cpuprofile != "" {
				f, err := os.Create(cpuprofile)
				if err != nil {
					return err
				}
				if err := pprof.StartCPUProfile(f); err != nil {
					return err
				}
			}
			br, err := engine.Workloads(b, c, progress)
			pprof.StopCPUProfile()
			if err != nil {
				b.Close()
				return err
			}
			mem := engine.Memory{BellowsOpens: b.Opens, BellowsTableBytes: b.TableMemoryBytes()}
			if err := b.Close(); err != nil {
				return err
			}
			if !pebbleFirst {
				if pr, err = runPebble(); err != nil {
					return err
				}
			}
			header := fmt.Sprintf("Run %s on %s/%s, %d CPUs, %s. Command: `make bench-engine` (`bellows-bench engine %s`).",
				time.Now().UTC().Format(time.RFC3339), runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), runtime.Version(), strings.Join(os.Args[2:], " "))
			report := engine.Markdown(c, header, br, pr, mem)
			fmt.Fprint(cmd.OutOrStdout(), report)
			if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
				return err
			}
			return os.WriteFile(out, []byte(report), 0o644)
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
	f.BoolVar(&pebbleFirst, "pebble-first", false, "run Pebble before Bellows (to check order effects)")
	f.StringVar(&cpuprofile, "cpuprofile", "", "write a CPU profile of the Bellows run to this file")
	return cmd
}
