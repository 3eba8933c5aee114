package server

// A store's part in elastic regions (docs/regions.md): it follows the
// cluster's region map (regionmap) and splits the regions it serves when
// they grow past the split size.
//
// A split, Store.Split, holding the assignment lock (mu):
//
//  1. region.PrepareSplit: pre-flush, stop writes (UNAVAILABLE, retried by
//     clients), final flush: the parent's final manifest names every
//     acknowledged write.
//  2. The parent's idempotency keys go to its applied-requests object, which
//     a daughter reads when it has none of its own.
//  3. The map commit (regionmap.Commit, create-if-absent): the commit point.
//     Fenced by another store's commit, the split is decided again on the
//     newer map; failed otherwise, the parent is closed and claimed again
//     from its own manifest and WAL (the split undone, as after a crash).
//  4. The daughters open (region.Options.DeriveFrom: derived from the
//     parent's final manifest) and replace the parent in the assignment.
//  5. The parent retires (region.Retire).
//
// Writes to the parent's keys are refused from 1 to 4; reads are served
// throughout (by the parent until 4). After a crash the map decides: before
// 3 the parent reopens from its manifest and WAL; after 3 the daughters
// derive from the parent's final manifest, and OpenStore removes the
// retired parent's WAL directory.
//
// Lock order: mu (assignment) → mapMu (this store's map commits) → the
// region's own locks.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/bellows-kv/bellows/storage-engine/region"
	"github.com/bellows-kv/bellows/storage-engine/regionmap"
)

// ErrNoRegionMap: the store serves fixed regions (no map), which never
// split.
var ErrNoRegionMap = errors.New("server: this store follows no region map: its regions are fixed")

// mapState is one region map and its spans, which every forwarded request
// routes by: computed once per epoch.
type mapState struct {
	m     regionmap.Map
	spans []Span
}

func newMapState(m regionmap.Map) *mapState { return &mapState{m: m, spans: SpansOf(m)} }

// RegionMap is the newest region map this store knows; ok false when it
// serves fixed regions.
func (s *Store) RegionMap() (regionmap.Map, bool) {
	if s == nil {
		return regionmap.Map{}, false
	}
	if st := s.regionMap.Load(); st != nil {
		return st.m, true
	}
	return regionmap.Map{}, false
}

// allSpans are every region of the cluster per the store's map, or nil
// without one. The caller must not modify them.
func (s *Store) allSpans() []Span {
	if st := s.regionMap.Load(); st != nil {
		return st.spans
	}
	return nil
}

// Splits is how many splits this store committed.
func (s *Store) Splits() uint64 { return s.sizeSplits.Load() + s.loadSplits.Load() }

// SplitsBy is how many splits of reason (size, load) this store committed.
func (s *Store) SplitsBy(reason string) uint64 {
	if reason == splitByLoad {
		return s.loadSplits.Load()
	}
	return s.sizeSplits.Load()
}

// learnMap records m if it is newer than the store's.
func (s *Store) learnMap(m regionmap.Map) {
	next := newMapState(m)
	for {
		cur := s.regionMap.Load()
		if cur != nil && cur.m.Epoch >= m.Epoch {
			return
		}
		if s.regionMap.CompareAndSwap(cur, next) {
			return
		}
	}
}

// SplitResult says what a split did.
type SplitResult struct {
	Parent, Left, Right string
	Key                 []byte
	Epoch               uint64
	// Unavailable is how long the parent refused writes.
	Unavailable time.Duration
}

// Split splits region name, which this store serves, at the key that halves
// its bytes (region.SplitKey), following the protocol at the top of this
// file. It fails with region.ErrCannotSplit when no key halves it (one key
// holds it all).
func (s *Store) Split(ctx context.Context, name string) (SplitResult, error) {
	return s.split(ctx, name, splitBySize, func(e *region.Region) ([]byte, error) {
		// The key halves the files' bytes: flush first so the memstore
		// counts (this is also the split's pre-flush, while writes go on).
		if err := e.Flush(ctx); err != nil {
			return nil, err
		}
		return e.SplitKey()
	})
}

