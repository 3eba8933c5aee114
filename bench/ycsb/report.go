package ycsb

import (
	"fmt"
	"slices"
	"strings"

	"github.com/bellows-kv/bellows/bench/report"
)

// Report is a YCSB run: what ran and each phase's measurement.
type Report struct {
	// Command is the command line that regenerates the report.
	Command string `json:"command,omitempty"`
	report.Provenance
	// Target says what the workloads ran against.
	Target string `json:"target"`
	// Regime says what bounds the numbers (data against cache, what is
	// saturated); Goal, what the run was to show, fixed before it ran.
	Regime string `json:"regime"`
	Goal   string `json:"goal"`
	// Properties are the overrides given on top of each workload file.
	Properties map[string]string `json:"properties"`
	Phases     []Phase           `json:"phases"`
}

// Markdown renders the report as ycsb.md.
func Markdown(r Report) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# YCSB core workloads\n\n")
	command := r.Command
	if command == "" {
		command = "bellows-bench ycsb"
	}
	b.WriteString(report.Header(command, r.Provenance))
	if r.Goal != "" {
		fmt.Fprintf(&b, "**Goal (stated before the run):** %s\n\n", r.Goal)
	}
	fmt.Fprintf(&b, "Target: %s. go-ycsb v1.0.1's core workload, client and measurement over the Bellows binding (`bench/ycsb`), the workload files in `bench/ycsb/workloads`", r.Target)
	if len(r.Properties) > 0 {
		var kv []string
		for k, v := range r.Properties {
			kv = append(kv, k+"="+v)
		}
		slices.Sort(kv)
		fmt.Fprintf(&b, ", with %s", strings.Join(kv, ", "))
	}
	fmt.Fprintf(&b, ".\n\n")
	if r.Regime != "" {
		fmt.Fprintf(&b, "**Regime:** %s\n\n", r.Regime)
	}
	fmt.Fprintf(&b, "| workload | phase | ops/s | operation | count | p50 ms | p99 ms | errors |\n|---|---|---:|---|---:|---:|---:|---:|\n")
	for _, p := range r.Phases {
		first := true
		for _, o := range p.Ops {
			if strings.HasSuffix(o.Op, "_ERROR") || o.Op == "TOTAL" {
				continue
			}
			w, ph, tp := "", "", ""
			if first {
				w, ph, tp = strings.ToUpper(p.Workload), p.Phase, fmt.Sprintf("%.0f", p.Throughput())
				first = false
			}
			fmt.Fprintf(&b, "| %s | %s | %s | %s | %d | %.3f | %.3f | %d |\n", w, ph, tp, o.Op, o.Count,
				float64(o.P50Us)/1000, float64(o.P99Us)/1000, errorsOf(p, o.Op))
		}
	}
	return b.String()
}

func errorsOf(p Phase, op string) int64 {
	for _, o := range p.Ops {
		if o.Op == op+"_ERROR" {
			return o.Count
		}
	}
	return 0
}

// Write writes ycsb.json and ycsb.md into dir.
func Write(dir string, r Report) error { return report.Write(dir, "ycsb", r, Markdown(r)) }
