package engine

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// SyncCell is one point of the sync-write sweep: concurrent writers and the
// value size they write.
type SyncCell struct {
	Writers   int
	ValueSize int
}

// SyncRun is one cell measured on both engines, one after the other.
type SyncRun struct {
	Cell         SyncCell
	BellowsFirst bool
	Bellows      Result
	Pebble       Result
}

// SyncSweepConfig says what the sweep runs.
type SyncSweepConfig struct {
	Cells []SyncCell
	// OpsPerWriter is each writer's acknowledged writes in a cell.
	OpsPerWriter int
	// Runs of every cell, the engines' order alternating.
	Runs   int
	Keys   int // the key space the writers draw from (uniform)
	Seed   uint64
	Budget Budget
}

// SyncSweep measures writes with an fsync before each acknowledgement,
// every cell on fresh engines of the budget in dir: uniform puts of new and
// existing keys from the cell's writers, each waiting for its own write.
// Both engines group-commit whatever their writers have appended meanwhile.
func SyncSweep(dir string, c SyncSweepConfig, progress func(string)) ([]SyncRun, error) {
	var runs []SyncRun
	for i := range c.Runs {
		for j, cell := range c.Cells {
			run := SyncRun{Cell: cell, BellowsFirst: (i+j)%2 == 0}
			wc := Config{Keys: c.Keys, KeySize: 16, ValueSize: cell.ValueSize, Threads: cell.Writers, Seed: c.Seed + uint64(i), Budget: c.Budget}
			for _, bellowsTurn := range []bool{run.BellowsFirst, !run.BellowsFirst} {
				edir := filepath.Join(dir, fmt.Sprintf("run-%d-cell-%d", i+1, j+1))
				var e Engine
				var err error
				if bellowsTurn {
					e, err = OpenBellows(edir, c.Budget)
				} else {
					e, err = OpenPebble(edir, c.Budget)
				}
				if err != nil {
					return nil, err
				}
				r, err := syncWrites(e, wc, c.OpsPerWriter*cell.Writers)
				err = errors.Join(err, e.Close(), os.RemoveAll(edir))
				if err != nil {
					return nil, err
				}
				if bellowsTurn {
					run.Bellows = r
				} else {
					run.Pebble = r
				}
				progress(fmt.Sprintf("run %d, %d writers of %d B: %s %.0f ops/s", i+1, cell.Writers, cell.ValueSize, e.Name(), r.OpsPerSec()))
			}
			runs = append(runs, run)
		}
	}
	return runs, nil
}

// syncWrites reopens e with an fsync per write and runs ops uniform puts.
func syncWrites(e Engine, c Config, ops int) (Result, error) {
	if err := e.Reopen(true); err != nil {
		return Result{}, fmt.Errorf("%s reopen with sync writes: %w", e.Name(), err)
	}
	return Mixed("sync writes", e, c, ops, 0, false, 0)
}

// SyncSweepMarkdown reports the sweep: per cell, the median over the runs
// of the Bellows/Pebble throughput ratio with its range, both engines'
// throughput, latency and CPU per write.
func SyncSweepMarkdown(c SyncSweepConfig, header string, runs []SyncRun) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# Sync writes: Bellows vs Pebble\n\n%s\n\n", header)
	fmt.Fprintf(&b, "**Goal** (fixed before the run): Bellows/Pebble throughput **≥ %.1f× in every cell** (the median of the runs' ratios), "+
		"for values from 100 B to 4 KiB and 1 to 16 writers (issue #52, part 3).\n\n", Goal)
	b.WriteString("## Regime\n\n")
	fmt.Fprintf(&b, "- Each cell: fresh engines, reopened with an fsync before each write is acknowledged (Bellows WAL mode sync, fdatasync; "+
		"Pebble `WriteOptions{Sync: true}`); then each writer puts %d values of the cell's size under 16-byte keys drawn uniformly "+
		"from %d, one at a time, waiting for each. Both engines group-commit what their writers appended while a sync ran.\n",
		c.OpsPerWriter, c.Keys)
	fmt.Fprintf(&b, "- Memtable %d MiB per engine, so the larger cells flush while they write, as a store does.\n", c.Budget.MemtableBytes>>20)
	fmt.Fprintf(&b, "- %d runs; the engines' order alternates from cell to cell and run to run. Tables give the median over the runs and, "+
		"in brackets, the lowest and highest. CPU µs/op is the process's CPU time during the cell over its writes. "+
		"The machine's disk and cores are shared with other work: a median within the spread of the goal is not a clear pass or miss.\n\n", c.Runs)
	b.WriteString("## Results\n\n")
	b.WriteString("| writers | value | ratio (Bellows/Pebble) | goal met | runs ≥ goal | Bellows ops/s | Pebble ops/s | " +
		"Bellows p50 / p99 ms | Pebble p50 / p99 ms | CPU µs/op Bellows / Pebble |\n")
	b.WriteString("|---:|---:|---:|:-:|:-:|---:|---:|---:|---:|---:|\n")
	met := 0
	for _, cell := range c.Cells {
		var ratios, bops, pops, bp50, bp99, pp50, pp99, bcpu, pcpu []float64
		for _, r := range runs {
			if r.Cell != cell {
				continue
			}
			ratios = append(ratios, r.Bellows.OpsPerSec()/r.Pebble.OpsPerSec())
			bops, pops = append(bops, r.Bellows.OpsPerSec()), append(pops, r.Pebble.OpsPerSec())
			bp50, bp99 = append(bp50, msf(r.Bellows.P50)), append(bp99, msf(r.Bellows.P99))
			pp50, pp99 = append(pp50, msf(r.Pebble.P50)), append(pp99, msf(r.Pebble.P99))
			bcpu, pcpu = append(bcpu, usf(r.Bellows.CPUPerOp())), append(pcpu, usf(r.Pebble.CPUPerOp()))
		}
		if len(ratios) == 0 {
			continue
		}
		rs := spreadOf(ratios)
		ok := "no"
		if rs.med >= Goal {
			ok = "yes"
			met++
		}
		reached := 0
		for _, x := range ratios {
			if x >= Goal {
				reached++
			}
		}
		fmt.Fprintf(&b, "| %d | %s | **%.2f** [%.2f–%.2f] | %s | %d/%d | %s | %s | %.3f / %.3f | %.3f / %.3f | %.1f / %.1f |\n",
			cell.Writers, sizeName(cell.ValueSize), rs.med, rs.lo, rs.hi, ok, reached, len(ratios),
			spreadOf(bops).format("%.0f"), spreadOf(pops).format("%.0f"),
			spreadOf(bp50).med, spreadOf(bp99).med, spreadOf(pp50).med, spreadOf(pp99).med, spreadOf(bcpu).med, spreadOf(pcpu).med)
	}
	fmt.Fprintf(&b, "\nGoal ≥ %.1f× met in %d of %d cells by the median ratio.\n", Goal, met, len(c.Cells))
	return b.String()
}

func sizeName(n int) string {
	if n >= 1024 && n%1024 == 0 {
		return fmt.Sprintf("%d KiB", n/1024)
	}
	return fmt.Sprintf("%d B", n)
}
