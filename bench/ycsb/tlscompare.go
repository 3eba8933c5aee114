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
	Command string   `json:"command"`
	Regime  string   `json:"regime"`
	Runs    []TLSRun `json:"runs"`
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
	fmt.Fprintf(&b, "# What mutual TLS costs: YCSB through TLS against plaintext\n\nProduced by `%s`.\n\nRegime: %s.\n\n", c.Command, c.Regime)
	fmt.Fprintf(&b, "Goals, stated before the run: throughput through TLS ≥ %.2f× plaintext, and each operation's p99 ≤ %.1f× plaintext.\n\n", TLSGoalThroughput, TLSGoalP99)
	fmt.Fprintf(&b, "| workload | ops/s plaintext | ops/s TLS | ratio (runs) | op | p99 µs plaintext | p99 µs TLS | ratio | goals |\n|---|---:|---:|---:|---|---:|---:|---:|---|\n")
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
		tp, tt := field(plain, func(r TLSRun) float64 { return r.OpsPerS }), field(tls, func(r TLSRun) float64 { return r.OpsPerS })
		var ratios []string
		for i := range min(len(tp), len(tt)) {
			ratios = append(ratios, fmt.Sprintf("%.2f", tt[i]/tp[i]))
		}
		ratio := report.Median(tt) / report.Median(tp)
		var ops []string
		for op := range plain[0].P99Us {
			ops = append(ops, op)
		}
		slices.Sort(ops)
		for i, op := range ops {
			pp, pt := report.Median(field(plain, func(r TLSRun) float64 { return r.P99Us[op] })), report.Median(field(tls, func(r TLSRun) float64 { return r.P99Us[op] }))
			met := ratio >= TLSGoalThroughput && pt/pp <= TLSGoalP99
			head := fmt.Sprintf("| %s | %.0f | %.0f | %.2f (%s) |", strings.ToUpper(w), report.Median(tp), report.Median(tt), ratio, strings.Join(ratios, ", "))
			if i > 0 {
				head = "| | | | |"
			}
			verdict := "met"
			if !met {
				verdict = "**missed**"
			}
			fmt.Fprintf(&b, "%s %s | %.0f | %.0f | %.2f | %s |\n", head, op, pp, pt, pt/pp, verdict)
		}
	}
	b.WriteString("\nEach run is a fresh `bellows local` (TLS or `--tls=false`), loaded and then run; the modes alternate, and the table shows medians over the runs.\n")
	return b.String()
}
