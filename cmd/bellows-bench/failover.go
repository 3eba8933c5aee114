package main

import (
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/bellows-kv/bellows/bench/failover"
	"github.com/bellows-kv/bellows/bench/report"
)

func newFailoverCommand() *cobra.Command {
	cfg := failover.Default()
	var out, bellows string
	var bandwidth float64
	var render bool
	cmd := &cobra.Command{
		Use:   "failover",
		Short: "A store lost with its volume: time to the first write to each of its regions, write latency and lost writes, Bucket against Local durability",
		Long: "Per run: 3 `bellows store` processes (--regions regions, --durability Bucket or Local) over a fresh file bucket\n" +
			"with a cost model (--read-latency per read + --bandwidth-mbps, --write-latency per write); a Go client writes\n" +
			"--rate writes/s to every region from --writers-per-region goroutines each and records every acknowledged write;\n" +
			"after --warmup and --steady, one store is SIGKILLed and its WAL directory deleted; the writes go on for --after;\n" +
			"then every acknowledged write is read back. Per region of the killed store: the time from the kill to its first\n" +
			"acknowledged write. Goals (issue #51): ≤ 5 s median and ≤ 10 s worst, 0 acknowledged writes lost in Bucket mode;\n" +
			"write p50/p99 and the lost writes of both modes reported. The modes' runs are interleaved, --runs each.\n" +
			"Writes failover.json, failover.md and failover.png into --out. About 40 s per run (7 minutes at the defaults).",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if render {
				rep, err := failover.ReadJSON(filepath.Join(out, failover.Name+".json"))
				if err != nil {
					return err
				}
				rep.Summary = failover.Summarize(rep.Runs, rep.Settings.Modes)
				return failover.Write(out, rep)
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			cfg.Model.Bandwidth = bandwidth * 1e6
			var err error
			if cfg.Bellows, err = findBellows(bellows); err != nil {
				return err
			}
			work := cfg.KeepDir
			if work == "" {
				if work, err = os.MkdirTemp("", "bellows-bench-failover-"); err != nil {
					return err
				}
				defer os.RemoveAll(work)
			}
			prov := report.Now()
			runs, err := failover.Run(ctx, cfg, work, func(s string) { fmt.Fprintln(cmd.ErrOrStderr(), s) })
			if err != nil {
				return err
			}
			rep := failover.Report{Command: report.Command(os.Args[1:]), Provenance: prov, Settings: failover.SettingsOf(cfg),
				Summary: failover.Summarize(runs, cfg.Modes), Runs: runs}
			if err := failover.Write(out, rep); err != nil {
				return err
			}
			fmt.Fprint(cmd.OutOrStdout(), failover.Markdown(rep))
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&out, "out", "bench/results", "directory for failover.json, failover.md and failover.png")
	f.StringVar(&bellows, "bellows", "", "the bellows binary the stores run (default: bellows next to this binary, then $PATH)")
	f.IntVar(&cfg.Runs, "runs", cfg.Runs, "runs per mode, interleaved")
	f.StringSliceVar(&cfg.Modes, "modes", cfg.Modes, "durability modes to run, of Bucket,Local")
	f.IntVar(&cfg.Stores, "stores", cfg.Stores, "store processes")
	f.IntVar(&cfg.Regions, "regions", cfg.Regions, "regions (the stores' --regions)")
	f.IntVar(&cfg.WritersPerRegion, "writers-per-region", cfg.WritersPerRegion, "client goroutines writing to each region")
	f.IntVar(&cfg.Rate, "rate", cfg.Rate, "writes per second, all writers together")
	f.IntVar(&cfg.ValueBytes, "value-bytes", cfg.ValueBytes, "bytes per value")
	f.DurationVar(&cfg.Warmup, "warmup", cfg.Warmup, "writes before the latency window")
	f.DurationVar(&cfg.Steady, "steady", cfg.Steady, "the latency window before the kill")
	f.DurationVar(&cfg.After, "after", cfg.After, "how long the writes go on after the kill")
	f.DurationVar(&cfg.Model.Latency, "read-latency", cfg.Model.Latency, "the bucket model's latency per read")
	f.Float64Var(&bandwidth, "bandwidth-mbps", cfg.Model.Bandwidth/1e6, "the bucket model's bandwidth per read or write, MB/s")
	f.DurationVar(&cfg.Model.WriteLatency, "write-latency", cfg.Model.WriteLatency, "the bucket model's latency per write (PUT)")
	f.DurationVar(&cfg.BalanceInterval, "balance-interval", cfg.BalanceInterval, "the stores' --balance-interval")
	f.DurationVar(&cfg.ArchiveInterval, "wal-archive-interval", cfg.ArchiveInterval, "the stores' --wal-archive-interval (Local mode's RPO)")
	f.DurationVar(&cfg.WriteTimeout, "write-timeout", cfg.WriteTimeout, "how long one client write may take, retries included")
	f.StringVar(&cfg.KeepDir, "keep-dir", "", "run in this directory and keep it (the stores' logs and data); default a temporary one, removed")
	f.BoolVar(&render, "render", false, "instead: rewrite --out's failover.md and failover.png from its failover.json (after findings were added to it)")
	return cmd
}