// SplitAt splits region name at key (a load split's sampled median), which
// must be strictly inside the region's range.
func (s *Store) SplitAt(ctx context.Context, name string, key []byte) (SplitResult, error) {
	return s.splitAt(ctx, name, key, splitByLoad)
}

func (s *Store) splitAt(ctx context.Context, name string, key []byte, reason string) (SplitResult, error) {
	return s.split(ctx, name, reason, func(*region.Region) ([]byte, error) { return key, nil })
}

// Why a split was made: the label of bellows_region_splits_total.
const (
	splitBySize = "size"
	splitByLoad = "load"
)

func (s *Store) split(ctx context.Context, name, reason string, splitKey func(*region.Region) ([]byte, error)) (SplitResult, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	res := SplitResult{Parent: name}
	if s.closed {
		return res, &region.Error{Region: name, Err: region.ErrClosed}
	}
	m, ok := s.RegionMap()
	if !ok {
		return res, ErrNoRegionMap
	}
	cur := s.current()
	i := slices.IndexFunc(cur.live, func(a *Assignment) bool { return a.Name() == name })
	if i < 0 {
		return res, fmt.Errorf("server: split: region %s is not served by this store", name)
	}
	a := cur.live[i]
	e, err := a.Engine()
	if err != nil {
		return res, err
	}
	if _, ok := m.ByName(name); !ok {
		return res, fmt.Errorf("server: split: region %s is not in the region map (epoch %d)", name, m.Epoch)
	}
	key, err := splitKey(e)
	if err != nil {
		return res, err
	}
	if !a.Span.Contains(key) || bytes.Equal(key, a.Span.Start) {
		return res, &region.Error{Region: name, Err: fmt.Errorf("%w: %q is not strictly inside the region's range", region.ErrCannotSplit, key)}
	}
	res.Key = key
	log := s.opts.Region.Logger
	if s.applied.unsavedWhole(name) {
		// A region whose pre-flushes find nothing to flush (a cold one:
		// a re-cut's merged region) saves no keys before writes stop;
		// its whole table, saved now, leaves the handover only the tail.
		s.saveApplied(ctx, name, false)
	}
	final, err := e.PrepareSplit(ctx)
	// Writes were refused from the start of the final flush, inside
	// PrepareSplit.
	stopped := e.WritesStoppedAt()
	if stopped.IsZero() {
		stopped = time.Now()
	}
	if err != nil {
		s.reclaimLocked(a, e)
		return res, err
	}
	flushed := time.Now()
	_ = s.handOver(a)(ctx)
	handedOver := time.Now()
	next, err := s.commitSplit(ctx, m, name, key, final.Number)
	committed := time.Now()
	if err != nil {
		s.reclaimLocked(a, e)
		log.Error("split not committed: the region reopens whole", "region", name, "err", err)
		return res, err
	}
	res.Epoch = next.Epoch
	// The map names the daughters: the split is done, whatever fails
	// below is finished by a restart (or the background claim).
	// Both daughters open at once: writes wait for the slower one, not
	// for the sum.
	var daughters []*Assignment
	var opening sync.WaitGroup
	for _, sp := range SpansOf(next) {
		if len(sp.Parents) != 1 || sp.Parents[0].Name != name {
			continue
		}
		d := &Assignment{Span: sp}
		opts := s.regionOptions(sp)
		opening.Add(1)
		go func() {
			defer opening.Done()
			// Beside the other daughter's open: a full table's copy
			// takes milliseconds, and no request reaches d before the
			// assignment below.
			s.applied.inherit(name, sp.Name)
			de, err := region.Open(ctx, opts)
			if err != nil {
				log.Error("opening a split's daughter; claiming it in the background", "region", sp.Name, "err", err)
				s.startClaim(d, opts, nil)
			} else {
				d.eng.Store(de)
			}
		}()
		daughters = append(daughters, d)
	}
	opening.Wait()
	live := slices.Concat(cur.live[:i], daughters, cur.live[i+1:])
	var gone []*Assignment
	for _, g := range cur.all {
		if g.released.Load() && !slices.Contains(cur.live, g) {
			gone = append(gone, g)
		}
	}
	a.eng.Store(nil)
	s.snap.Store(newAssigned(live, gone))
	res.Unavailable = time.Since(stopped)
	// Where the refusal went: the final flush (and a compaction's install
	// it waited for), the idempotency keys' object, the map commit, the
	// daughters' opening.
	phases := fmt.Sprintf("final flush %v, idempotency keys %v, map commit %v, daughters open %v",
		flushed.Sub(stopped).Round(time.Millisecond), handedOver.Sub(flushed).Round(time.Millisecond),
		committed.Sub(handedOver).Round(time.Millisecond), time.Since(committed).Round(time.Millisecond))
	res.Left, res.Right = daughters[0].Name(), daughters[1].Name()
	if err := e.Retire(context.WithoutCancel(ctx)); err != nil {
		log.Warn("retiring a split's parent (the region map retired it already)", "region", name, "err", err)
	}
	if reason == splitByLoad {
		s.loadSplits.Add(1)
	} else {
		s.sizeSplits.Add(1)
	}
	log.Info("split region", "region", name, "reason", reason, "key", fmt.Sprintf("%q", key), "left", res.Left, "right", res.Right,
		"epoch", res.Epoch, "writes refused for", res.Unavailable, "refusal", phases)
	return res, nil
}

