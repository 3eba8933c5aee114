package ycsb

import (
	"fmt"
	"slices"
	"strings"

	"github.com/bellows-kv/bellows/bench/report"
)

// TLS goals, stated before the run (issue #29): through mutual TLS, a
// workload keeps at least this share of its plaintext throughput, and its
// p99s stay within this factor.
const (
	TLSGoalThroughput = 0.85
	TLSGoalP99        = 1.2
)

// TLSRun is one run phase of a workload, with TLS or without.
type TLSRun struct {
	Workload string             `json:"workload"`
	TLS      bool               `json:"tls"`
	OpsPerS  float64            `json:"ops_per_s"`
	P99Us    map[string]float64 `json:"p99_us"`
}

// TLSComparison is ycsb-tls.json.
type TLSComparison struct {
	Command string `json:"command"`
	report.Provenance
	Regime string   `json:"regime"`
	Runs   []TLSRun `json:"runs"`
}

// NewTLSRun summarizes a run phase.
func NewTLSRun(p Phase, tls bool) TLSRun {
	r := TLSRun{Workload: p.Workload, TLS: tls, OpsPerS: p.Throughput(), P99Us: map[string]float64{}}
	for _, o := range p.Ops {
		if o.Op == "READ" || o.Op == "UPDATE" {
			r.P99Us[o.Op] = float64(o.P99Us)
		}
	}
	return r
}

// WriteTLS writes ycsb-tls.json and ycsb-tls.md into dir.
func WriteTLS(dir string, c TLSComparison) error {
	return report.Write(dir, "ycsb-tls", c, TLSMarkdown(c))
}

// TLSMarkdown is ycsb-tls.md: per workload, the medians with TLS and
// without, their ratio and the runs' spread.
func TLSMarkdown(c TLSComparison) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# What mutual TLS costs: YCSB through TLS against plaintext\n\n")
	b.WriteString(report.Header(c.Command, c.Provenance))
	fmt.Fprintf(&b, "Goals, stated before the run: throughput through TLS ≥ %.2f× plaintext, and each operation's p99 ≤ %.1f× plaintext.\n\n", TLSGoalThroughput, TLSGoalP99)
	fmt.Fprintf(&b, "Regime: %s.\n\n", c.Regime)
	fmt.Fprintf(&b, "| workload | ops/s plaintext | ops/s TLS | ratio (runs) | op | p99 µs plaintext | p99 µs TLS | ratio (runs) | goals |\n|---|---:|---:|---:|---|---:|---:|---:|---|\n")
	var workloads []string
	for _, r := range c.Runs {
		if !slices.Contains(workloads, r.Workload) {
			workloads = append(workloads, r.Workload)
		}
	}
	for _, w := range workloads {
		var plain, tls []TLSRun
		for _, r := range c.Runs {
			if r.Workload != w {
				continue
			}
			if r.TLS {
				tls = append(tls, r)
			} else {
				plain = append(plain, r)
			}
		}
		field := func(rs []TLSRun, f func(TLSRun) float64) []float64 {
			var v []float64
			for _, r := range rs {
				v = append(v, f(r))
			}
			return v
		}
		// The ratio of each run pair (the i-th run of each mode), in order:
		// the spread behind a median ratio.
		pairs := func(p, t []float64) string {
			var rs []string
			for i := range min(len(p), len(t)) {
				rs = append(rs, fmt.Sprintf("%.2f", t[i]/p[i]))
			}
			return strings.Join(rs, ", ")
		}
		tp, tt := field(plain, func(r TLSRun) float64 { return r.OpsPerS }), field(tls, func(r TLSRun) float64 { return r.OpsPerS })
		ratio := report.Median(tt) / report.Median(tp)
		var ops []string
		for op := range plain[0].P99Us {
			ops = append(ops, op)
		}
		slices.Sort(ops)
		for i, op := range ops {
			p99 := func(r TLSRun) float64 { return r.P99Us[op] }
			pp, pt := report.Median(field(plain, p99)), report.Median(field(tls, p99))
			met := ratio >= TLSGoalThroughput && pt/pp <= TLSGoalP99
			head := fmt.Sprintf("| %s | %.0f | %.0f | %.2f (%s) |", strings.ToUpper(w), report.Median(tp), report.Median(tt), ratio, pairs(tp, tt))
			if i > 0 {
				head = "| | | | |"
			}
			verdict := "met"
			if !met {
				verdict = "**missed**"
			}
			fmt.Fprintf(&b, "%s %s | %.0f | %.0f | %.2f (%s) | %s |\n", head, op, pp, pt, pt/pp, pairs(field(plain, p99), field(tls, p99)), verdict)
		}
	}
	b.WriteString("\nEach run is a fresh `bellows local` (TLS or `--tls=false`), loaded and then run; the modes alternate, and the table shows medians over the runs, " +
		"with the ratio of each run pair in parentheses. The goals are judged on the medians.\n")
	return b.String()
}
