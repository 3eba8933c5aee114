package txn

import (
	"fmt"
	"strings"

	"github.com/bellows-kv/bellows/bench/report"
)

// Goal is the issue's, stated before the run: single-region transactions
// of 4 writes reach at least this share of plain batches' throughput at low
// contention.
const Goal = 0.5

// RecoveryGoalSecondsPerGiB is the recovery goal, stated before
// the run: with the bound, a recovery within this many seconds per GiB of
// the store's memstore budget.
const RecoveryGoalSecondsPerGiB = 2.0

// FlatFactor says what "flat in uptime" means: with the bound, recovery at
// the longest uptime at most this many times the slowest at a shorter one.
const FlatFactor = 1.25

// Write writes txn.json and txn.md into dir.
func Write(dir string, rep Report) error { return report.Write(dir, "txn", rep, Markdown(rep)) }

// Markdown is txn.md.
func Markdown(rep Report) string {
	var b strings.Builder
	t := rep.Throughput
	fmt.Fprintf(&b, "# Transactions: what snapshot isolation costs, and what recovery does\n\n")
	b.WriteString(report.Header(rep.Command, rep.Provenance))
	fmt.Fprintf(&b, "**Goals** (stated before the run; each section gives its verdict): transactions ≥ %.1f× the batches' throughput; "+
		"cross-region commits ≥ %.2f× the region-local rate; compare-and-set ≥ %.1f× the puts' rate; batches across regions ≥ %.2f× one-region batches' rate; serializable transactions ≥ %.1f× snapshot isolation's at no contention; with the WAL bound, recovery flat in uptime and within %.0f s per GiB of memstore budget; "+
		"the bank workload through store crashes: 0 invariant and 0 snapshot-isolation violations.\n\n", Goal, CrossRegionGoal, CASGoal, CrossRegionGoal, SerializableGoal, RecoveryGoalSecondsPerGiB)
	if len(t.TxnRuns) > 0 || len(rep.Contention) > 0 {
		fmt.Fprintf(&b, "Regime of the throughput and contention sections: %s.\n\n", rep.Regime)
	}
	if len(t.TxnRuns) > 0 {
		throughputMarkdown(&b, t)
	}
	if len(rep.Contention) > 0 {
		fmt.Fprintf(&b, "## Contention: transactions incrementing 2 of N hot keys, retried on abort\n\n")
		fmt.Fprintf(&b, "| hot keys | abort rate | commits/s |\n|---:|---:|---:|\n")
		for _, c := range rep.Contention {
			fmt.Fprintf(&b, "| %d | %.1f%% | %.0f |\n", c.HotKeys, 100*c.AbortRate, c.CommitsPerS)
		}
		fmt.Fprintf(&b, "\nEvery contention run checks that the counters sum to two increments per commit (no lost update).\n\n")
	}
	if len(rep.Recovery) > 0 {
		recoveryMarkdown(&b, rep)
	}
	if rep.CrossRegion != nil {
		crossRegionMarkdown(&b, *rep.CrossRegion)
	}
	if rep.Writes != nil {
		writesMarkdown(&b, *rep.Writes, rep.CrossRegion)
	}
	if rep.Serializable != nil {
		serializableMarkdown(&b, *rep.Serializable)
	}
	if rep.Bank != nil {
		bankMarkdown(&b, *rep.Bank)
	}
	return b.String()
}

