package region

// A checkpoint brings the region to a timestamp for a backup
// (docs/backup.md, section 1): after it, the region's committed manifest
// holds every version at or below ts in its files, and no lock a read at ts
// must wait for. The files are then held open (a version reference) while
// the caller copies them, so no compaction can delete one under the copy.

import (
	"context"
	"errors"
	"fmt"

	"github.com/bellows-kv/bellows/storage-engine/manifest"
)

// ErrCheckpointLocked: a lock at or below the checkpoint's timestamp kept
// appearing after the region's locks were resolved (a transaction started
// at or before it still prewriting); the checkpoint gave up.
var ErrCheckpointLocked = errors.New("region: locks at or below the checkpoint's timestamp keep appearing")

// checkpointAttempts bounds how often Checkpoint resolves and flushes again
// when a lock at or below ts arrived after its resolution.
const checkpointAttempts = 5

// Checkpoint makes the region's files hold exactly what a read at ts sees,
// then calls fn with the committed manifest while every file it names is
// held open. resolve runs op, resolving each *LockedError op returns (the
// server's lock resolver), until op succeeds.
//
// The steps are those of a transactional read at ts, with a flush after:
// ts is pinned (SnapshotAt: no merge drops a version a read at ts needs),
// the region is made readable at ts (its clock passes ts, so every later
// commit here is above it), every lock of a transaction started at or
// before ts is resolved, and the memstores are flushed. Every commit at or
// below ts was visible, so in a memstore, before the flush froze them; the
// manifest's FlushedTS may still be below ts when nothing was written
// between them.
//
// The manifest fn gets may name files with versions above ts, and locks of
// transactions started after ts: a backup leaves both out.
func (r *Region) Checkpoint(ctx context.Context, ts uint64, resolve func(op func() error) error, fn func(manifest.Manifest) error) error {
	snap, err := r.SnapshotAt(ts)
	if err != nil {
		return err
	}
	defer snap.Close()
	if err := r.ReadableAt(ts); err != nil {
		return err
	}
	for range checkpointAttempts {
		if err := resolve(func() error { return r.checkReadLocks(r.start, r.end, ts, TxnID{}) }); err != nil {
			return err
		}
		if err := r.Flush(ctx); err != nil {
			return err
		}
		r.mu.RLock()
		if r.closed {
			r.mu.RUnlock()
			return ErrClosed
		}
		v := r.current
		v.ref()
		m := r.manifest.Clone()
		r.mu.RUnlock()
		if lockedAtOrBelow(m.Locks, ts) {
			// Prewritten after the resolution by a transaction that
			// started at or before ts: resolve it too.
			v.unref()
			continue
		}
		err := fn(m)
		v.unref()
		return err
	}
	return fmt.Errorf("region %s at %d: %w", r.opts.Name, ts, ErrCheckpointLocked)
}

func lockedAtOrBelow(locks []manifest.TxnLock, ts uint64) bool {
	for _, l := range locks {
		if l.StartTS <= ts {
			return true
		}
	}
	return false
}
