package server

// Re-cutting two adjacent regions (docs/regions.md, "Evening sizes out"):
// the balancer, which alone reads every store and so knows the mean region
// size, brings two uneven neighbours that stopped growing onto its own
// store (regionmap.Plan, RecutStore) and asks that store to re-cut them:
// a merge (merge.go) and a split of the merged region at the key that
// halves its bytes (split.go). Each step is a whole, crash-safe protocol of
// its own; a crash between them leaves one merged region, as large as the
// two, which the balancer re-cuts again once it has held still, or which
// splits by size if it passed the split size.

import (
	"context"
	"errors"
	"fmt"

	"github.com/bellows-kv/bellows/storage-engine/region"
	"github.com/bellows-kv/bellows/storage-engine/regionmap"
)

// RecutResult says what a re-cut did.
type RecutResult struct {
	Merge MergeResult
	Split SplitResult
}

// Recut merges the adjacent regions left and right, both served by this
// store, and splits the merged region at the key that halves its bytes.
// When no key divides it (one key holds it all: region.ErrCannotSplit) it
// stays merged, and that is no error.
func (s *Store) Recut(ctx context.Context, left, right string) (RecutResult, error) {
	var res RecutResult
	mr, err := s.Merge(ctx, left, right)
	res.Merge = mr
	if err != nil {
		return res, fmt.Errorf("re-cut of %s and %s: %w", left, right, err)
	}
	sr, err := s.Split(ctx, mr.Merged)
	res.Split = sr
	if errors.Is(err, region.ErrCannotSplit) {
		return res, nil
	}
	if err != nil {
		return res, fmt.Errorf("re-cut of %s and %s: splitting the merged %s: %w", left, right, mr.Merged, err)
	}
	s.recuts.Add(1)
	s.opts.Region.Logger.Info("re-cut regions", "left", left, "right", right, "merged", mr.Merged,
		"into", fmt.Sprintf("%s, %s", sr.Left, sr.Right), "key", fmt.Sprintf("%q", sr.Key),
		"writes refused for", mr.Unavailable+sr.Unavailable)
	return res, nil
}

// Recuts is how many re-cuts this store made.
func (s *Store) Recuts() uint64 { return s.recuts.Load() }

// recutCandidate is the pair of adjacent regions, both open on this store
// (ordinal own) and both ready (their sizes held still), that Recut picks
// against the mean of the regions read, the one furthest off the mean
// first; ok false when none.
func recutCandidate(m regionmap.Map, rd Readings, ready map[string]bool, own int, tolerance float64, minBytes int64) (left, right string, ok bool) {
	mean := regionmap.MeanRegionBytes(m, rd.Load)
	var worst int64 = -1
	for i := 0; i+1 < len(m.Region); i++ { // the map's regions tile the keys in order
		a, b := m.Region[i].Name, m.Region[i+1].Name
		if !ready[a] || !ready[b] {
			continue
		}
		if at, open := rd.OpenAt[a]; !open || at != own {
			continue
		}
		if at, open := rd.OpenAt[b]; !open || at != own {
			continue
		}
		la, lb := rd.Load[a].Bytes, rd.Load[b].Bytes
		if !regionmap.Recut(la, lb, mean, tolerance, minBytes) {
			continue
		}
		if d := max(abs64(la-mean), abs64(lb-mean)); d > worst {
			worst, left, right, ok = d, a, b, true
		}
	}
	return left, right, ok
}

func abs64(v int64) int64 {
	if v < 0 {
		return -v
	}
	return v
}
