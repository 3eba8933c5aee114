package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/dustin/go-humanize"
	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"

	"github.com/bellows-kv/bellows/autoscaler"
	"github.com/bellows-kv/bellows/bench/cpu"
	"github.com/bellows-kv/bellows/bench/phases"
	"github.com/bellows-kv/bellows/bench/report"
	"github.com/bellows-kv/bellows/internal/childproc"
	"github.com/bellows-kv/bellows/internal/contract"
)

func newPhasesCommand() *cobra.Command {
	cfg := phases.Default()
	var out, name, modes, latency, bandwidth, warmupRate, transferRate, cache, fromJSON, bellows string
	inProcess := false
	cmd := &cobra.Command{
		Use:   "phases",
		Short: "Reproduce the paper's Figure 7: read latency through compaction and warmup, per warmup mode",
		Long: "Loads a dataset into a region, runs a read workload (gets and short scans, Zipf) with concurrent updates,\n" +
			"triggers a major compaction and records get and scan latency in fixed windows through the compaction\n" +
			"and warmup phases, for each warmup mode in turn. Remote modes run the compaction on a bellows compactor\n" +
			"process. Writes phases.json, phases.md and phases.png into --out (--name: other names).\n\n" +
			"The defaults are the paper's regime (old + new > block cache ≥ data: the cache is data / 0.7), all seven\n" +
			"modes and an A/A copy of ThrottledIncremental (the run's resolution), six interleaved runs each, a bucket of 5ms per read + 200 MB/s and a worker link of 1ms per\n" +
			"FetchBlocks stream + 125 MB/s: about 22 minutes on two cores (make bench-phases).",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if fromJSON != "" {
				rep, err := phases.ReadJSON(fromJSON)
				if err != nil {
					return fmt.Errorf("--from-json: %w", err)
				}
				if err := phases.WriteNamed(out, name, rep); err != nil {
					return err
				}
				fmt.Fprint(cmd.OutOrStdout(), phases.Markdown(rep))
				return nil
			}
			var err error
			cfg.Modes = strings.Split(modes, ",")
			if cfg.Bucket.Latency, err = time.ParseDuration(latency); err != nil {
				return fmt.Errorf("--bucket-latency: %w", err)
			}
			if cfg.Bucket.Bandwidth, err = parseRate("bucket-bandwidth", bandwidth); err != nil {
				return err
			}
			wr, err := parseRate("warmup-rate", warmupRate)
			if err != nil {
				return err
			}
			cfg.WarmupRate = int64(wr)
			tr, err := parseRate("transfer-rate", transferRate)
			if err != nil {
				return err
			}
			cfg.TransferRate = int64(tr)
			// No --cache: data / 0.7 of the keys and value size run.
			cfg.CacheBytes = 0
			if cache != "" {
				cb, err := humanize.ParseBytes(cache)
				if err != nil {
					return fmt.Errorf("--cache: %w", err)
				}
				cfg.CacheBytes = int64(cb)
			}
			bin, err := findBellows(bellows)
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			work, err := os.MkdirTemp("", "bellows-phases-")
			if err != nil {
				return err
			}
			defer os.RemoveAll(work)

			// The store on CPU 0 and the compactor on CPU 1, so a remote
			// compaction does not take the store's CPU. A store process
			// leaves CPU 0 to itself: the workload (this process, the
			// clients) shares CPU 1 with the compactor.
			pinned := runtime.NumCPU() >= 2
			cfg.Pinning = "none (one CPU)"
			cfg.Store = "bellows store process, workload over gRPC"
			// RemoteCache's reads from workers run under the store's
			// remote-cache rate, and its misses fall back to the bucket
			// after the block timeout; the WAL archive is off, as the
			// paper's store has none (its bucket writes would be in every
			// mode's numbers).
			cfg.StoreFlags = []string{
				contract.Arg(contract.FlagRemoteCacheRate, fmt.Sprintf("%dB/s", contract.DefaultRemoteCacheRate)),
				contract.Arg(contract.FlagRemoteBlockTimeout, contract.DefaultRemoteBlockTimeout),
				contract.Arg(contract.FlagRemoteBlockRetryAfter, contract.DefaultRemoteBlockRetryAfter),
				contract.Arg(contract.FlagWALArchiveInterval, time.Duration(0)),
			}
			selfCPU := 1
			if inProcess {
				cfg.Store = "in-process region, no RPC"
				selfCPU = 0
			}
			if pinned {
				if err := cpu.PinProcess(0, selfCPU); err != nil {
					cfg.Pinning = "none (" + err.Error() + ")"
					pinned = false
				} else {
					// The runtime sized GOMAXPROCS from the CPUs this
					// process had when it started; it now has one. Two Ps
					// on one CPU leave a runnable goroutine waiting for the
					// kernel to switch threads (a time slice, milliseconds),
					// noise in every latency the workload records. The
					// store and the compactor start after this pinning and
					// so size theirs from the one CPU they inherit.
					runtime.GOMAXPROCS(1)
					if inProcess {
						cfg.Pinning = "store and workload on CPU 0, compactor on CPU 1; GOMAXPROCS 1 in each process"
					} else {
						cfg.Pinning = fmt.Sprintf("affinity: store on CPU 0; workload and compactor on CPU 1, the compactor SCHED_IDLE (it runs only "+
							"when the workload does not); the control store on CPU %d; GOMAXPROCS 1 in each process", cfg.ControlCPU)
					}
				}
			}
			transfer := "0"
			if cfg.TransferRate > 0 {
				transfer = fmt.Sprintf("%dB/s", cfg.TransferRate)
			}
			// The worker link's model: its latency per FetchBlocks stream
			// and its bandwidth (the transfer rate).
			linkLatency := time.Duration(cfg.LinkLatency).String()
			var procs phases.Processes
			procs.Compactor = func(ctx context.Context, name string) (string, int, func(), error) {
				c, err := childproc.Start(ctx, bin, name, work, "compactor", "--name="+name, "--listen=127.0.0.1:0",
					"--metrics-listen=127.0.0.1:0", "--cache-bytes=4GiB", "--transfer-rate="+transfer,
					contract.Arg(contract.FlagLinkLatency, linkLatency))
				if err != nil {
					return "", 0, nil, err
				}
				if pinned {
					if err := cpu.PinProcess(c.Cmd.Process.Pid, 1); err != nil {
						c.Stop()
						return "", 0, nil, err
					}
				}
				if !inProcess {
					// The workload shares CPU 1 with the compactor and must
					// not queue behind it: on their own machines neither
					// would wait for the other.
					if err := cpu.Idle(c.Cmd.Process.Pid); err != nil {
						c.Stop()
						return "", 0, nil, err
					}
				}
				return c.GRPC, c.Cmd.Process.Pid, c.Stop, nil
			}
			if !inProcess {
				procs.Store = func(ctx context.Context, name string, a phases.StoreArgs) (string, string, int, func(), error) {
					args := []string{"store", "--create-bucket", "--bucket=" + a.BucketURL, "--wal-dir=" + a.WALDir, "--config=" + a.Config,
						"--regions=1", "--listen=127.0.0.1:0", "--metrics-listen=127.0.0.1:0"}
					if a.Compactor != "" {
						args = append(args, "--compactors="+a.Compactor)
					}
					args = append(args, cfg.StoreFlags...)
					c, err := childproc.Start(ctx, bin, name, work, args...)
					if err != nil {
						return "", "", 0, nil, err
					}
					if pinned {
						at := 0
						if a.Control {
							at = cfg.ControlCPU
						}
						if err := cpu.PinProcess(c.Cmd.Process.Pid, at); err != nil {
							c.Stop()
							return "", "", 0, nil, err
						}
					}
					return c.GRPC, c.Metrics, c.Cmd.Process.Pid, c.Stop, nil
				}
			}
			bar := progressbar.NewOptions(1000, progressbar.OptionSetWriter(cmd.ErrOrStderr()),
				progressbar.OptionSetWidth(30), progressbar.OptionShowElapsedTimeOnFinish(), progressbar.OptionSetPredictTime(false))
			cfg.Command, cfg.Provenance = report.Command(os.Args[1:]), report.Now()
			rep, err := phases.Run(ctx, cfg, work, procs, func(what string, done float64) {
				bar.Describe(fmt.Sprintf("%-40s", what))
				_ = bar.Set(int(done * 1000))
			})
			_ = bar.Finish()
			fmt.Fprintln(cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			if err := phases.WriteNamed(out, name, rep); err != nil {
				return err
			}
			fmt.Fprint(cmd.OutOrStdout(), phases.Markdown(rep))
			fmt.Fprintf(cmd.OutOrStdout(), "\nwrote %s\n", strings.Join([]string{filepath.Join(out, name+".json"), filepath.Join(out, name+".md"), filepath.Join(out, name+".png")}, ", "))
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&out, "out", "bench/results", "directory for phases.json, phases.md and phases.png")
	f.StringVar(&name, "name", phases.Name, "the report's name in --out: NAME.json, NAME.md and NAME.png")
	f.StringVar(&bellows, "bellows", "", "the bellows binary that runs the store and compactor processes (default: bellows next to this binary, then $PATH)")
	f.StringVar(&fromJSON, "from-json", "", "re-render phases.md and phases.png from an earlier phases.json instead of running")
	f.BoolVar(&inProcess, "in-process", false, "run the region inside the bench process instead of a bellows store process reached over gRPC")
	f.StringVar(&modes, "modes", strings.Join(cfg.Modes, ","), "warmup modes to run (in this order without --shuffle)")
	f.IntVar(&cfg.Repeats, "repeat", cfg.Repeats, "run every mode this many times, interleaved: medians, and means with 95% bootstrap intervals")
	f.BoolVar(&cfg.ShuffleModes, "shuffle", cfg.ShuffleModes, "run each repetition's modes in an order of its own, drawn from the seed (false: the order of --modes)")
	f.IntVar(&cfg.Keys, "keys", cfg.Keys, "keys loaded")
	f.IntVar(&cfg.ValueSize, "value-size", cfg.ValueSize, "value bytes")
	f.IntVar(&cfg.Files, "files", cfg.Files, "SSTs before the major compaction")
	f.StringVar(&cache, "cache", "", "block cache; the paper's regime needs data ≤ cache < 2 × data, data = keys × value size (default: data / 0.7)")
	f.IntVar(&cfg.Readers, "readers", cfg.Readers, "reader goroutines")
	f.IntVar(&cfg.ReadsPerSec, "reads", cfg.ReadsPerSec, "reads per second, all readers together (open loop)")
	f.Float64Var(&cfg.ScanFraction, "scan-fraction", cfg.ScanFraction, "fraction of reads that are scans")
	f.IntVar(&cfg.ScanLength, "scan-length", cfg.ScanLength, "keys per scan")
	f.IntVar(&cfg.UpdatesPerSec, "updates", cfg.UpdatesPerSec, "updates per second during the run")
	f.IntVar(&cfg.ControlKeys, "control-keys", cfg.ControlKeys, "keys of the control store, read in the same seconds and never compacted, whose change is divided out of the target's (0: no control)")
	f.IntVar(&cfg.ControlReadsPerSec, "control-reads", cfg.ControlReadsPerSec, "reads per second of the control store")
	f.IntVar(&cfg.ControlCPU, "control-cpu", cfg.ControlCPU, "the CPU the control store runs on (the store runs on 0, the workload and the compactor on 1): beside the store it follows the store's CPU's drift, and also slows when the store's own work takes that CPU")
	f.StringVar(&latency, "bucket-latency", "5ms", "latency of every bucket read (the bucket's cost model)")
	f.StringVar(&bandwidth, "bucket-bandwidth", "200MB/s", "bandwidth of bucket reads")
	f.StringVar(&warmupRate, "warmup-rate", "8MB/s", "ThrottledIncremental's rate w")
	f.StringVar(&transferRate, "transfer-rate", "125MB/s", "the worker link's bandwidth: the compactor's FetchBlocks limit per stream (0: unlimited)")
	f.DurationVar((*time.Duration)(&cfg.LinkLatency), "link-latency", time.Duration(cfg.LinkLatency), "the worker link's latency: every FetchBlocks stream waits this long before its first block (compactor --link-latency)")
	f.DurationVar((*time.Duration)(&cfg.Baseline), "baseline", time.Duration(cfg.Baseline), "workload before the compaction starts")
	f.DurationVar((*time.Duration)(&cfg.Tail), "tail", time.Duration(cfg.Tail), "workload after the warmup ends")
	f.DurationVar((*time.Duration)(&cfg.Window), "window", time.Duration(cfg.Window), "latency window")
	return cmd
}

// findBellows is the bellows binary the benchmark starts: the flag, else the
// one next to this executable (make build puts both in bin/), else $PATH.
func findBellows(flag string) (string, error) {
	if flag != "" {
		return flag, nil
	}
	if self, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(self), "bellows")
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	p, err := exec.LookPath("bellows")
	if err != nil {
		return "", fmt.Errorf("no bellows binary next to bellows-bench or in $PATH: run make build or pass --bellows")
	}
	return p, nil
}

// parseRate accepts 8MB/s, 1GiB/min; empty or "0" is 0.
func parseRate(flag, s string) (float64, error) {
	if s == "" || s == "0" {
		return 0, nil
	}
	v, err := autoscaler.ParseByteRate(s)
	if err != nil {
		return 0, fmt.Errorf("--%s: %w", flag, err)
	}
	return v, nil
}
