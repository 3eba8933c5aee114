package region

import (
	"bytes"
	"context"
	"errors"
	"fmt"

	"github.com/bellows-kv/bellows/storage-engine/iterator"
	"github.com/bellows-kv/bellows/storage-engine/kv"
)

// ErrConflict matches a *ConflictError.
var ErrConflict = errors.New("region: write conflict")

// ConflictError aborts a transaction: a write of Key committed at
// CommittedTS, after the transaction's start StartTS (first committer
// wins, snapshot isolation).
type ConflictError struct {
	Key         []byte
	StartTS     uint64
	CommittedTS uint64
}

func (e *ConflictError) Error() string {
	return fmt.Sprintf("region: write conflict on key %q: a write committed at %d, after the transaction's start at %d", e.Key, e.CommittedTS, e.StartTS)
}

func (e *ConflictError) Is(target error) bool { return target == ErrConflict }

// CommitTxn commits b as a snapshot-isolation transaction that read at
// startTS (a Snapshot's TS): atomically, with one commit timestamp, if no
// write of any of b's keys (a transaction's, a batch's or a plain Put's)
// committed after startTS; otherwise it commits nothing and returns a
// *ConflictError naming the first such key (first committer wins). It is
// the region-local commit of LogBase's MVOCC (§3.7.1): the write set is
// latched, validated against the newest version of each key, and written,
// so no other write of those keys can commit in between.
//
// A transaction that read at a timestamp this region's clock has not
// reached yet (another region's snapshot) commits after it: the region is
// made ReadableAt(startTS) first.
func (r *Region) CommitTxn(ctx context.Context, startTS uint64, b *Batch) (uint64, error) {
	if err := b.validate(r.opts.MaxValueSize, r.opts.MaxBatchBytes); err != nil {
		return 0, err
	}
	if err := r.checkBatchRange(b); err != nil {
		return 0, err
	}
	b.dedupe()
	slots := r.latches.slotsOf(b)
	r.latches.lock(slots)
	defer r.latches.unlock(slots)
	if err := r.ReadableAt(startTS); err != nil {
		return 0, err
	}
	if err := r.checkLocksLatched(b, 0); err != nil {
		return 0, err
	}
	if err := r.validateTxn(ctx, startTS, b); err != nil {
		return 0, err
	}
	return r.applyLatched(b)
}

// validateTxn returns a *ConflictError if a version of one of b's keys is
// newer than startTS. The caller holds the keys' latches, so every write
// of them that committed has its version in a memstore or a file, visible
// or not yet (an older commit in flight may hold visibility back).
func (r *Region) validateTxn(ctx context.Context, startTS uint64, b *Batch) error {
	rs, err := r.acquire(kv.MaxTimestamp)
	if err != nil {
		return err
	}
	defer rs.release()
	for _, o := range b.ops {
		ts, ok, err := rs.newestTS(ctx, o.key, startTS, kv.MaxTimestamp)
		if err != nil {
			return err
		}
		if ok && ts > startTS {
			return &ConflictError{Key: bytes.Clone(o.key), StartTS: startTS, CommittedTS: ts}
		}
	}
	return nil
}

// newestTS returns the timestamp of key's newest version at or below
// atMost (a tombstone included), whatever its visibility, if it is newer
// than after; (0, false) when no version is. Segments and files whose versions are all at
// or below after are not searched: a validation at a recent start
// searches the few newest segments only.
func (rs *readState) newestTS(ctx context.Context, key []byte, after, atMost uint64) (uint64, bool, error) {
	seek := kv.MakeSearchKey(key, atMost)
	// Memstores newest first, each newer than every file; within one, its
	// segments newest first (per key, the first that has a version has the
	// newest: the ascending-ranges order, kept per key by cross-region
	// commits too). One iterator per segment, not a merge of them all.
	var its []iterator.Iterator
	for _, m := range rs.mems {
		its = m.AppendIteratorsAfter(its[:0], after)
		for j, it := range its {
			ok := it.SeekGE(seek) && bytes.Equal(it.Key().UserKey, key)
			var ts uint64
			if ok {
				ts = it.Key().TS
			}
			_ = it.Close()
			if ok {
				for _, rest := range its[j+1:] {
					_ = rest.Close()
				}
				return ts, ts > after, nil
			}
		}
	}
	tables := rs.tablesFor(key)
	for i := len(tables) - 1; i >= 0; i-- {
		t := tables[i]
		if t.meta.MaxTS <= after || t.meta.MinTS > atMost {
			continue
		}
		if bytes.Compare(key, t.meta.Smallest) < 0 || bytes.Compare(key, t.meta.Largest) > 0 || !t.reader.MayContain(key) {
			continue
		}
		it := t.reader.NewIterContext(ctx)
		ok := it.SeekGE(seek) && bytes.Equal(it.Key().UserKey, key)
		var ts uint64
		if ok {
			ts = it.Key().TS
		}
		err := it.Err()
		_ = it.Close()
		if err != nil {
			return 0, false, err
		}
		if ok {
			return ts, ts > after, nil
		}
	}
	return 0, false, nil
}

// advanceClock moves the region's clock to ts if it is behind, so no later
// commit gets a timestamp at or below ts. When it moved it, it returns true
// and has left ts in the visibility order like a commit with no writes;
// the caller must then finish it (vis.done), as ReadableAt does.
func (r *Region) advanceClock(ts uint64) (marker bool, err error) {
	r.commitMu.Lock()
	defer r.commitMu.Unlock()
	if err := r.checkOpen(); err != nil {
		return false, err
	}
	if ts <= r.lastTS {
		return false, nil
	}
	// The caller checked ts against the store's clock (a read or commit
	// timestamp from elsewhere): the store observes it too.
	_ = r.opts.Clock.Update(ts)
	r.lastTS = ts
	r.vis.add(ts)
	return true, nil
}

// ReadableAt makes a read at ts exact: the clock is advanced past ts (so
// no later commit gets a timestamp at or below it) and the call returns
// once every commit at or below ts is visible. A read at ts that follows
// sees exactly the writes committed at or before ts, instead of being
// clamped to what is visible: a cross-region snapshot's start timestamp is
// honoured by every region it reads.
func (r *Region) ReadableAt(ts uint64) error {
	marker, err := r.advanceClock(ts)
	if err != nil {
		return err
	}
	if marker {
		r.vis.done(ts)
		return nil
	}
	r.vis.waitFor(ts)
	return nil
}
