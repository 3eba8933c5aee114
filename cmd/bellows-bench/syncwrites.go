package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/bellows-kv/bellows/bench/engine"
	"github.com/bellows-kv/bellows/bench/report"
)

// newSyncWritesCommand sweeps writes acknowledged after an fsync, Bellows
// against Pebble, over writer counts and value sizes.
func newSyncWritesCommand() *cobra.Command {
	c := engine.SyncSweepConfig{}
	var out, dir string
	var writers, sizes []int
	var memtable int64
	cmd := &cobra.Command{
		Use:   "sync-writes",
		Short: "Bellows vs Pebble (configured as CockroachDB runs it) on writes with an fsync each, over writer counts and value sizes; writes a Markdown report",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if c.Runs < 1 || c.OpsPerWriter < 1 || c.Keys < 1 {
				return errors.New("--runs, --ops-per-writer and --keys must be at least 1")
			}
			for _, w := range writers {
				for _, v := range sizes {
					if w < 1 || v < 1 {
						return fmt.Errorf("--writers and --value-sizes must be positive (got %d writers of %d B)", w, v)
					}
					c.Cells = append(c.Cells, engine.SyncCell{Writers: w, ValueSize: v})
				}
			}
			// Each engine's block cache is beside the point here: the
			// writes never read. Both get the same.
			c.Budget = engine.Budget{MemtableBytes: memtable << 20, CacheBytes: 16 << 20}
			work := dir
			if work == "" {
				d, err := os.MkdirTemp("", "sync-writes-bench-")
				if err != nil {
					return err
				}
				defer os.RemoveAll(d)
				work = d
			}
			prov := report.Now()
			runs, err := engine.SyncSweep(work, c, func(s string) { fmt.Fprintln(cmd.ErrOrStderr(), s) })
			if err != nil {
				return err
			}
			header := engineHeader(prov)
			return writeEngineReport(cmd, out, engine.SyncSweepMarkdown(c, header, runs), struct {
				Header string `json:"header"`
				report.Provenance
				Config engine.SyncSweepConfig `json:"config"`
				Runs   []engine.SyncRun       `json:"runs"`
			}{header, prov, c, runs})
		},
	}
	f := cmd.Flags()
	f.StringVar(&out, "out", "bench/results/sync-writes.md", "report file")
	f.StringVar(&dir, "dir", "", "working directory (default: a temporary directory)")
	f.IntSliceVar(&writers, "writers", []int{1, 4, 16}, "concurrent writers in each cell")
	f.IntSliceVar(&sizes, "value-sizes", []int{100, 1024, 4096}, "value bytes in each cell")
	f.IntVar(&c.OpsPerWriter, "ops-per-writer", 2000, "acknowledged writes of each writer in a cell")
	f.IntVar(&c.Runs, "runs", 3, "runs of every cell, the engines' order alternating")
	f.IntVar(&c.Keys, "keys", 1_000_000, "key space the writers draw from (uniform)")
	f.Uint64Var(&c.Seed, "seed", 42, "workload seed")
	f.Int64Var(&memtable, "memtable-mib", 32, "memtable budget per engine (MiB)")
	return cmd
}