func crossRegionMarkdown(b *strings.Builder, x CrossRegion) {
	fmt.Fprintf(b, "## Commits across regions against commits in one region\n\n")
	fmt.Fprintf(b, "Regime: the Go client against two `bellows store` processes splitting %d regions and forwarding to each\n"+
		"other (the bank section's, WALs synced as shipped), on this machine's loopback; %d client goroutines commit\n"+
		"transactions of two blind 100 B writes, keys uniform over 2^32 per region (no contention). Local: both keys in\n"+
		"one region (one WAL record). Cross: two regions of different stores (two-phase commit: a lock record in each,\n"+
		"then the primary's commit record). %d interleaved runs of %.0f s per mode.\n\n",
		BankRegions, x.Workers, len(x.LocalRuns), x.PhaseS)
	verdict := "met"
	if x.Ratio < CrossRegionGoal {
		verdict = "missed"
	}
	fmt.Fprintf(b, "Goal, stated before the run: cross-region commits ≥ %.2f× the region-local rate. **%s**: %.2f× (per-run %.2f–%.2f).\n\n",
		CrossRegionGoal, verdict, x.Ratio, x.RatioMin, x.RatioMax)
	fmt.Fprintf(b, "| | median transactions/s | runs |\n|---|---:|---|\n")
	fmt.Fprintf(b, "| one region | %.0f | %s |\n", x.LocalTxnPerS, runs(x.LocalRuns))
	fmt.Fprintf(b, "| across regions (2PC) | %.0f | %s |\n\n", x.CrossTxnPerS, runs(x.CrossRuns))
}

func writesMarkdown(b *strings.Builder, w Writes, x *CrossRegion) {
	fmt.Fprintf(b, "## Compare-and-set against puts, batches across regions against batches in one\n\n")
	fmt.Fprintf(b, "Regime: the crossregion section's (two `bellows store` processes, %d regions, the Go client); %d client\n"+
		"goroutines write 100 B values to keys uniform over 2^32 per region (no contention). cas: CompareAndSet IfAbsent\n"+
		"of a new key (it holds; the region looks the key up under its latch before the commit). batch: two keys in one\n"+
		"region (one WAL record); batch across: two regions of different stores (a two-phase commit the first key's\n"+
		"owner coordinates, one call from the client). Closed loop: each goroutine waits for its answer before its next\n"+
		"write, so a rate is what a mode costs per write with the two stores and the client sharing this machine's\n"+
		"cores; writes only, so nothing is read from files or the block cache. %d interleaved runs of %.0f s per mode.\n\n",
		BankRegions, w.Workers, len(w.Pairs[0].BaseRuns), w.PhaseS)
	for _, p := range w.Pairs {
		verdict := "met"
		if p.Ratio < p.Goal {
			verdict = "missed"
		}
		fmt.Fprintf(b, "Goal, stated before the run: %s ≥ %.2f× %s. **%s**: %.2f× (per-run %.2f–%.2f).\n\n",
			p.Compared, p.Goal, p.Base, verdict, p.Ratio, p.RatioMin, p.RatioMax)
	}
	fmt.Fprintf(b, "| mode | median operations/s | runs |\n|---|---:|---|\n")
	for _, p := range w.Pairs {
		fmt.Fprintf(b, "| %s | %.0f | %s |\n", p.Base, p.BaseOpsPerS, runs(p.BaseRuns))
		fmt.Fprintf(b, "| %s | %.0f | %s |\n", p.Compared, p.ComparedOpsPerS, runs(p.ComparedRuns))
	}
	b.WriteString("\n")
	if len(w.Pairs) > 1 && x != nil {
		fmt.Fprintf(b, "A batch across regions is a transaction across regions without its BeginTxn: %.0f batches/s against\n"+
			"%.0f transactions/s in the crossregion section. Both cost a lock record in each region, the primary's commit\n"+
			"record and the secondary's, each a WAL commit to the bucket, and four round trips between the stores, against\n"+
			"one record for a batch in one region, which needs no BeginTxn either and so sets a base %.1f× the one-region\n"+
			"transactions'. The ratio measures the two-phase commit, not the batch.\n\n",
			w.Pairs[1].ComparedOpsPerS, x.CrossTxnPerS, w.Pairs[1].BaseOpsPerS/x.LocalTxnPerS)
	}
}

