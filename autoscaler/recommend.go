package autoscaler

import (
	"math"
	"time"
)

// Clamp bounds n to [lo, hi]; hi wins over lo when they cross.
func Clamp(n int64, lo, hi int32) int32 {
	if n > int64(hi) {
		return hi
	}
	if n < int64(lo) {
		return lo
	}
	if n > math.MaxInt32 {
		return hi
	}
	return int32(n)
}

// Sample is one clamped recommendation at a point in time.
type Sample struct {
	Time     time.Time
	Replicas int32
}

// Windows are the stabilization windows (HPA behavior semantics).
type Windows struct {
	// Up: scale up only to the lowest recommendation within this window.
	Up time.Duration
	// Down: scale down only to the highest recommendation within this window.
	Down time.Duration
}

// Stabilize applies the windows to a new recommendation, like the HPA:
// the new recommendation joins the history; the result never exceeds the
// minimum recommendation within the up-window (so a brief spike does not
// scale up) and never goes below the maximum within the down-window (so a
// brief dip does not scale down). It returns the replicas to apply and the
// history to keep (samples still inside the longer window, oldest first).
func Stabilize(now time.Time, current, recommended int32, history []Sample, w Windows) (int32, []Sample) {
	keepFor := max(w.Up, w.Down)
	kept := make([]Sample, 0, len(history)+1)
	for _, s := range history {
		if now.Sub(s.Time) < keepFor && !s.Time.After(now) {
			kept = append(kept, s)
		}
	}
	kept = append(kept, Sample{Time: now, Replicas: recommended})

	upLimit, downLimit := recommended, recommended
	for _, s := range kept {
		age := now.Sub(s.Time)
		if age < w.Up || age == 0 {
			upLimit = min(upLimit, s.Replicas)
		}
		if age < w.Down || age == 0 {
			downLimit = max(downLimit, s.Replicas)
		}
	}
	desired := current
	if desired < upLimit {
		desired = upLimit
	}
	if desired > downLimit {
		desired = downLimit
	}
	return desired, kept
}
