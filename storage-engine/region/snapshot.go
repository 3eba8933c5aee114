package region

import (
	"errors"
	"slices"

	"github.com/bellows-kv/bellows/storage-engine/manifest"
)

func isFenced(err error) bool { return errors.Is(err, manifest.ErrFenced) }

// Snapshot pins a read timestamp: compactions keep every version it reads
// until it is closed.
type Snapshot struct {
	r      *Region
	ts     uint64
	closed bool
}

// Snapshot returns a snapshot at the newest visible timestamp.
func (r *Region) Snapshot() (*Snapshot, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil, ErrClosed
	}
	ts := r.vis.load()
	r.snaps[ts]++
	return &Snapshot{r: r, ts: ts}, nil
}

// SnapshotAt pins ts, which may be above the newest visible timestamp (a
// transaction's start, which this region will advance to before it serves
// a read at it): compactions keep every version a read at ts needs until
// the snapshot is closed. Versions a compaction dropped before the pin
// stay dropped.
func (r *Region) SnapshotAt(ts uint64) (*Snapshot, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil, ErrClosed
	}
	if ts < r.exactFrom && r.snaps[ts] == 0 {
		// A merge may have dropped what a read at ts needs already.
		return nil, &SnapshotTooOldError{Region: r.opts.Name, ReadTS: ts, ExactFrom: r.exactFrom}
	}
	r.snaps[ts]++
	return &Snapshot{r: r, ts: ts}, nil
}

// TS is the snapshot's read timestamp.
func (s *Snapshot) TS() uint64 { return s.ts }

// Get reads key as of the snapshot.
func (s *Snapshot) Get(key []byte) ([]byte, bool, error) { return s.r.Get(key, s.ts) }

// Scan reads a range as of the snapshot.
func (s *Snapshot) Scan(start, end []byte, limit int) ([]KV, error) {
	return s.r.Scan(start, end, limit, s.ts)
}

// Close releases the snapshot; closing twice is harmless.
func (s *Snapshot) Close() {
	r := s.r
	r.mu.Lock()
	defer r.mu.Unlock()
	if s.closed {
		return
	}
	s.closed = true
	if r.snaps[s.ts]--; r.snaps[s.ts] == 0 {
		delete(r.snaps, s.ts)
	}
}

func (r *Region) snapshotList() []uint64 {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.snapshotListLocked()
}

func (r *Region) snapshotListLocked() []uint64 {
	out := make([]uint64, 0, len(r.snaps))
	for ts := range r.snaps {
		out = append(out, ts)
	}
	slices.Sort(out)
	return out
}

// retentionSnapshots is what a merge that starts now and judges the
// versions at or below judged must keep: the pinned snapshots, ascending.
// When the merge may drop versions, it first raises exactFrom to judged, so
// a read below it that no pin covers is refused (acquireUnlocked) and a pin
// below it is not taken (SnapshotAt): taken after this list, it would not
// be honoured by this merge.
func (r *Region) retentionSnapshots(judged uint64) []uint64 {
	if !r.DropsVersions() {
		return r.snapshotList()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.exactFrom = max(r.exactFrom, judged)
	return r.snapshotListLocked()
}

// ExactFrom is the oldest timestamp every read is exact at; a read below
// it is exact only at a pinned snapshot (see SnapshotTooOldError). 0 while
// the region has dropped no version.
func (r *Region) ExactFrom() uint64 {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.exactFrom
}

// Snapshots are the read timestamps open snapshots pin, ascending (one per
// timestamp however many pin it).
func (r *Region) Snapshots() []uint64 { return r.snapshotList() }

// DropsVersions reports whether compactions may drop versions a read at an
// older timestamp needs (retention keeps at most MaxVersions, or a GC
// window of GCTTL): only then does a snapshot need pinning.
func (r *Region) DropsVersions() bool { return r.opts.Retention.DropsVersions() }