func serializableMarkdown(b *strings.Builder, s Serializable) {
	fmt.Fprintf(b, "## Serializable against snapshot isolation\n\n")
	fmt.Fprintf(b, "Regime: the crossregion section's (two `bellows store` processes, %d regions, the Go client); %d client\n"+
		"goroutines run transactions that read 4 keys, each in a random region, and write 2 of them (100 B values):\n"+
		"the 2 read and not written are what a serializable commit validates (one ValidateReads per region they fall\n"+
		"in, after the prewrite); the writes fall in two regions (two-phase commit) in all but one transaction in %d, at\n"+
		"both levels. Closed loop, reads and writes sharing this machine's cores with both stores. Throughput: keys\n"+
		"uniform over 2^32 per region (no contention); aborts: the same transactions over a hot set of keys spread over\n"+
		"the regions. %d interleaved runs of %.0f s per level.\n\n",
		BankRegions, s.Workers, BankRegions, len(s.Throughput[0].Runs), s.PhaseS)
	verdict := "met"
	if s.Ratio < s.Goal {
		verdict = "missed"
	}
	fmt.Fprintf(b, "Goal, stated before the run: serializable ≥ %.2f× snapshot isolation's committed transactions/s at no\n"+
		"contention. **%s**: %.2f× (per-run %.2f–%.2f).\n\n", s.Goal, verdict, s.Ratio, s.RatioMin, s.RatioMax)
	fmt.Fprintf(b, "| level | median committed transactions/s | runs |\n|---|---:|---|\n")
	for _, l := range s.Throughput {
		fmt.Fprintf(b, "| %s | %.0f | %s |\n", l.Level, l.TxnPerS, runs(l.Runs))
	}
	fmt.Fprintf(b, "\n| hot keys | level | median commits refused | per run | median committed/s |\n|---:|---|---:|---|---:|\n")
	for _, a := range s.Aborts {
		for _, l := range a.Levels {
			shares := make([]string, len(l.AbortShares))
			for i, x := range l.AbortShares {
				shares[i] = fmt.Sprintf("%.1f%%", 100*x)
			}
			fmt.Fprintf(b, "| %d | %s | %.1f%% | %s | %.0f |\n", a.HotKeys, l.Level, 100*l.AbortShare, strings.Join(shares, ", "), l.TxnPerS)
		}
	}
	b.WriteString("\nA serializable transaction is also refused when a key it read and did not write was written after its start\n" +
		"(a read conflict), or another transaction's lock there had not been resolved: the difference between the\n" +
		"levels' refusals is what serializability costs in aborts; SI commits those transactions, write skew and all.\n\n")
}

func bankMarkdown(b *strings.Builder, r BankResult) {
	fmt.Fprintf(b, "## Bank: transfers across regions, stores SIGKILLed\n\n")
	fmt.Fprintf(b, "Regime: two `bellows store` processes splitting %d regions, forwarding to each other, file:// bucket;\n"+
		"%d accounts (%d per region), %d transferers moving 1–10 between accounts of different regions (every transfer a\n"+
		"cross-region two-phase commit), %d readers summing every balance in one snapshot transaction; one transfer in %d\n"+
		"abandoned by its client mid-commit (a 1–3 ms deadline); a store SIGKILLed and restarted, the two in turn, %d times.\n\n",
		BankRegions, BankRegions*BankAccountsPerRegion, BankAccountsPerRegion, BankTransferers, BankSummers, BankAbandonEvery, r.Crashes)
	verdict := "met"
	if r.InvariantViolations > 0 || r.SIViolations > 0 {
		verdict = "missed"
	}
	fmt.Fprintf(b, "Goal, stated before the run: 0 invariant violations (every snapshot sum, and a plain scan after the\n"+
		"workload, equal the opening total) and 0 snapshot-isolation violations in the recorded history (internal/sicheck).\n"+
		"**%s**: %d invariant violations, %d snapshot-isolation violations.\n\n", verdict, r.InvariantViolations, r.SIViolations)
	fmt.Fprintf(b, "| transfers committed | crashes | snapshot sums | aborted | outcome unknown | seconds | transfers/s |\n|---:|---:|---:|---:|---:|---:|---:|\n")
	fmt.Fprintf(b, "| %d | %d | %d | %d | %d | %.1f | %.0f |\n\n", r.Transfers, r.Crashes, r.Sums, r.Aborted, r.OutcomeUnknown, r.Seconds, r.TransfersPerS)
	for _, v := range r.Violations {
		fmt.Fprintf(b, "- %s\n", v)
	}
	if len(r.Violations) > 0 {
		fmt.Fprintln(b)
	}
	fmt.Fprintf(b, "Transfers/s includes the restarts and the lock TTL (%v) that readers wait out after a crash; it is not a\n"+
		"throughput measurement.\n\n", BankLockTTL)
}

