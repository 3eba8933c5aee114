package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/bellows-kv/bellows/bench/backup"
	"github.com/bellows-kv/bellows/bench/report"
)

func newBackupCommand() *cobra.Command {
	cfg := backup.Default()
	var out string
	var bandwidth float64
	cmd := &cobra.Command{
		Use:   "backup",
		Short: "What backups, restores and the WAL archive cost: copy throughput, p99 during a backup, restore s/GiB, the RPO",
		Long: "Loads --data of 1 KiB values into four in-process regions over a file bucket with a cost model, then in\n" +
			"--runs interleaved runs takes a backup copying every file under a read/write workload and runs the same\n" +
			"workload as long without one (throughput against the model, p99 ratios); restores the last backup --runs\n" +
			"times (s/GiB); and writes steadily for --rpo-phase while sampling the WAL archive's lag (the RPO).\n" +
			"Writes backup.json and backup.md into --out. About 3 minutes at the defaults.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			cfg.Model.Bandwidth = bandwidth * 1e6
			work, err := os.MkdirTemp("", "bellows-bench-backup-")
			if err != nil {
				return err
			}
			defer os.RemoveAll(work)
			prov := report.Now()
			rep, err := backup.Execute(ctx, cfg, work, func(s string) { fmt.Fprintln(cmd.ErrOrStderr(), s) })
			if err != nil {
				return err
			}
			rep.Command, rep.Provenance = report.Command(os.Args[1:]), prov
			if err := backup.Write(out, rep); err != nil {
				return err
			}
			fmt.Fprint(cmd.OutOrStdout(), backup.Markdown(rep))
			return nil
		},
	}
	cmd.Flags().StringVar(&out, "out", "bench/results", "directory for backup.json and backup.md")
	cmd.Flags().Int64Var(&cfg.Data, "data", cfg.Data, "bytes of values loaded")
	cmd.Flags().IntVar(&cfg.Runs, "runs", cfg.Runs, "interleaved runs with and without a backup, and restores")
	cmd.Flags().IntVar(&cfg.Workers, "workers", cfg.Workers, "goroutines of the read/write workload")
	cmd.Flags().IntVar(&cfg.Rate, "rate", cfg.Rate, "operations per second of the read/write workload, all workers together")
	cmd.Flags().DurationVar(&cfg.Model.Latency, "latency", cfg.Model.Latency, "the bucket model's latency per read or copy")
	cmd.Flags().Float64Var(&bandwidth, "bandwidth-mbps", cfg.Model.Bandwidth/1e6, "the bucket model's bandwidth per read or copy, MB/s")
	cmd.Flags().DurationVar(&cfg.ArchiveInterval, "archive-interval", cfg.ArchiveInterval, "the regions' WAL archive interval")
	cmd.Flags().DurationVar(&cfg.RPOPhase, "rpo-phase", cfg.RPOPhase, "how long the RPO section writes")
	cmd.Flags().IntVar(&cfg.RPORate, "rpo-rate", cfg.RPORate, "bytes per second the RPO section writes")
	return cmd
}
