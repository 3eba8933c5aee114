package server

// Merging two adjacent regions this store serves into one (docs/regions.md,
// section 3): the split's protocol with two parents. The store decides when
// (automerge.go: adjacent, both small and cold for a while); the balancer
// brings small neighbours onto one store; Store.Merge does it.
//
// A merge, Store.Merge(left, right), holding the assignment lock (mu):
//
//  1. Checks: the store follows a region map, in which left ends where
//     right starts, and serves both (open).
//  2. region.PrepareMerge of left, then of right: pre-flush (and, while
//     writes go on, a major compaction of a region with a file holding keys
//     past its range), stop writes (UNAVAILABLE, retried by clients), final
//     flush. Each final manifest names every acknowledged write of its
//     region, and only files within its range.
//  3. Both parents' idempotency keys go to their applied-requests objects,
//     which the merged region reads when it has none of its own.
//  4. The merged region's first manifest is derived in memory from both
//     final manifests (manifest.DeriveFrom): a merge whose region could not
//     derive is refused here, before the commit.
//  5. The map commit (regionmap.Commit, create-if-absent): both parents
//     retired, the merged region M with parents [{left, nL}, {right, nR}]
//     in left's slot. The commit point. Fenced by another store's commit,
//     the merge is decided again on the newer map (both still live and
//     adjacent: nobody else splits or merges regions this store serves),
//     unless the balancer moved either away meanwhile; failed otherwise
//     (or moved), both parents are closed and claimed again from their own
//     manifests and WALs (the merge undone, as after a crash).
//  6. M opens (region.Options.DeriveFrom: derived from both final
//     manifests) and replaces both parents in the assignment.
//  7. The parents retire (region.Retire), left then right.
//
// Writes to either parent's keys are refused from 2 (left's from its
// PrepareMerge, right's from its own) to 6; reads are served throughout (by
// the parents until 6). After a crash the map decides: before 5 both
// parents reopen from their manifests and WALs; after 5 M derives from
// both final manifests (deterministic, committed create-if-absent), and
// OpenStore removes the retired parents' WAL directories.
//
// Lock order: mu (assignment) → mapMu (this store's map commits) → the
// left region's own locks, then the right's; a region's locks are never
// held while the other's are taken.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/bellows-kv/bellows/storage-engine/manifest"
	"github.com/bellows-kv/bellows/storage-engine/region"
	"github.com/bellows-kv/bellows/storage-engine/regionmap"
)

// MergeResult says what a merge did.
type MergeResult struct {
	Left, Right, Merged string
	Epoch               uint64
	// Unavailable is how long the parents refused writes: from the left
	// one's final flush to the merged region's opening.
	Unavailable time.Duration
}

// Merges is how many merges this store committed.
func (s *Store) Merges() uint64 { return s.merges.Load() }

// errMergeCrashed is what Merge returns when a test's crash hook stopped it.
var errMergeCrashed = errors.New("server: merge: stopped by the test's crash hook")

// crashAt reports whether the test's crash hook stops the merge after step.
func (s *Store) crashAt(step string) bool { return s.mergeCrash != nil && s.mergeCrash(step) }