func recoveryMarkdown(b *strings.Builder, rep Report) {
	fmt.Fprintf(b, "## Recovery after a crash, against uptime, with and without the WAL bound\n\n")
	fmt.Fprintf(b, "Regime: %s.\n\n", rep.RecoveryRegime)
	budgetGiB := float64(rep.MemstoreBudgetBytes) / (1 << 30)
	limit := RecoveryGoalSecondsPerGiB * budgetGiB
	var bounded []Recovery
	for _, r := range rep.Recovery {
		if r.Bounded {
			bounded = append(bounded, r)
		}
	}
	worst, flat := 0.0, true
	for i, r := range bounded {
		worst = max(worst, r.RecoveryS)
		if i == len(bounded)-1 && i > 0 {
			prev := 0.0
			for _, q := range bounded[:i] {
				prev = max(prev, q.RecoveryS)
			}
			flat = r.RecoveryS <= FlatFactor*prev
		}
	}
	verdict := func(ok bool) string {
		if ok {
			return "met"
		}
		return "missed"
	}
	fmt.Fprintf(b, "Goals, stated before the run: with the bound, recovery flat in uptime (at the longest uptime at most %.2f× the slowest at a shorter one): **%s**; and within %.0f s per GiB of memstore budget (%.3f s for this store's %d MiB): **%s**, the slowest bounded recovery took %.3f s.\n\n",
		FlatFactor, verdict(flat), RecoveryGoalSecondsPerGiB, limit, rep.MemstoreBudgetBytes>>20, verdict(worst <= limit), worst)
	fmt.Fprintf(b, "| bound | uptime | WAL on disk | replayed | recovery (median) | min–max |\n|---|---:|---:|---:|---:|---|\n")
	for _, r := range rep.Recovery {
		mode := "none"
		if r.Bounded {
			mode = "defaults"
		}
		fmt.Fprintf(b, "| %s | %.0f s | %.1f MiB | %.1f MiB | %.3f s | %.3f–%.3f s |\n", mode, r.UptimeS,
			float64(r.WALBytes)/(1<<20), float64(r.ReplayedBytes)/(1<<20), r.RecoveryS, r.RecoveryMinS, r.RecoveryMaxS)
	}
	fmt.Fprintf(b, "\nRecovery is `OpenStore`: every region's manifest load and claim, its SSTs' opening and its WAL\n"+
		"replay, the regions in parallel (bellows_store_recovery_seconds). The WAL on disk can exceed what is replayed:\n"+
		"segments below the manifest's WAL minimum are skipped, and async appends still in the writer's buffer at the kill\n"+
		"are lost with it (acknowledged under syncMode async, which the regime states).\n\n")
}

func throughputMarkdown(b *strings.Builder, t Throughput) {
	fmt.Fprintf(b, "## Throughput: 4-write transactions against 4-write batches, low contention\n\n")
	verdict := "met"
	if t.Ratio < Goal {
		verdict = "missed"
	}
	fmt.Fprintf(b, "Goal, stated before the run: transactions ≥ %.1f× the batches' throughput. **%s**: %.2f× (per-run ratios %.2f–%.2f).\n\n",
		Goal, verdict, t.Ratio, t.RatioMin, t.RatioMax)
	fmt.Fprintf(b, "| | median ops/s | runs |\n|---|---:|---|\n")
	fmt.Fprintf(b, "| batch (`Apply`) | %.0f | %s |\n", t.BatchOpsPerS, runs(t.BatchRuns))
	fmt.Fprintf(b, "| transaction (`Snapshot` + `CommitTxn`) | %.0f | %s |\n\n", t.TxnOpsPerS, runs(t.TxnRuns))
	fmt.Fprintf(b, "A transaction's extra work is the snapshot and the validation: each written key's newest version\n"+
		"is looked up (memstore, then files) under the keys' latches before the commit.\n\n")
}

func runs(xs []float64) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = fmt.Sprintf("%.0f", x)
	}
	return strings.Join(s, ", ")
}
