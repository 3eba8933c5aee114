package main

import (
	"fmt"
	"os"
	"os/signal"
	"runtime/pprof"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/bellows-kv/bellows/bench/report"
	"github.com/bellows-kv/bellows/bench/watch"
)

func newWatchCommand() *cobra.Command {
	cfg := watch.Default()
	var out, bellows, cpuprofile string
	cmd := &cobra.Command{
		Use:   "watch",
		Short: "How fast watches deliver changes, and what watchers cost writers",
		Long: "lag: one `bellows store` process of four regions, --rate puts/s of 100 B for --phase, one watcher of every key:\n" +
			"the delay from each change's commit timestamp to its delivery by client.Watch (goal: p99 ≤ 100 ms in every run).\n" +
			"throughput: --writers closed-loop writers without watchers, with --watchers watchers of every key, and without\n" +
			"again (goal: ≥ 0.9× the mean of the two without, by the median of the runs). Writes watch.json and watch.md into\n" +
			"--out. About two and a half minutes.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			var err error
			if cfg.Bellows, err = findBellows(bellows); err != nil {
				return err
			}
			if cfg.Runs < 1 || cfg.Rate < 1 || cfg.Writers < 1 || cfg.Watchers < 1 || cfg.Phase <= 0 {
				return fmt.Errorf("--runs, --rate, --writers, --watchers and --phase must be positive")
			}
			work, err := watch.Dir()
			if err != nil {
				return err
			}
			defer os.RemoveAll(work)
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
			prov := report.Now()
			rep, err := watch.Run(ctx, cfg, work, func(s string) { fmt.Fprintln(cmd.ErrOrStderr(), s) })
			if err != nil {
				return err
			}
			rep.Command, rep.Provenance = report.Command(os.Args[1:]), prov
			if err := watch.Write(out, rep); err != nil {
				return err
			}
			fmt.Fprint(cmd.OutOrStdout(), watch.Markdown(rep))
			return nil
		},
	}
	cmd.Flags().StringVar(&out, "out", "bench/results", "directory for watch.json and watch.md")
	cmd.Flags().IntVar(&cfg.Runs, "runs", cfg.Runs, "runs of each section")
	cmd.Flags().DurationVar(&cfg.Phase, "phase", cfg.Phase, "length of each measured phase")
	cmd.Flags().IntVar(&cfg.Rate, "rate", cfg.Rate, "paced puts/s in the lag section")
	cmd.Flags().IntVar(&cfg.Writers, "writers", cfg.Writers, "closed-loop writers in the throughput section")
	cmd.Flags().IntVar(&cfg.Watchers, "watchers", cfg.Watchers, "watchers in the throughput section")
	cmd.Flags().StringVar(&cpuprofile, "cpuprofile", "", "write a CPU profile of this process (the client's writers and watchers) to this file")
	cmd.Flags().StringVar(&bellows, "bellows", "", "the bellows binary for the store (default: bellows next to this binary, then $PATH)")
	return cmd
}