// Merge merges the adjacent regions left and right (left's range ends where
// right's starts), both served by this store, into one, following the
// protocol at the top of this file.
func (s *Store) Merge(ctx context.Context, left, right string) (MergeResult, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	res := MergeResult{Left: left, Right: right}
	if s.closed {
		return res, &region.Error{Region: left, Err: region.ErrClosed}
	}
	m, ok := s.RegionMap()
	if !ok {
		return res, ErrNoRegionMap
	}
	lr, lok := m.ByName(left)
	rr, rok := m.ByName(right)
	switch {
	case !lok || !rok:
		missing := left
		if lok {
			missing = right
		}
		return res, fmt.Errorf("server: merging %s and %s: %s is not in the region map (epoch %d)", left, right, missing, m.Epoch)
	case lr.End == nil || !bytes.Equal(lr.End, rr.Start):
		return res, fmt.Errorf("server: merging %s [%q, %s) and %s [%q, %s): not adjacent; the left region must end where the right one starts",
			left, lr.Start, spanEnd(lr.End), right, rr.Start, spanEnd(rr.End))
	}
	cur := s.current()
	var as [2]*Assignment
	var es [2]*region.Region
	for i, name := range []string{left, right} {
		j := slices.IndexFunc(cur.live, func(a *Assignment) bool { return a.Name() == name })
		if j < 0 {
			return res, fmt.Errorf("server: merging %s and %s: %s is not served by this store; the balancer moves one next to the other first", left, right, name)
		}
		e, err := cur.live[j].Engine()
		if err != nil {
			return res, fmt.Errorf("server: merging %s and %s: %w", left, right, err)
		}
		as[i], es[i] = cur.live[j], e
	}
	log := s.opts.Region.Logger
	// 2. Stop and flush both; a failure reopens what was stopped.
	var finals [2]manifest.Manifest
	var stopped time.Time
	for i, r := range []regionmap.Region{lr, rr} {
		final, err := es[i].PrepareMerge(ctx, r.Start, r.End)
		if i == 0 {
			// The left parent refused writes from its final flush on.
			if stopped = es[0].WritesStoppedAt(); stopped.IsZero() {
				stopped = time.Now()
			}
		}
		if err != nil {
			for _, k := range []int{0, 1}[:i+1] {
				s.reclaimLocked(as[k], es[k])
			}
			return res, err
		}
		finals[i] = final
		if s.crashAt(fmt.Sprintf("prepared %s", r.Name)) {
			return res, errMergeCrashed
		}
	}
	undo := func(err error) (MergeResult, error) {
		for k := range as {
			s.reclaimLocked(as[k], es[k])
		}
		log.Error("merge not committed: both regions reopen", "left", left, "right", right, "err", err)
		return res, err
	}
	// 3. The parents' idempotency keys.
	var recs []appliedRecord
	for i := range as {
		_ = s.handOver(as[i])(ctx)
		recs = append(recs, s.applied.export(as[i].Name())...)
	}
	if s.crashAt("saved applied requests") {
		return res, errMergeCrashed
	}
	// 4. The merged region must derive.
	if _, err := manifest.DeriveFrom([]manifest.Parent{{Name: left, Manifest: finals[0]}, {Name: right, Manifest: finals[1]}}, lr.Start, rr.End); err != nil {
		return undo(fmt.Errorf("server: merging %s and %s: %w", left, right, err))
	}
	// 5. The commit point.
	next, err := s.commitMerge(ctx, m, left, right, finals[0].Number, finals[1].Number)
	if err != nil {
		return undo(err)
	}
	res.Epoch = next.Epoch
	if s.crashAt("committed the map") {
		return res, errMergeCrashed
	}
	// 6. The map names the merged region: the merge is done; whatever
	// fails below is finished by a restart (or the background claim).
	var merged *Assignment
	for _, sp := range SpansOf(next) {
		if len(sp.Parents) == 2 && sp.Parents[0].Name == left && sp.Parents[1].Name == right {
			merged = &Assignment{Span: sp}
		}
	}
	if merged == nil {
		// Cannot happen: commitMerge committed this merge.
		return res, fmt.Errorf("server: merging %s and %s: map epoch %d names no region merged from them", left, right, next.Epoch)
	}
	res.Merged = merged.Name()
	s.applied.seed(merged.Name(), recs)
	opts := s.regionOptions(merged.Span)
	if me, err := region.Open(ctx, opts); err != nil {
		log.Error("opening a merged region; claiming it in the background", "region", merged.Name(), "err", err)
		s.startClaim(merged, opts, nil)
	} else {
		merged.eng.Store(me)
	}
	live := slices.DeleteFunc(slices.Clone(cur.live), func(a *Assignment) bool { return a == as[0] || a == as[1] })
	live = append(live, merged)
	var gone []*Assignment
	for _, g := range cur.all {
		if g.released.Load() && !slices.Contains(cur.live, g) {
			gone = append(gone, g)
		}
	}
	for _, a := range as {
		a.eng.Store(nil)
	}
	s.snap.Store(newAssigned(live, gone))
	res.Unavailable = time.Since(stopped)
	// 7. The parents retire.
	for i, e := range es {
		step := "opened the merged region"
		if i == 1 {
			step = "retired " + left
		}
		if s.crashAt(step) {
			// The crash: the parents' files and WALs stay as they are;
			// closing only lets this process open them again.
			for _, e := range es[i:] {
				_ = e.Close()
			}
			return res, errMergeCrashed
		}
		if err := e.Retire(context.WithoutCancel(ctx)); err != nil {
			log.Warn("retiring a merge's parent (the region map retired it already)", "region", e.Name(), "err", err)
		}
	}
	s.merges.Add(1)
	log.Info("merged regions", "left", left, "right", right, "merged", res.Merged, "epoch", res.Epoch, "writes refused for", res.Unavailable)
	return res, nil
}

// commitMerge commits the map with left and right merged; fenced by
// another commit (another store's change), it merges them in the newer map,
// in which both, served here, are still live and adjacent.
func (s *Store) commitMerge(ctx context.Context, m regionmap.Map, left, right string, nLeft, nRight uint64) (regionmap.Map, error) {
	return s.commitOwnChange(ctx, m, "merge of "+left+" and "+right, []string{left, right}, func(m regionmap.Map) (regionmap.Map, error) {
		return m.Merge(left, right, nLeft, nRight)
	})
}

func spanEnd(end []byte) string {
	if end == nil {
		return "∞"
	}
	return fmt.Sprintf("%q", end)
}
