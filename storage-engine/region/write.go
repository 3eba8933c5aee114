package region

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/bellows-kv/bellows/storage-engine/kv"
	"github.com/bellows-kv/bellows/storage-engine/memstore"
	"github.com/bellows-kv/bellows/storage-engine/walarchive"
)

// Put writes value under key and returns the commit timestamp.
func (r *Region) Put(key, value []byte) (uint64, error) {
	// Apply copies key and value into the WAL and the memstore before it
	// returns, so a one-op batch may borrow the caller's slices.
	return r.Apply(&Batch{ops: []op{{kind: kv.KindSet, key: key, value: value}}, bytes: len(key) + len(value)})
}

// Delete writes a tombstone for key and returns the commit timestamp.
func (r *Region) Delete(key []byte) (uint64, error) {
	return r.Apply(&Batch{ops: []op{{kind: kv.KindDelete, key: key}}, bytes: len(key)})
}

// Apply commits b atomically: all of its writes get one timestamp, are
// durable per the WAL mode before Apply returns, and become visible together.
// On error nothing of b is visible or, after a restart, recovered. A
// conditional batch (Batch.If) whose condition does not hold commits
// nothing and returns a *ConditionFailedError.
func (r *Region) Apply(b *Batch) (uint64, error) {
	if err := b.validate(r.opts.MaxValueSize, r.opts.MaxBatchBytes); err != nil {
		return 0, err
	}
	if err := r.checkBatchRange(b); err != nil {
		return 0, err
	}
	b.dedupe()
	// The keys' latches: a transaction validating any of them waits for
	// this write to be in the memstore (latch.go).
	slots := r.latches.slotsOf(b)
	r.latches.lock(slots)
	defer r.latches.unlock(slots)
	if err := r.checkLocksLatched(b, 0); err != nil {
		return 0, err
	}
	if b.cond != nil {
		rs, err := r.acquire(kv.MaxTimestamp)
		if err != nil {
			return 0, err
		}
		err = b.cond.judge(context.Background(), rs)
		rs.release()
		if err != nil {
			return 0, err
		}
	}
	return r.applyLatched(b)
}

// applyLatched is Apply of a validated, deduplicated batch whose keys'
// latches the caller holds.
func (r *Region) applyLatched(b *Batch) (uint64, error) {
	ts, seg, err := r.commitRecord(0, b.encodedLen(), b.encode, nil)
	if err != nil {
		return 0, err
	}
	for _, o := range b.ops {
		seg.Add(kv.InternalKey{UserKey: o.key, TS: ts, Kind: o.kind}, o.value)
	}
	r.feeds.publish(b.ops, ts)
	seg.EndWrite()
	r.vis.done(ts)
	r.stats.recordWrite(len(b.ops))
	return ts, nil
}

// commitRecord is the commit path every WAL record takes (a batch, a
// transaction record): under commitMu it rotates or pushes the memstore if
// due, takes the next timestamp (after floor), begins a write on the
// active segment, lets note record what the memTable must know of it, and
// queues the record (encode at that timestamp, at most n bytes); then it
// waits for the WAL. On success the caller adds its versions to seg, then
// calls seg.EndWrite and r.vis.done(ts); on failure that is done here.
func (r *Region) commitRecord(floor uint64, n int, encode func(dst []byte, ts uint64) []byte, note func(mt *memTable, ts uint64)) (uint64, *memstore.Skiplist, error) {
	r.commitMu.Lock()
	if err := r.checkOpen(); err != nil {
		r.commitMu.Unlock()
		return 0, nil, err
	}
	if r.mem.ms.View().ApproximateBytes() >= r.opts.MemstoreBytes || r.walOverLimitLocked() {
		if err := r.rotateLocked(); err != nil {
			r.commitMu.Unlock()
			return 0, nil, err
		}
	} else if r.mem.ms.NeedsInMemoryFlush() {
		r.pushActiveLocked()
	}
	// The timestamp and the segment are chosen in one critical section,
	// after any switch of segment: so segments' timestamp ranges are
	// disjoint and ascending, and a segment no longer active gets no new
	// writer (memstore invariants).
	r.lastTS = max(r.lastTS, floor)
	ts := r.nextTS()
	mt := r.mem
	seg := mt.ms.Active()
	seg.BeginWrite()
	mt.maxTS = ts
	if mt.firstWrite.Load() == 0 {
		mt.firstWrite.Store(time.Now().UnixNano())
	}
	if note != nil {
		note(mt, ts)
	}
	commit := r.log.AppendEncoded(n, func(dst []byte) []byte { return encode(dst, ts) })
	r.vis.add(ts)
	r.commitMu.Unlock()

	if err := commit.Wait(); err != nil {
		// The WAL failed; it fails every later append too, so no newer
		// record can be acknowledged ahead of this one. A fenced WAL
		// stream means another store took the region over: ErrFenced, as
		// a fenced manifest commit says it.
		if errors.Is(err, walarchive.ErrFenced) {
			err = fmt.Errorf("%w: %w", ErrFenced, err)
		}
		seg.EndWrite()
		r.vis.done(ts)
		r.setBackgroundError(&Error{Region: r.opts.Name, Err: err})
		return 0, nil, err
	}
	return ts, seg, nil
}

// rotateLocked freezes the active memstore and starts a new one with a new
// WAL segment. Called with commitMu held; stalls while too many frozen
// memstores wait for flush, which is the write path's backpressure.
func (r *Region) rotateLocked() error {
	r.mu.Lock()
	for len(r.imm) >= r.opts.MaxImmutableMemstores && !r.closed && r.bgErr == nil {
		r.stats.recordStall()
		r.cond.Wait()
	}
	if r.closed {
		r.mu.Unlock()
		return ErrClosed
	}
	if r.bgErr != nil {
		err := r.bgErr
		r.mu.Unlock()
		return err
	}
	seg := r.rotateWALLocked()
	r.mem.frozen = r.mem.ms.Freeze()
	r.imm = append(r.imm, r.mem)
	r.mem = r.newMemTable(seg)
	r.mu.Unlock()
	select {
	case r.flushCh <- struct{}{}:
	default:
	}
	return nil
}

// walOverLimitLocked reports whether the WAL has outgrown MaxWALBytes with
// no disk flush under way that would let it shrink: then the writer forces
// one. Called with commitMu held.
func (r *Region) walOverLimitLocked() bool {
	if r.log.Size() <= r.opts.MaxWALBytes || r.mem.ms.View().Len() == 0 {
		return false
	}
	r.mu.RLock()
	flushing := len(r.imm) > 0
	r.mu.RUnlock()
	if !flushing {
		r.stats.WALForcedFlushes.Add(1)
	}
	return !flushing
}
