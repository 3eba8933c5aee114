package server

// When a store merges (docs/regions.md §3): two adjacent regions it serves,
// both small and cold, for long enough. Deletes, splits by load that the
// load left, and ranges that emptied would otherwise leave ever more tiny
// regions, each with its memstore, WAL, manifest and compactions. The
// balancer keeps small neighbours on one store (regionmap.Plan), so they
// can merge here.

import (
	"bytes"
	"context"
	"errors"
	"time"
)

// mergeReading is one open region as the merge decision sees it.
type mergeReading struct {
	name       string
	start, end []byte
	bytes      int64
	qps        float64
}

// MergeLimits bound what merges: each region under MaxBytes, the pair
// under MaxPairBytes (0: no bound), each under MaxQPS requests/s (0: load
// is not looked at).
type mergeLimits struct {
	maxBytes, maxPairBytes int64
	maxQPS                 float64
}

// mergePairs are the adjacent pairs of readings (in key order, open
// regions of one store) that may merge now, left to right, none sharing a
// region: a region merges with one neighbour per pass.
func mergePairs(rs []mergeReading, l mergeLimits) [][2]string {
	small := func(r mergeReading) bool {
		return r.bytes < l.maxBytes && (l.maxQPS <= 0 || r.qps < l.maxQPS)
	}
	var out [][2]string
	for i := 0; i+1 < len(rs); i++ {
		a, b := rs[i], rs[i+1]
		if a.end == nil || !bytes.Equal(a.end, b.start) || !small(a) || !small(b) {
			continue
		}
		if l.maxPairBytes > 0 && a.bytes+b.bytes >= l.maxPairBytes {
			continue
		}
		out = append(out, [2]string{a.name, b.name})
		i++ // b is taken
	}
	return out
}

// mergeReadings are this store's open regions, in key order.
func (s *Store) mergeReadings() []mergeReading {
	var out []mergeReading
	for _, a := range s.Assignments() {
		e := a.eng.Load()
		if e == nil {
			continue
		}
		out = append(out, mergeReading{name: a.Name(), start: a.Span.Start, end: a.Span.End, bytes: e.DataBytes(), qps: a.load.Rate()})
	}
	return out
}

// mergeLimitsOf are the store's settings as merge limits.
func (s *Store) mergeLimitsOf() mergeLimits {
	l := mergeLimits{maxBytes: s.opts.MergeBytes}
	if s.opts.SplitBytes > 0 {
		l.maxPairBytes = s.opts.SplitBytes / 2
	}
	if s.opts.SplitQPS > 0 {
		l.maxQPS = s.opts.SplitQPS / 4
	}
	return l
}

// runMerges merges, every interval, one pair of adjacent regions that has
// been mergeable (mergePairs) for MergeAfter without a break.
func (s *Store) runMerges(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	since := map[[2]string]time.Time{}
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := time.Now()
		pairs := mergePairs(s.mergeReadings(), s.mergeLimitsOf())
		seen := map[[2]string]bool{}
		var due [][2]string
		for _, p := range pairs {
			seen[p] = true
			if t0, ok := since[p]; !ok {
				since[p] = now
			} else if now.Sub(t0) >= s.opts.MergeAfter {
				due = append(due, p)
			}
		}
		for p := range since {
			if !seen[p] {
				delete(since, p) // the break resets the wait
			}
		}
		for _, p := range due {
			delete(since, p)
			_, err := s.Merge(ctx, p[0], p[1])
			if err != nil && ctx.Err() == nil && !errors.Is(err, ErrNoRegionMap) {
				s.opts.Region.Logger.Warn("merging small adjacent regions", "left", p[0], "right", p[1], "err", err)
			}
			// The map changed: the other pairs are judged next pass.
			break
		}
	}
}
