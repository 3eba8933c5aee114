// Package tracewaits reads a runtime execution trace and accounts for the
// time one goroutine spent off its CPU inside the work a benchmark times,
// by cause: what state it left Running for (blocked, preempted, in a
// syscall), the runtime's reason, the GC function it was in, if any, and
// the innermost function of ours on its stack.
//
// Why: a read's latency less its CPU time is its waiting, and the memstore
// benchmark's reader waits for the GC in ways its latency alone cannot
// tell apart (a stack-scan preemption handed back through a busy CPU, an
// assist parked behind mark termination, a stop-the-world). Reading the
// trace by hand (go tool trace -d=parsed) found them; this makes the
// account repeatable (docs/memstore.md, "Measuring reads while writers
// run flat out").
package tracewaits

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"golang.org/x/exp/trace"
)

// Options say whose waits to account and which of them are outside the
// timed work.
type Options struct {
	// Goroutine names the goroutine: the first one with a stack frame
	// whose function name contains it.
	Goroutine string
	// Outside lists function names (substrings): an off-CPU spell that
	// began with one of them on the stack is outside the timed work (a
	// benchmark's pacing, say) and is not counted.
	Outside []string
}

// Wait is the time spent off the CPU for one cause.
type Wait struct {
	// Cause: the state left for and the runtime's reason, the GC function
	// on the stack (if any), and the innermost function not of the
	// runtime or the standard library's synchronisation.
	Cause string
	Count int
	Total time.Duration
	Max   time.Duration
}

// Summary is the account of one goroutine over a trace.
type Summary struct {
	Goroutine trace.GoID
	// Span is from the goroutine's first event to its last.
	Span time.Duration
	// Total is every counted wait.
	Total time.Duration
	// Waits, the largest total first.
	Waits []Wait
}

// ErrNoGoroutine is returned when no goroutine has the named frame.
var ErrNoGoroutine = errors.New("no goroutine in the trace has the named frame")

// Analyze reads a trace and accounts for the named goroutine's waits.
func Analyze(r io.Reader, opt Options) (Summary, error) {
	tr, err := trace.NewReader(r)
	if err != nil {
		return Summary{}, err
	}
	var (
		s                  Summary
		found              bool
		first, last, since trace.Time
		cause              string
		away               bool
		byCause            = map[string]*Wait{}
	)
	for {
		ev, err := tr.ReadEvent()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return s, err
		}
		if ev.Kind() != trace.EventStateTransition {
			continue
		}
		st := ev.StateTransition()
		if st.Resource.Kind != trace.ResourceGoroutine {
			continue
		}
		g := st.Resource.Goroutine()
		stk := st.Stack
		if stk == trace.NoStack && ev.Goroutine() == g {
			stk = ev.Stack()
		}
		if !found {
			if !hasFrame(stk, opt.Goroutine) {
				continue
			}
			found, s.Goroutine, first = true, g, ev.Time()
		}
		if g != s.Goroutine {
			continue
		}
		last = ev.Time()
		from, to := st.Goroutine()
		switch {
		case from == trace.GoRunning && to != trace.GoRunning:
			away, since = true, ev.Time()
			cause = ""
			if !slices.ContainsFunc(opt.Outside, func(f string) bool { return hasFrame(stk, f) }) {
				cause = describe(to, st.Reason, stk)
			}
		case to == trace.GoRunning && away:
			away = false
			if cause == "" {
				continue
			}
			d := ev.Time().Sub(since)
			w := byCause[cause]
			if w == nil {
				w = &Wait{Cause: cause}
				byCause[cause] = w
			}
			w.Count++
			w.Total += d
			w.Max = max(w.Max, d)
			s.Total += d
		}
	}
	if !found {
		return s, fmt.Errorf("%w %q", ErrNoGoroutine, opt.Goroutine)
	}
	s.Span = last.Sub(first)
	for _, w := range byCause {
		s.Waits = append(s.Waits, *w)
	}
	slices.SortFunc(s.Waits, func(a, b Wait) int {
		return cmp.Or(cmp.Compare(b.Total, a.Total), strings.Compare(a.Cause, b.Cause))
	})
	return s, nil
}

func hasFrame(stk trace.Stack, name string) bool {
	if name == "" {
		return false
	}
	for f := range stk.Frames() {
		if strings.Contains(f.Func, name) {
			return true
		}
	}
	return false
}

// describe names a spell's cause from the state it left for, the reason,
// and the stack it left with (innermost frame first).
func describe(to trace.GoState, reason string, stk trace.Stack) string {
	var gc, ours string
	for f := range stk.Frames() {
		switch {
		case gc == "" && strings.HasPrefix(f.Func, "runtime.gc"):
			gc = f.Func
		case ours == "" && !library(f.Func):
			ours = f.Func
		}
	}
	var b strings.Builder
	b.WriteString(to.String())
	if reason != "" {
		fmt.Fprintf(&b, " (%s)", reason)
	}
	if gc != "" {
		b.WriteString(" in " + gc)
	}
	if ours != "" {
		b.WriteString(" at " + ours)
	}
	return b.String()
}

// library reports whether fn is the runtime's or the standard library's
// machinery a wait passes through rather than the code that waited.
func library(fn string) bool {
	for _, p := range []string{"runtime.", "sync.", "internal/", "syscall.", "os.", "time.", "golang.org/x/sys/"} {
		if strings.HasPrefix(fn, p) {
			return true
		}
	}
	return false
}

// Format writes the summary as text: one line per cause.
func Format(w io.Writer, s Summary) error {
	if _, err := fmt.Fprintf(w, "goroutine %d over %v: %v not Running inside the timed work (blocked, waiting to run, or in a system call)\n", s.Goroutine, s.Span.Round(time.Millisecond), s.Total.Round(time.Microsecond)); err != nil {
		return err
	}
	for _, wt := range s.Waits {
		if _, err := fmt.Fprintf(w, "%6d  total %10v  max %10v  %s\n", wt.Count, wt.Total.Round(time.Microsecond), wt.Max.Round(time.Microsecond), wt.Cause); err != nil {
			return err
		}
	}
	return nil
}
