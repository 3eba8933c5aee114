package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/bellows-kv/bellows/bench/tracewaits"
)

// The memstore benchmark's reader: its goroutine, and what it does
// between its timed reads: the pacing, and reading its CPU clock.
const (
	memstoreReaderFunc  = "memstore.(*reader).run"
	memstoreReaderPace  = "rate.(*Limiter).Wait"
	memstoreReaderClock = "cpu.ThreadCPUTime"
)

func newTraceWaitsCommand() *cobra.Command {
	opt := tracewaits.Options{Goroutine: memstoreReaderFunc, Outside: []string{memstoreReaderPace, memstoreReaderClock}}
	cmd := &cobra.Command{
		Use:   "tracewaits TRACE...",
		Short: "Where a benchmark's reader waited inside its reads, by cause, from an execution trace (memstore --trace-dir)",
		Long: "Reads each runtime execution trace and accounts for the time one goroutine spent off its CPU, except the\n" +
			"spells that began in --outside (the pacing between reads, the reader's CPU clock): per cause (the state it left Running for and the\n" +
			"runtime's reason, the GC function on its stack, the innermost function of ours), how often, in all and the\n" +
			"longest. The defaults name the reader of `bellows-bench memstore --trace-dir` (docs/memstore.md).",
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			for _, path := range args {
				f, err := os.Open(path)
				if err != nil {
					return err
				}
				s, err := tracewaits.Analyze(f, opt)
				f.Close()
				if err != nil {
					return fmt.Errorf("%s: %w", path, err)
				}
				fmt.Fprintf(cmd.OutOrStdout(), "== %s\n", path)
				if err := tracewaits.Format(cmd.OutOrStdout(), s); err != nil {
					return err
				}
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&opt.Goroutine, "goroutine", opt.Goroutine, "the goroutine: the first with a stack frame whose function name contains this")
	cmd.Flags().StringSliceVar(&opt.Outside, "outside", opt.Outside, "spells off the CPU that began with one of these functions on the stack are outside the timed work")
	return cmd
}
