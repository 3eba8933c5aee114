package region

// The continuous WAL archive of a region (docs/backup.md, section 2): a
// goroutine ships the WAL to the bucket every WALArchiveInterval
// (walarchive.Shipper), and shutdown ships the rest.
//
// # The frontier
//
// A point-in-time restore to T replays every archived record with a version
// at or below T, so the stream's frontier F may only claim T once every such
// record is shipped. archiveFrontier takes a store clock reading t and makes
// the region readable at t (ReadableAt: every commit at or below t has
// applied its record, and later ones get timestamps above t); then
//
//   - a lock held now may still commit at a timestamp above its start, in a
//     record written later: F stays below the oldest lock's start;
//   - a lock prewritten later commits above the clock reading its
//     coordinator took after the prewrite, which is past t less the maximum
//     clock offset: F stays at t less that offset.
//
// Everything appended before F was computed is shipped before F is
// written (Ship waits until it is in the files).
//
// # Lock order
//
// archiveMu is taken alone, across a ship's bucket writes: by the archive
// loop and by shutdown after the loop stopped. statusMu is a leaf, held only
// to copy the status, so reading it never waits on the bucket.
// archiveFrontier takes commitMu (advanceClock) and the transaction state's
// leaf lock, one after the other.

import (
	"bytes"
	"context"
	"time"

	"github.com/bellows-kv/bellows/storage-engine/kv"
	"github.com/bellows-kv/bellows/storage-engine/walarchive"
)

// ArchiveStatus is what the region's WAL archive last did.
type ArchiveStatus struct {
	Enabled bool
	// Frontier: every version at or below it is archived.
	Frontier uint64
	walarchive.Status
	ShippedTotal int64
	// Covered: every record appended before it is archived (the start of
	// the newest Ship that succeeded; the region's opening before the
	// first). Its age bounds the age of the oldest record not archived:
	// the archive's lag.
	Covered time.Time
	Err     error
}

// Lag is how old the oldest record not yet archived may be at now (0: not
// archived).
func (s ArchiveStatus) Lag(now time.Time) time.Duration {
	if !s.Enabled {
		return 0
	}
	return now.Sub(s.Covered)
}

// ArchiveStatus returns the archive's state (Enabled false: not archived).
func (r *Region) ArchiveStatus() ArchiveStatus {
	r.statusMu.Lock()
	defer r.statusMu.Unlock()
	return r.archiveStatus
}

func (r *Region) archiveFrontier() (uint64, error) {
	t := r.opts.Clock.Now()
	if err := r.ReadableAt(t); err != nil {
		return 0, err
	}
	f := t
	if d := uint64(r.opts.Clock.MaxOffset()); f > d {
		f -= d
	}
	if m := r.txn.minLockStart(); m != 0 && m-1 < f {
		f = m - 1
	}
	return f, nil
}

func (r *Region) archiveLoop() {
	defer r.wg.Done()
	t := time.NewTicker(r.opts.WALArchiveInterval)
	defer t.Stop()
	for {
		select {
		case <-r.bgCtx.Done():
			return
		case <-t.C:
		}
		began := time.Now()
		f, err := r.archiveFrontier()
		if err == nil {
			err = r.ship(r.bgCtx, began, f, false)
		}
		if err != nil && r.bgCtx.Err() == nil {
			r.opts.Logger.Warn("archiving the WAL", "region", r.opts.Name, "err", err)
		}
	}
}

// ship runs one Ship and records its status.
func (r *Region) ship(ctx context.Context, began time.Time, frontier uint64, final bool) error {
	r.archiveMu.Lock()
	defer r.archiveMu.Unlock()
	st, err := r.shipper.Ship(ctx, frontier, final)
	r.statusMu.Lock()
	defer r.statusMu.Unlock()
	r.archiveStatus.Err = err
	if err == nil {
		r.archiveStatus.Status = st
		r.archiveStatus.Frontier = r.shipper.Frontier()
		r.archiveStatus.Covered = began
	}
	r.archiveStatus.ShippedTotal += st.ShippedBytes
	return err
}

// shipFinal ships what the closed WAL holds and marks the stream final.
// Called by shutdown after the log is closed, so no record follows.
func (r *Region) shipFinal() error {
	if r.shipper == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r.commitMu.Lock()
	last := r.lastTS
	r.commitMu.Unlock()
	return r.ship(ctx, time.Now(), last, true)
}

// DecodeVersions calls fn with every version WAL record rec writes, and
// returns the record's own timestamp: a batch's versions are at that
// timestamp, a transaction record's commit at its commit timestamp; locks
// and outcomes write none. A point-in-time restore (package backup) keeps
// the versions at or below its target. fn owns the slices it is given.
func DecodeVersions(rec []byte, fn func(key kv.InternalKey, value []byte)) (uint64, error) {
	var (
		ts, versionTS uint64
		ops           []op
	)
	if isTxnRecord(rec) {
		var t *txnRecord
		var err error
		if ts, t, err = decodeTxnRecord(rec); err != nil {
			return 0, err
		}
		ops, versionTS = t.versions, t.commitTS
	} else {
		var b *Batch
		var err error
		if ts, b, err = decodeBatch(rec); err != nil {
			return 0, err
		}
		ops, versionTS = b.ops, ts
	}
	for _, o := range ops {
		fn(kv.InternalKey{UserKey: bytes.Clone(o.key), TS: versionTS, Kind: o.kind}, bytes.Clone(o.value))
	}
	return ts, nil
}
