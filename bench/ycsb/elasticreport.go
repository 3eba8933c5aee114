package ycsb

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/bellows-kv/bellows/bench/report"
)

// WriteElastic writes elastic.json and elastic.md into dir.
func WriteElastic(dir string, r ElasticReport) error {
	return report.Write(dir, "elastic", r, ElasticMarkdown(r))
}

// byMode are r's runs of mode, in pair order.
func byMode(r ElasticReport, mode string) []ElasticRun {
	var out []ElasticRun
	for _, x := range r.Runs {
		if x.Mode == mode {
			out = append(out, x)
		}
	}
	return out
}

// col is f of each run.
func col(rs []ElasticRun, f func(ElasticRun) float64) []float64 {
	var v []float64
	for _, r := range rs {
		v = append(v, f(r))
	}
	return v
}

// spreadOf renders a median with the runs' values: "m (a, b, c)".
func spreadOf(v []float64, format string) string {
	var s []string
	for _, x := range v {
		s = append(s, fmt.Sprintf(format, x))
	}
	return fmt.Sprintf(format+" (%s)", report.Median(v), strings.Join(s, ", "))
}

func verdict(ok bool) string {
	if ok {
		return "met"
	}
	return "**missed**"
}

// ElasticMarkdown is elastic.md: the goals, then per goal the median over
// the runs (pairs for the ratios) with every run's value.
func ElasticMarkdown(r ElasticReport) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# Elastic regions: a YCSB load into one region on 3 stores against a pre-split cluster (issue #26)\n\n")
	b.WriteString(report.Header(r.Command, r.Provenance))
	fmt.Fprintf(&b, "**Goals (issue #26, stated before the run):** at the end of the load every region within ±%.0f%% of the mean region size and every store within ±%.0f%% of the mean bytes; "+
		"load throughput ≥ %.1f× the pre-split cluster's; write (INSERT) p99 ≤ %.1f× the pre-split cluster's; the longest a key refuses writes during a split ≤ %v; "+
		"the longest a key is unavailable during a move ≤ %v plus the region's flush.\n\n",
		100*ElasticGoalRegionSpread, 100*ElasticGoalStoreSpread, ElasticGoalThroughput, ElasticGoalP99, ElasticGoalSplitUnavailable, ElasticGoalMoveUnavailable)
	fmt.Fprintf(&b, "**Regime:** %s\n\n**Setup:** %s\n\n", r.Regime, r.Config)
	el, pre := byMode(r, "elastic"), byMode(r, "presplit")
	if len(el) == 0 || len(pre) == 0 {
		b.WriteString("No complete pair.\n")
		return b.String()
	}
	n := min(len(el), len(pre))
	el, pre = el[:n], pre[:n]
	ratio := func(f func(ElasticRun) float64) []float64 {
		var v []float64
		for i := range n {
			v = append(v, f(el[i])/f(pre[i]))
		}
		return v
	}
	ops := func(x ElasticRun) float64 { return x.OpsPerS }
	p99 := func(x ElasticRun) float64 { return float64(x.InsertP99) }
	tput, lat := ratio(ops), ratio(p99)
	regSpread := col(el, func(x ElasticRun) float64 { return x.AtLoadEnd.RegionSpread })
	stEnd := col(el, func(x ElasticRun) float64 { return x.AtLoadEnd.StoreSpread })
	stSettled := col(el, func(x ElasticRun) float64 { return x.Settled.StoreSpread })
	regSettled := col(el, func(x ElasticRun) float64 { return x.Settled.RegionSpread })
	mergeRefuse := col(el, func(x ElasticRun) float64 { return x.MaxMergeRefuseMs })
	split := col(el, func(x ElasticRun) float64 { return x.MaxSplitRefuseMs })
	move := col(el, func(x ElasticRun) float64 { return x.MaxMoveMs })
	release := col(el, func(x ElasticRun) float64 { return x.MaxReleaseMs })
	fmt.Fprintf(&b, "%d pairs; each cell: the median, then every run (or pair ratio) in run order.\n\n", n)
	fmt.Fprintf(&b, "| goal | measured | verdict |\n|---|---|---|\n")
	fmt.Fprintf(&b, "| regions within ±%.0f%% of the mean size at the end of the load | largest deviation %s | %s |\n",
		100*ElasticGoalRegionSpread, spreadOf(regSpread, "%.2f"), verdict(report.Median(regSpread) <= ElasticGoalRegionSpread))
	fmt.Fprintf(&b, "| the same, once re-cuts evened them out (watched ≤ the settle time after the load; re-cuts per run %s) | largest deviation %s, %s regions | %s |\n",
		spreadOf(col(el, func(x ElasticRun) float64 { return float64(x.Recuts) }), "%.0f"), spreadOf(regSettled, "%.2f"),
		spreadOf(col(el, func(x ElasticRun) float64 { return float64(x.Settled.Regions) }), "%.0f"), verdict(report.Median(regSettled) <= ElasticGoalRegionSpread))
	fmt.Fprintf(&b, "| stores within ±%.0f%% of the mean bytes at the end of the load | largest deviation %s | %s |\n",
		100*ElasticGoalStoreSpread, spreadOf(stEnd, "%.2f"), verdict(report.Median(stEnd) <= ElasticGoalStoreSpread))
	fmt.Fprintf(&b, "| the same, once the balancer settled (watched ≤ the settle time after the load) | largest deviation %s, after %s s | %s |\n",
		spreadOf(stSettled, "%.2f"), spreadOf(col(el, func(x ElasticRun) float64 { return x.SettledAfter }), "%.0f"), verdict(report.Median(stSettled) <= ElasticGoalStoreSpread))
	fmt.Fprintf(&b, "| load throughput elastic / pre-split ≥ %.1f× | %s | %s |\n", ElasticGoalThroughput, spreadOf(tput, "%.2f"), verdict(report.Median(tput) >= ElasticGoalThroughput))
	fmt.Fprintf(&b, "| INSERT p99 elastic / pre-split ≤ %.1f× | %s | %s |\n", ElasticGoalP99, spreadOf(lat, "%.2f"), verdict(report.Median(lat) <= ElasticGoalP99))
	fmt.Fprintf(&b, "| longest write refusal of a split ≤ %v (store logs, max over the run's splits) | %s ms | %s |\n",
		ElasticGoalSplitUnavailable, spreadOf(split, "%.0f"), verdict(report.Median(split) <= float64(ElasticGoalSplitUnavailable.Milliseconds())))
	claim := col(el, func(x ElasticRun) float64 { return x.MaxClaimMs })
	fmt.Fprintf(&b, "| longest move ≤ %v + the flush: release start to claim, and beside it the longest release (its flush and released manifest) and the longest claim after a release's end (max over the run's moves) | %s ms; release %s ms; claim after release %s ms | %s |\n",
		ElasticGoalMoveUnavailable, spreadOf(move, "%.0f"), spreadOf(release, "%.0f"), spreadOf(claim, "%.0f"),
		verdict(report.Median(claim) <= float64(ElasticGoalMoveUnavailable.Milliseconds())))
	fmt.Fprintf(&b, "| longest write refusal of a merge (a re-cut's first half) ≤ %v + the flush (store logs; merges per run %s) | %s ms | %s |\n",
		ElasticGoalMoveUnavailable, spreadOf(col(el, func(x ElasticRun) float64 { return float64(x.Merges) }), "%.0f"), spreadOf(mergeRefuse, "%.0f"),
		verdict(report.Median(mergeRefuse) <= float64(ElasticGoalMoveUnavailable.Milliseconds())))
	fmt.Fprintf(&b, "| (client side) longest INSERT, retries included, elastic against pre-split: any key's unavailability to a writer plus queueing | %s ms against %s ms | (bound) |\n",
		spreadOf(col(el, func(x ElasticRun) float64 { return float64(x.InsertMax) / 1000 }), "%.0f"), spreadOf(col(pre, func(x ElasticRun) float64 { return float64(x.InsertMax) / 1000 }), "%.0f"))
	fmt.Fprintf(&b, "\nEvery run:\n\n| pair | mode | split bytes | regions | ops/s | INSERT p50 / p99 / max ms | errors | region sizes MiB (min–max) | store MiB (regions) at load end | settled | splits (max refusal ms) | moves (max ms) |\n|---:|---|---:|---:|---:|---|---:|---|---|---|---|---|\n")
	for _, x := range r.Runs {
		mib := func(v int64) float64 { return float64(v) / (1 << 20) }
		stores := func(l Layout) string {
			var s []string
			for i, v := range l.StoreBytes {
				s = append(s, fmt.Sprintf("%.0f (%d)", mib(v), l.StoreCounts[i]))
			}
			return strings.Join(s, ", ")
		}
		lo, hi := 0.0, 0.0
		if rb := x.AtLoadEnd.RegionBytes; len(rb) > 0 {
			lo, hi = mib(rb[0]), mib(rb[len(rb)-1])
		}
		sb := "0 (never)"
		if x.SplitBytes > 0 {
			sb = fmt.Sprintf("%.1f MiB", mib(x.SplitBytes))
		}
		fmt.Fprintf(&b, "| %d | %s | %s | %d | %.0f | %.1f / %.1f / %.0f | %d | %.1f–%.1f | %s | %s after %.0f s | %d (%.0f) | %d (%.0f) |\n",
			x.Pair, x.Mode, sb, x.AtLoadEnd.Regions, x.OpsPerS, float64(x.InsertP50)/1000, float64(x.InsertP99)/1000, float64(x.InsertMax)/1000, x.Errors,
			lo, hi, stores(x.AtLoadEnd), stores(x.Settled), x.SettledAfter, x.Splits, x.MaxSplitRefuseMs, x.Moves, x.MaxMoveMs)
	}
	if len(r.Findings) > 0 {
		b.WriteString("\n## Misses and their measured causes\n\n")
		for _, f := range r.Findings {
			fmt.Fprintf(&b, "- %s\n", f)
		}
	}
	return b.String()
}

// RenderElastic rewrites dir's elastic.md from its elastic.json (after
// findings were added to it).
func RenderElastic(dir string) (ElasticReport, error) {
	var r ElasticReport
	b, err := os.ReadFile(filepath.Join(dir, "elastic.json"))
	if err != nil {
		return r, err
	}
	if err := json.Unmarshal(b, &r); err != nil {
		return r, fmt.Errorf("elastic.json: %w", err)
	}
	return r, WriteElastic(dir, r)
}
