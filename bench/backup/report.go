package backup

import (
	"fmt"
	"strings"

	"github.com/bellows-kv/bellows/bench/report"
)

// Write writes backup.json and backup.md into dir.
func Write(dir string, rep Report) error { return report.Write(dir, "backup", rep, Markdown(rep)) }

func verdict(met bool) string {
	if met {
		return "met"
	}
	return "missed"
}

// Markdown is backup.md.
func Markdown(rep Report) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# Backups, restores and the WAL archive\n\n")
	b.WriteString(report.Header(rep.Command, rep.Provenance))
	fmt.Fprintf(&b, "Goals, stated before the run:\n\n")
	fmt.Fprintf(&b, "- a backup copies at ≥ %.0f%% of what the bucket's model allows its %d parallel copies (%.0f MB/s): **%s**, %.0f%% (runs %.0f–%.0f%%);\n",
		100*GoalThroughput, copyStreams, rep.ModelBPS/1e6, verdict(rep.Throughput.Median >= GoalThroughput),
		100*rep.Throughput.Median, 100*rep.Throughput.Min, 100*rep.Throughput.Max)
	fmt.Fprintf(&b, "- read p99 while a backup runs ≤ %.2f× without one: **%s**, %.2f× over every run's reads pooled (per run: median %.2f×, %.2f–%.2f);\n",
		GoalP99, verdict(rep.ReadP99Pooled <= GoalP99), rep.ReadP99Pooled, rep.ReadP99.Median, rep.ReadP99.Min, rep.ReadP99.Max)
	fmt.Fprintf(&b, "- write p99 while a backup runs ≤ %.2f× without one: **%s**, %.2f× over every run's writes pooled (per run: median %.2f×, %.2f–%.2f);\n",
		GoalP99, verdict(rep.WriteP99Pooled <= GoalP99), rep.WriteP99Pooled, rep.WriteP99.Median, rep.WriteP99.Min, rep.WriteP99.Max)
	fmt.Fprintf(&b, "- the archive's lag (the RPO) within %.0f× its interval (%.0f s) under steady writes: **%s**, at most %.1f s (median %.1f s, p99 %.1f s).\n\n",
		GoalRPOIntervals, rep.ArchiveIntervalS, verdict(rep.RPOMaxS <= GoalRPOIntervals*rep.ArchiveIntervalS), rep.RPOMaxS, rep.RPOMedianS, rep.RPOP99S)
	fmt.Fprintf(&b, "Regime: %s.\n\n", rep.Regime)
	fmt.Fprintf(&b, "Restore: %.1f s per GiB (runs %.1f–%.1f), the backup's files streamed from the bucket into a new one through\n"+
		"this process, each paying the model's latency and bandwidth.\n\n", rep.RestoreSPerGiB.Median, rep.RestoreSPerGiB.Min, rep.RestoreSPerGiB.Max)
	fmt.Fprintf(&b, "| run | backup s | copied MiB | MB/s | read p99 with / without ms | write p99 with / without ms | reads, writes during the backup |\n")
	fmt.Fprintf(&b, "|---:|---:|---:|---:|---:|---:|---:|\n")
	for i, r := range rep.Runs {
		fmt.Fprintf(&b, "| %d | %.1f | %d | %.0f | %.2f / %.2f | %.2f / %.2f | %d, %d |\n", i, r.BackupS, r.CopiedBytes>>20, r.ThroughputBPS/1e6,
			r.ReadP99With, r.ReadP99Without, r.WriteP99With, r.WriteP99Without, r.Reads, r.Writes)
	}
	fmt.Fprintf(&b, "\nThe RPO section wrote %d MiB at a steady rate and the archive shipped %d MiB (records and framing) meanwhile;\n"+
		"the lag is the age of the oldest WAL record the archive may lack (the start of the last successful ship), the\n"+
		"largest over the regions, sampled every 100 ms: what a volume lost at that instant would take with it.\n\n",
		rep.RPOWrittenBytes>>20, rep.RPOShippedBytes>>20)
	fmt.Fprintf(&b, "What the model does not show: its waits are per request, so copies and reads do not share one bandwidth\n"+
		"budget as they would on a saturated link; a backup's effect on reads here is this machine's CPU and disk.\n")
	return b.String()
}
