package main

import (
	"fmt"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/bellows-kv/bellows/bench/report"
	"github.com/bellows-kv/bellows/bench/txn"
)

func newTxnCommand() *cobra.Command {
	cfg := txn.Default()
	var out, bellows string
	cmd := &cobra.Command{
		Use:   "txn",
		Short: "What snapshot-isolation transactions cost, and how long recovery takes with and without the WAL bound",
		Long: "throughput: drives an in-process region with an async WAL: Workers goroutines commit 4 random writes\n" +
			"each, as transactions and as plain batches, in interleaved runs (throughput ratio, goal ≥ 0.5×).\n" +
			"contention: transactions incrementing 2 keys of 10000, 100 and 10 hot keys (abort rate, commits/s, and a\n" +
			"check that no update was lost).\n" +
			"crossregion: two-write transactions across regions of two `bellows store` processes against ones in one region\n" +
			"(commit rate ratio, goal ≥ 0.33×).\n" +
			"writes: against the same two stores, compare-and-set against puts (goal ≥ 0.8×) and batches across two\n" +
			"regions against batches in one (goal ≥ 0.33×).\n" +
			"serializable: transactions reading 4 keys and writing 2, serializable against snapshot isolation, through the same\n" +
			"two stores: throughput at no contention (goal ≥ 0.8×) and the share of commits refused over 1024 and 32 hot keys.\n" +
			"bank: the bank workload against two `bellows store` processes, SIGKILLed and restarted in turn (invariant and\n" +
			"snapshot-isolation violations, goal 0).\n" +
			"recovery: a writer process SIGKILLed after each --recovery-uptimes, with and without the WAL bound; the\n" +
			"store's recovery time and replayed bytes (goal: flat in uptime, ≤ 2 s per GiB of memstore budget).\n" +
			"Writes txn.json and txn.md into --out. About 10 minutes; run it on an otherwise idle machine.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			self, err := os.Executable()
			if err != nil {
				return err
			}
			cfg.Self = self
			if slices.ContainsFunc(cfg.Sections, func(s string) bool { return s == "bank" || s == "crossregion" || s == "writes" || s == "serializable" }) {
				if cfg.Bellows, err = findBellows(bellows); err != nil {
					return err
				}
			}
			work, err := os.MkdirTemp("", "bellows-bench-txn-")
			if err != nil {
				return err
			}
			defer os.RemoveAll(work)
			prov := report.Now()
			rep, err := txn.Run(ctx, cfg, work, func(s string) { fmt.Fprintln(cmd.ErrOrStderr(), s) })
			if err != nil {
				return err
			}
			rep.Command, rep.Provenance = report.Command(os.Args[1:]), prov
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
	cmd.Flags().StringSliceVar(&cfg.Sections, "sections", cfg.Sections, "parts to run, of "+strings.Join(txn.Sections, ","))
	cmd.Flags().DurationSliceVar(&cfg.RecoveryUptimes, "recovery-uptimes", cfg.RecoveryUptimes, "how long each recovery writer runs before it is killed")
	cmd.Flags().IntVar(&cfg.CrossWorkers, "cross-workers", cfg.CrossWorkers, "client goroutines in the crossregion, writes and serializable sections")
	cmd.Flags().IntVar(&cfg.BankCrashes, "bank-crashes", cfg.BankCrashes, "store crashes in the bank section")
	cmd.Flags().IntVar(&cfg.BankTransfersPerCrash, "bank-transfers", cfg.BankTransfersPerCrash, "committed transfers before each bank crash, and after the last")
	cmd.Flags().StringVar(&bellows, "bellows", "", "the bellows binary for the crossregion and bank sections' stores (default: bellows next to this binary, then $PATH)")
	cmd.Flags().IntVar(&cfg.RecoveryRate, "recovery-rate", cfg.RecoveryRate, "the recovery writer's rate, bytes/s")
	cmd.AddCommand(newRecoveryWriterCommand())
	return cmd
}

// newRecoveryWriterCommand is the recovery section's writer process.
func newRecoveryWriterCommand() *cobra.Command {
	var (
		dir       string
		rate      int
		unbounded bool
	)
	cmd := &cobra.Command{
		Use:    txn.RecoveryWriterCommand,
		Short:  "The recovery measurement's writer: writes into a store in --dir until it is killed",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return txn.RunRecoveryWriter(cmd.Context(), dir, unbounded, rate)
		},
	}
	cmd.Flags().StringVar(&dir, "dir", "", "the store's directory (bucket and WAL)")
	cmd.Flags().IntVar(&rate, "rate", 0, "bytes/s")
	cmd.Flags().BoolVar(&unbounded, "unbounded", false, "lift every WAL bound out of reach")
	_ = cmd.MarkFlagRequired("dir")
	_ = cmd.MarkFlagRequired("rate")
	return cmd
}
