package region

// The compacting memstore's side of the region: in-memory flushes (each
// starts a WAL segment) and WAL truncation from the oldest timestamp still
// in memory (Accordion §3.2, "WAL Truncation").
//
// Invariant: a WAL segment is removed only when every record in it has a
// timestamp below every version still in a memstore and below every commit
// still in flight: each of its records is then in an SST named by a
// committed manifest, or was dropped by an in-memory compaction for a newer
// version of its key that is itself in memory or in an SST. So replay of
// the segments left rebuilds every acknowledged write.

import (
	"slices"

	"github.com/bellows-kv/bellows/storage-engine/memstore"
)

// walSegment is a closed WAL segment and the newest timestamp appended to
// it (the region's last timestamp when it was closed).
type walSegment struct {
	seg   uint64
	maxTS uint64
}

// rotateWALLocked closes the current WAL segment, records its newest
// timestamp and returns the new segment's number. Called with commitMu
// held, so no append is between the two.
func (r *Region) rotateWALLocked() uint64 {
	next := r.log.Rotate()
	r.walMu.Lock()
	r.walSegs = append(r.walSegs, walSegment{seg: next - 1, maxTS: r.lastTS})
	r.walMu.Unlock()
	return next
}

// pushActiveLocked begins an in-memory flush: the active segment joins the
// pipeline, later appends go to a new WAL segment (so the WAL can be
// truncated at segment granularity as in-memory compaction drops versions),
// and the in-memory flush goroutine flattens and merges. Called with
// commitMu held.
func (r *Region) pushActiveLocked() {
	if !r.mem.ms.PushActive() {
		return
	}
	r.rotateWALLocked()
	select {
	case r.inMemCh <- struct{}{}:
	default:
	}
}

func (r *Region) inMemoryFlushLoop() {
	defer r.wg.Done()
	for {
		select {
		case <-r.bgCtx.Done():
			return
		case <-r.inMemCh:
		}
		r.mu.RLock()
		ms := r.mem.ms
		r.mu.RUnlock()
		res := ms.FlushInMemory(r.inMemoryRetention())
		if res.Action == memstore.Compact || res.Flattened > 0 {
			r.truncateWAL()
		}
	}
}

// inMemoryRetention is what an in-memory compaction starting now may drop:
// the region's retention rules, its open snapshots, and as the horizon the
// GC horizon (retention.Horizon: the visible timestamp under a count bound,
// now − gcTTL under a GC window, 0 when every version is kept). A reader
// that loaded an older visible timestamp and then meets the compaction's
// view loads it again (acquire).
func (r *Region) inMemoryRetention() memstore.Retention {
	horizon := r.gcHorizon(r.vis.load())
	snaps := r.retentionSnapshots(horizon)
	slices.Reverse(snaps)
	return memstore.Retention{MaxVersions: r.opts.Retention.MaxVersions, SnapshotsDesc: snaps, Horizon: horizon}
}

// gcHorizon is the newest timestamp a merge starting now may judge, when
// newest is the newest it could (the visible timestamp, or a disk
// compaction's newest input version): package retention's rule on the
// region's retention and its clock.
func (r *Region) gcHorizon(newest uint64) uint64 {
	return r.opts.Retention.Horizon(newest, uint64(r.opts.Clock.Physical().UnixNano()))
}

// truncateWAL removes the closed WAL segments whose records are all older
// than everything still in memory or in flight.
func (r *Region) truncateWAL() {
	// The order of the three reads matters. Segments first: a commit that
	// appended to one of them registered with vis (under commitMu) before
	// the segment was closed. Then the commits in flight: one that is not
	// in flight any more has added its versions to a memstore. Then the
	// memstores.
	r.walMu.Lock()
	segs := append([]walSegment(nil), r.walSegs...)
	r.walMu.Unlock()
	if len(segs) == 0 {
		return
	}
	oldest := r.vis.oldestInFlight()
	r.mu.RLock()
	oldest = min(oldest, r.mem.ms.View().MinTS())
	for _, mt := range r.imm {
		oldest = min(oldest, mt.frozen.MinTS())
	}
	// Transaction records live in no memstore version until their
	// memstore's flush puts them in the manifest.
	for _, mt := range append([]*memTable{r.mem}, r.imm...) {
		if ts := mt.txnMinTS.Load(); ts != 0 {
			oldest = min(oldest, ts)
		}
	}
	r.mu.RUnlock()
	n := 0
	for n < len(segs) && segs[n].maxTS < oldest {
		n++
	}
	if n == 0 {
		return
	}
	bound := segs[n-1].seg + 1
	r.checkIO("removing WAL segments")
	if err := r.log.RemoveBefore(bound); err != nil {
		r.opts.Logger.Warn("truncating the WAL", "region", r.opts.Name, "err", err)
		return
	}
	r.forgetWALSegmentsBefore(bound)
}

// forgetWALSegmentsBefore drops the records of segments below bound, which
// were removed.
func (r *Region) forgetWALSegmentsBefore(bound uint64) {
	r.walMu.Lock()
	i := 0
	for i < len(r.walSegs) && r.walSegs[i].seg < bound {
		i++
	}
	r.walSegs = r.walSegs[i:]
	r.walMu.Unlock()
}

// MemstoreStats are the region's in-memory flush counters.
func (r *Region) MemstoreStats() *memstore.Stats { return &r.memStats }

// PipelineSegments is the number of immutable segments in the active
// memstore's pipeline.
func (r *Region) PipelineSegments() int {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.mem.ms.View().Segments()
}

// ReadSources is what a read of the region searches now: the memstore
// segments of the active and the frozen memstores, by kind, and the SST
// files (a get reads those whose key range holds its key).
type ReadSources struct {
	Skiplists, FlatSegments, Files int
	// SkiplistVersions are the versions the skiplists hold.
	SkiplistVersions int64
}

// ReadSources counts the region's read sources now.
func (r *Region) ReadSources() ReadSources {
	r.mu.RLock()
	defer r.mu.RUnlock()
	var rs ReadSources
	count := func(v *memstore.View) {
		sl, fl, n := v.SegmentKinds()
		rs.Skiplists += sl
		rs.FlatSegments += fl
		rs.SkiplistVersions += n
	}
	count(r.mem.ms.View())
	for _, mt := range r.imm {
		count(mt.frozen)
	}
	rs.Files = len(r.current.tables)
	return rs
}

// WALBytes is the size of the region's WAL segments.
func (r *Region) WALBytes() int64 { return r.log.Size() }

// WALAppendedBytes is every byte appended to the region's WAL since it was
// opened: its write volume.
func (r *Region) WALAppendedBytes() int64 { return r.log.Appended() }
