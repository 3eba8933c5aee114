package phases

import (
	"math"
	"slices"
	"sync"
	"time"
)

// recorder keeps every latency, in fixed windows since start: a phase's
// mean and p99 are over the operations that began in it.
type recorder struct {
	mu      sync.Mutex
	start   time.Time
	window  time.Duration
	windows []window
}

type window struct {
	Gets, Scans []time.Duration
}

func newRecorder(start time.Time, w time.Duration) *recorder {
	return &recorder{start: start, window: w}
}

func (r *recorder) add(at time.Time, d time.Duration, scan bool) {
	i := int(at.Sub(r.start) / r.window)
	if i < 0 {
		return
	}
	r.mu.Lock()
	for len(r.windows) <= i {
		r.windows = append(r.windows, window{})
	}
	w := &r.windows[i]
	if scan {
		w.Scans = append(w.Scans, d)
	} else {
		w.Gets = append(w.Gets, d)
	}
	r.mu.Unlock()
}

// Latency is one kind of operation's latency over a span: Count
// operations, their mean and p99 in ms (0 when Count is 0).
type Latency struct {
	Count         int
	MeanMs, P99Ms float64
}

// stats returns the get and scan latency of operations that began in
// [from, to).
func (r *recorder) stats(from, to time.Time) (get, scan Latency) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var g, s []time.Duration
	for i, w := range r.windows {
		at := r.start.Add(time.Duration(i) * r.window)
		if at.Before(from) || !at.Before(to) {
			continue
		}
		g = append(g, w.Gets...)
		s = append(s, w.Scans...)
	}
	return latencyOf(g), latencyOf(s)
}

// mean returns the mean get and scan latency (ms) of operations that began
// in [from, to).
func (r *recorder) mean(from, to time.Time) (getMs, scanMs float64) {
	g, s := r.stats(from, to)
	return g.MeanMs, s.MeanMs
}

func latencyOf(d []time.Duration) Latency {
	if len(d) == 0 {
		return Latency{}
	}
	slices.Sort(d)
	var sum time.Duration
	for _, v := range d {
		sum += v
	}
	// Nearest rank: the smallest latency at least 99% of operations do not exceed.
	p99 := d[int(math.Ceil(0.99*float64(len(d))))-1]
	return Latency{Count: len(d), MeanMs: ms(sum, len(d)), P99Ms: float64(p99) / float64(time.Millisecond)}
}

func ms(sum time.Duration, n int) float64 {
	if n == 0 {
		return 0
	}
	return float64(sum) / float64(n) / float64(time.Millisecond)
}

// series returns per-window mean get and scan latency (ms) from start.
func (r *recorder) series() (t []float64, getMs []float64, scanMs []float64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i, w := range r.windows {
		t = append(t, (time.Duration(i) * r.window).Seconds())
		getMs = append(getMs, latencyOf(slices.Clone(w.Gets)).MeanMs)
		scanMs = append(scanMs, latencyOf(slices.Clone(w.Scans)).MeanMs)
	}
	return t, getMs, scanMs
}
