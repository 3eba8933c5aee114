package server

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bellows-kv/bellows/storage-engine/region"
)

// The WAL bound keeps a restart's replay short however long the store has
// run (LogBase §3.6: recovery bounded by checkpoints, a flush being ours).
// Each region already bounds its own WAL by bytes on its write path
// (region.Options.MaxWALBytes). That leaves two ways for the replay to grow:
//
//   - age: a region written slowly keeps its memstore, and so its WAL, for
//     as long as it takes to fill. HBase flushes such a memstore after
//     hbase.regionserver.optionalcacheflushinterval (1 h).
//   - many regions: each under its own bound, together far over what a
//     restart can replay quickly. HBase's hbase.regionserver.maxlogs
//     flushes the regions holding the oldest WAL edits first.
//
// walBound is the store's loop for both: every interval it flushes the
// regions whose oldest unflushed write is older than MaxWALAge, then, while
// the store's WAL is over its cap, the regions with the oldest unflushed
// writes first. The flushes of one round run in parallel and the round waits
// for them, so a slow flush delays the next round rather than stacking up.

// WALBoundStats count the flushes the store's WAL bound forced.
type WALBoundStats struct {
	AgeFlushes, CapFlushes atomic.Uint64
}

// walCap is the store-wide WAL cap, given the open regions' memstore
// budget.
func (s *Store) walCap(budget int64) int64 {
	if s.opts.MaxStoreWALBytes > 0 {
		return s.opts.MaxStoreWALBytes
	}
	return budget
}

// walRegion is one open region as a bound round sees it.
type walRegion struct {
	e      *region.Region
	bytes  int64
	oldest time.Time // zero: nothing unflushed
}

// boundWAL runs one round of the WAL bound at now: it returns the regions it
// flushed for age and for the cap, once their flushes have finished.
func (s *Store) boundWAL(ctx context.Context, now time.Time) (byAge, byCap []string) {
	var rs []walRegion
	var budget int64
	s.Open(func(_ *Assignment, e *region.Region) {
		rs = append(rs, walRegion{e: e, bytes: e.WALBytes(), oldest: e.OldestUnflushed()})
		budget += e.MemstoreBytes()
	})
	flush, byAge, byCap := walFlushes(rs, now, s.opts.MaxWALAge, s.walCap(budget))
	s.walStats.AgeFlushes.Add(uint64(len(byAge)))
	s.walStats.CapFlushes.Add(uint64(len(byCap)))
	var wg sync.WaitGroup
	for _, e := range flush {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := e.Flush(ctx); err != nil && !errors.Is(err, region.ErrClosed) && !errors.Is(err, region.ErrReleasing) && ctx.Err() == nil {
				s.opts.Region.Logger.Warn("flush forced by the WAL bound failed", "region", e.Name(), "err", err)
			}
		}()
	}
	wg.Wait()
	return byAge, byCap
}

// walFlushes decides a round: every region whose oldest unflushed write is
// at least maxAge old, then, oldest first, regions with unflushed writes
// until what remains is within limit. A region without unflushed writes
// is never chosen: its WAL is already truncated as far as it can be.
func walFlushes(rs []walRegion, now time.Time, maxAge time.Duration, limit int64) (flush []*region.Region, byAge, byCap []string) {
	rs = slices.Clone(rs)
	slices.SortFunc(rs, func(a, b walRegion) int { return a.oldest.Compare(b.oldest) })
	var total int64
	for _, r := range rs {
		total += r.bytes
	}
	for _, r := range rs {
		if r.oldest.IsZero() {
			continue
		}
		switch {
		case maxAge > 0 && now.Sub(r.oldest) >= maxAge:
			byAge = append(byAge, r.e.Name())
		case total > limit:
			byCap = append(byCap, r.e.Name())
		default:
			continue
		}
		flush = append(flush, r.e)
		total -= r.bytes
	}
	return flush, byAge, byCap
}

// runWALBound runs boundWAL every interval until ctx ends.
func (s *Store) runWALBound(ctx context.Context, interval time.Duration) {
	every(ctx, interval, func(now time.Time) {
		byAge, byCap := s.boundWAL(ctx, now)
		if len(byAge)+len(byCap) > 0 {
			s.opts.Region.Logger.Debug("flushed regions to bound the WAL", "byAge", byAge, "byCap", byCap)
		}
	})
}

// every calls f every interval, with the tick's time, until ctx ends: the
// store's background loops (the WAL bound, the transaction registry's
// sweep).
func every(ctx context.Context, interval time.Duration, f func(now time.Time)) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			f(now)
		}
	}
}
