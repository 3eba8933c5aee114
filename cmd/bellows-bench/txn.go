package main

import (
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/bellows-kv/bellows/bench/txn"
)

func newTxnCommand() *cobra.Command {
	cfg := txn.Default()
	var out string
	cmd := &cobra.Command{
		Use:   "txn",
		Short: "What snapshot-isolation transactions cost: 4-write transactions against batches, and aborts under contention",
		Long: "Drives an in-process region with an async WAL: Workers goroutines commit 4 random writes each, as\n" +
			"transactions and as plain batches, in interleaved runs (throughput ratio, goal ≥ 0.5×); then transactions\n" +
			"incrementing 2 keys of 10000, 100 and 10 hot keys (abort rate, commits/s, and a check that no update was\n" +
			"lost). Writes txn.json and txn.md into --out. About 2 minutes; run it on an otherwise idle machine.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			work, err := os.MkdirTemp("", "bellows-bench-txn-")
			if err != nil {
				return err
			}
			defer os.RemoveAll(work)
			rep, err := txn.Run(ctx, cfg, work, func(s string) { fmt.Fprintln(cmd.ErrOrStderr(), s) })
			if err != nil {
				return err
			}
			rep.Command = "bellows-bench " + strings.Join(os.Args[1:], " ")
			if err := txn.Write(out, rep); err != nil {
				return err
			}
			fmt.Fprint(cmd.OutOrStdout(), txn.Markdown(rep))
			return nil
		},
	}
	cmd.Flags().StringVar(&out, "out", "bench/results", "directory for txn.json and txn.md")
	cmd.Flags().IntVar(&cfg.Runs, "runs", cfg.Runs, "interleaved runs per mode")
	cmd.Flags().DurationVar(&cfg.Phase, "phase", cfg.Phase, "length of each measured phase")
	cmd.Flags().IntVar(&cfg.Workers, "workers", cfg.Workers, "writers in the throughput runs")
	return cmd
}
