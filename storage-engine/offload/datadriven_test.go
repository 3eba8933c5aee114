package offload

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"
)

// TestRendezvousDataDriven runs testdata/placement, which pins the
// rendezvous hash: stores of two versions running side by side (an upgrade)
// must send a region's jobs to the same worker.
//
//	workers W...        sets the worker list (in this order)
//	place R...          prints each region's worker order; R may be a range
//	                    NAME-000..007 of zero-padded numbers
//	remove W            drops a worker and prints which of the last placed
//	                    regions changed their first choice, from → to
//	add W               adds a worker and prints the same
//	balance R...        prints each region's Balanced worker (ε = 0) and
//	                    each worker's load; balance with no regions
//	                    re-balances the last ones over the current workers
//	                    and prints which moved
//
// Run with -rewrite to regenerate the expected output.
func TestRendezvousDataDriven(t *testing.T) {
	var workers, regions []string
	var balanced map[string]string
	datadriven.RunTest(t, "testdata/placement", func(t *testing.T, d *datadriven.TestData) string {
		args := make([]string, 0, len(d.CmdArgs))
		for _, a := range d.CmdArgs {
			if len(a.Vals) != 0 {
				d.Fatalf(t, "%s: want bare names, got %s", d.Cmd, a)
			}
			args = append(args, a.Key)
		}
		switch d.Cmd {
		case "workers":
			workers = args
			return ""
		case "place":
			regions = nil
			for _, a := range args {
				regions = append(regions, expandRange(t, d, a)...)
			}
			var sb strings.Builder
			for _, r := range regions {
				order := strings.Join(Rendezvous(r, workers), " ")
				if order == "" {
					order = "(no workers)"
				}
				fmt.Fprintf(&sb, "%s: %s\n", r, order)
			}
			return sb.String()
		case "balance":
			before := balanced
			if len(args) > 0 {
				regions, before = nil, nil
				for _, a := range args {
					regions = append(regions, expandRange(t, d, a)...)
				}
			}
			balanced = Balanced(regions, workers, 0)
			var sb strings.Builder
			load := map[string]int{}
			for _, r := range regions {
				load[balanced[r]]++
				switch {
				case before == nil:
					fmt.Fprintf(&sb, "%s: %s\n", r, balanced[r])
				case before[r] != balanced[r]:
					fmt.Fprintf(&sb, "%s: %s → %s\n", r, before[r], balanced[r])
				}
			}
			sb.WriteString("load:")
			for _, w := range slices.Sorted(slices.Values(workers)) {
				fmt.Fprintf(&sb, " %s=%d", w, load[w])
			}
			return sb.String()
		case "remove", "add":
			if len(args) != 1 {
				d.Fatalf(t, "%s: want one worker", d.Cmd)
			}
			before := workers
			if d.Cmd == "remove" {
				workers = slices.DeleteFunc(slices.Clone(workers), func(w string) bool { return w == args[0] })
			} else {
				workers = append(slices.Clone(workers), args[0])
			}
			var moved []string
			for _, r := range regions {
				was, now := Rendezvous(r, before), Rendezvous(r, workers)
				// Whatever moves, the other workers keep their relative
				// order: that is what makes only one worker's regions move.
				rest := slices.DeleteFunc(slices.Clone(was), func(w string) bool { return w == args[0] })
				if !slices.Equal(rest, slices.DeleteFunc(slices.Clone(now), func(w string) bool { return w == args[0] })) {
					d.Fatalf(t, "%s: %s %s reordered the other workers: %v → %v", r, d.Cmd, args[0], was, now)
				}
				if was[0] != now[0] {
					moved = append(moved, fmt.Sprintf("%s: %s → %s", r, was[0], now[0]))
				}
			}
			if len(moved) == 0 {
				return "none moved"
			}
			return strings.Join(moved, "\n")
		}
		d.Fatalf(t, "unknown command %q", d.Cmd)
		return ""
	})
}

// expandRange turns region-000..003 into region-000 … region-003; any other
// name is itself.
func expandRange(t *testing.T, d *datadriven.TestData, s string) []string {
	from, to, ok := strings.Cut(s, "..")
	if !ok {
		return []string{s}
	}
	i := strings.LastIndexByte(from, '-')
	var lo, hi int
	if _, err := fmt.Sscanf(from[i+1:], "%d", &lo); i < 0 || err != nil {
		d.Fatalf(t, "range %q: want NAME-NNN..MMM", s)
	}
	if _, err := fmt.Sscanf(to, "%d", &hi); err != nil || hi < lo {
		d.Fatalf(t, "range %q: want NAME-NNN..MMM", s)
	}
	var out []string
	for n := lo; n <= hi; n++ {
		out = append(out, fmt.Sprintf("%s-%0*d", from[:i], len(to), n))
	}
	return out
}
