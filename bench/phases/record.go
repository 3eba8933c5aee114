package phases

import (
	"sync"
	"time"
)

// recorder sums latencies into fixed windows since start.
type recorder struct {
	mu      sync.Mutex
	start   time.Time
	window  time.Duration
	windows []window
}

type window struct {
	Gets, Scans     int
	GetSum, ScanSum time.Duration
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
		w.Scans++
		w.ScanSum += d
	} else {
		w.Gets++
		w.GetSum += d
	}
	r.mu.Unlock()
}

// mean returns the mean get and scan latency (ms) of operations that began
// in [from, to).
func (r *recorder) mean(from, to time.Time) (getMs, scanMs float64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var g, s window
	for i, w := range r.windows {
		at := r.start.Add(time.Duration(i) * r.window)
		if at.Before(from) || !at.Before(to) {
			continue
		}
		g.Gets += w.Gets
		g.GetSum += w.GetSum
		s.Scans += w.Scans
		s.ScanSum += w.ScanSum
	}
	return ms(g.GetSum, g.Gets), ms(s.ScanSum, s.Scans)
}

func ms(sum time.Duration, n int) float64 {
	if n == 0 {
		return 0
	}
	return float64(sum) / float64(n) / float64(time.Millisecond)
}

// series returns per-window mean get latency (ms) from start.
func (r *recorder) series() (t []float64, getMs []float64, scanMs []float64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i, w := range r.windows {
		t = append(t, (time.Duration(i) * r.window).Seconds())
		getMs = append(getMs, ms(w.GetSum, w.Gets))
		scanMs = append(scanMs, ms(w.ScanSum, w.Scans))
	}
	return t, getMs, scanMs
}