// commitSplit commits the map with name split at key; fenced by another
// commit (another store's split), it splits the newer map instead, in
// which name, served here, is still live.
func (s *Store) commitSplit(ctx context.Context, m regionmap.Map, name string, key []byte, parentManifest uint64) (regionmap.Map, error) {
	return s.commitOwnChange(ctx, m, "split of "+name, []string{name}, func(m regionmap.Map) (regionmap.Map, error) {
		return m.Split(name, key, parentManifest)
	})
}

// commitOwnChange commits edit of m, a change to regions this store serves
// (a split or a merge of them). Fenced by another commit, it edits the
// newer map and tries again, unless the balancer moved one of the regions
// away meanwhile: going on would open the result only to hand it over,
// so the change is abandoned (what says so names it) and left to the new
// owner.
func (s *Store) commitOwnChange(ctx context.Context, m regionmap.Map, what string, regions []string, edit func(regionmap.Map) (regionmap.Map, error)) (regionmap.Map, error) {
	s.mapMu.Lock()
	defer s.mapMu.Unlock()
	b := s.opts.Region.Bucket
	for attempt := 0; ; attempt++ {
		next, err := edit(m)
		if err != nil {
			return regionmap.Map{}, err
		}
		err = regionmap.Commit(ctx, b, m, &next)
		if err == nil {
			s.learnMap(next)
			return next, nil
		}
		if !errors.Is(err, regionmap.ErrFenced) || attempt >= 16 {
			return regionmap.Map{}, err
		}
		if m, err = regionmap.Load(ctx, b); err != nil {
			return regionmap.Map{}, err
		}
		s.learnMap(m)
		for _, name := range regions {
			if r, ok := m.ByName(name); ok && !s.ownsRegion(r) {
				return regionmap.Map{}, fmt.Errorf("server: %s abandoned: the balancer moved %s to another store (epoch %d)", what, name, m.Epoch)
			}
		}
	}
}

// ownsRegion reports whether this store is r's owner under the map, as the
// Assigner counts (true without an Assigner: the store serves what it has).
func (s *Store) ownsRegion(r regionmap.Region) bool {
	f := s.owns.Load()
	return f == nil || (*f)(Span{Slot: r.Slot, Owner: r.Owner})
}

// reclaimLocked replaces a, whose region e stopped taking writes for a
// split or merge that did not commit, by the same region reopened from
// its own manifest and WAL, which hold every acknowledged write, exactly
// as after a crash. It reopens here and now, not by a background claim:
// when the change was abandoned because the balancer moved the region,
// the Assigner gives it up at once, and giving up a claim still under way
// releases nothing, so the region stayed owned by this store and its new
// owner waited for a release that never came (e2e scenario 13). Open, it
// is released as any region given up. Only if the reopen fails does a
// background claim take over.
func (s *Store) reclaimLocked(a *Assignment, e *region.Region) {
	a.eng.Store(nil)
	if err := e.Close(); err != nil && !errors.Is(err, region.ErrClosed) {
		s.opts.Region.Logger.Warn("closing a region whose split failed", "region", a.Name(), "err", err)
	}
	cur := s.current()
	r := &Assignment{Span: a.Span}
	opts := s.regionOptions(a.Span)
	ctx := context.WithoutCancel(s.bg)
	if re, err := region.Open(ctx, opts); err == nil {
		s.seedApplied(ctx, r, re)
		r.eng.Store(re)
	} else {
		s.opts.Region.Logger.Warn("reopening a region whose split or merge did not commit; claiming it in the background", "region", a.Name(), "err", err)
		s.startClaim(r, opts, nil)
	}
	live := slices.Clone(cur.live)
	live[slices.Index(live, a)] = r
	var gone []*Assignment
	for _, g := range cur.all {
		if g.released.Load() && !slices.Contains(cur.live, g) {
			gone = append(gone, g)
		}
	}
	s.snap.Store(newAssigned(live, gone))
}

// runSplits splits, every interval, the open regions whose data passed
// the split size, one at a time. A region no key can split (a single hot
// key) is tried again only after a back-off, and said so once.
func (s *Store) runSplits(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	unsplittable := map[string]time.Time{}
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for _, a := range s.Assignments() {
			e := a.eng.Load()
			if e == nil || e.DataBytes() < s.opts.SplitBytes || time.Now().Before(unsplittable[a.Name()]) {
				continue
			}
			_, err := s.Split(ctx, a.Name())
			switch {
			case err == nil:
				delete(unsplittable, a.Name())
			case errors.Is(err, region.ErrCannotSplit):
				if _, seen := unsplittable[a.Name()]; !seen {
					s.opts.Region.Logger.Warn("region is over the split size but no key divides it (one key holds its data)",
						"region", a.Name(), "bytes", e.DataBytes(), "split bytes", s.opts.SplitBytes)
				}
				unsplittable[a.Name()] = time.Now().Add(time.Minute)
			case ctx.Err() == nil:
				s.opts.Region.Logger.Warn("splitting region", "region", a.Name(), "err", err)
			}
		}
	}
}

// followMap loads a newer region map whenever one is committed (another
// store's split), checking for the next epoch every interval: one
// existence check, as a waiting claim polls for a release.
func (s *Store) followMap(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	b := s.opts.Region.Bucket
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		m, _ := s.RegionMap()
		ok, err := regionmap.Committed(ctx, b, m.Epoch+1)
		if err != nil || !ok {
			continue
		}
		if next, err := regionmap.Load(ctx, b); err == nil {
			s.learnMap(next)
		} else if ctx.Err() == nil {
			s.opts.Region.Logger.Warn("loading the region map", "err", err)
		}
	}
}

// removeRetiredWALs deletes the WAL directories of regions the map retired:
// a parent's final manifest, from which its daughters derive, holds every
// write its WAL had (split step 1).
func (s *Store) removeRetiredWALs(m regionmap.Map) {
	for _, name := range m.Retired {
		dir := filepath.Join(s.opts.WALRoot, name)
		if _, err := os.Stat(dir); err == nil {
			if err := os.RemoveAll(dir); err != nil {
				s.opts.Region.Logger.Warn("removing a retired region's WAL directory", "region", name, "err", err)
			}
		}
	}
}
