package region

// Cross-region transactions: a region's part in a Percolator-style
// two-phase commit (LogBase's MVOCC across regions; TiKV's prewrite,
// commit and lock resolution). The coordinator is the store that owns
// the primary's region (storage-engine/txn): it prewrites each region's writes as locks
// (Prewrite, here), picks a commit timestamp above every region's prepare
// timestamp, commits the primary key's region (CommitLocks with the
// outcome: the commit point, one durable WAL record), then the other
// regions (CommitLocks, resolve.go). A read or write that meets a lock
// gets a *LockedError (locks.go); the resolver asks the primary's region
// for the outcome (CheckTxnStatus, outcomes.go, which rolls back a
// transaction whose primary lock has expired) and resolves the lock
// (CommitLocks or RollbackLocks).
//
// The files: locks.go (the lock table and the checks on reads and writes),
// txnrecord.go (the WAL record), prewrite.go (phase one), resolve.go
// (commit or roll back locks), outcomes.go (the outcomes a primary's region
// decides and keeps).
//
// # Invariants
//
//   - A lock is durable (a WAL record, then the manifest of the flush that
//     drops that record) before Prewrite returns, and it goes only by a
//     durable record that writes its version at the commit timestamp or
//     drops it. A region that moves keeps its locks: Release flushes, and
//     the manifest carries them.
//   - A prepare timestamp is the prewrite record's own timestamp, above
//     the region's clock when the lock was added; the commit timestamp is
//     above every prepare timestamp, and a region's clock moves past it
//     before the commit record is written. A read at T that found no lock
//     either read before the prewrite (then T < commit timestamp) or after
//     the resolution, whose versions it sees.
//   - A prewrite of a transaction this region has an outcome for never
//     adds a lock: a rolled-back one is refused, a committed one answered.
//
// # Lock order
//
// Prewrite takes the keys' latches, then (under them) txnState.mu to read
// outcomes and locks, mu to validate, and writeTxnRecord's locks.

import (
	"bytes"
	"context"
	"fmt"
	"time"

	"github.com/bellows-kv/bellows/storage-engine/kv"
	"github.com/bellows-kv/bellows/storage-engine/manifest"
)

// Prewrite is the first phase of a cross-region commit in this region:
// b's writes become locks of the transaction that read at startTS, whose
// primary key is primary (perhaps in another region), expiring at
// expiresAt. It fails with a *ConflictError if a version of one of b's
// keys is newer than startTS, with a *LockedError if another transaction
// holds a lock on one, and with ErrTxnRolledBack if this region is the
// primary's and rolled the transaction back. A retried prewrite of the
// same transaction succeeds again; one of a transaction this region
// recorded as committed by the same commit request (requestID, when not
// empty; at startTS, or with primary at any start, as a batch across
// regions retried at a new start) returns an *AlreadyCommittedError: a
// retry of a commit whose answer was lost. It returns the prepare
// timestamp: the commit timestamp must be above it.
func (r *Region) Prewrite(ctx context.Context, startTS uint64, primary []byte, b *Batch, expiresAt time.Time, requestID string) (uint64, error) {
	if err := b.validate(r.opts.MaxValueSize, r.opts.MaxBatchBytes); err != nil {
		return 0, err
	}
	if err := validateKey(primary); err != nil {
		return 0, fmt.Errorf("primary: %w", err)
	}
	if err := r.checkBatchRange(b); err != nil {
		return 0, err
	}
	b.dedupe()
	slots := r.latches.slotsOf(b)
	r.latches.lock(slots)
	defer r.latches.unlock(slots)
	if requestID != "" {
		if o, ok := r.txn.committedBy(requestID, primary); ok && o.StartTS != startTS {
			return 0, &AlreadyCommittedError{StartTS: o.StartTS, CommitTS: o.CommitTS}
		}
	}
	if o, ok := r.txn.outcome(startTS, primary); ok {
		switch {
		case o.CommitTS == 0:
			return 0, ErrTxnRolledBack
		case requestID != "" && o.RequestID == requestID:
			return 0, &AlreadyCommittedError{StartTS: startTS, CommitTS: o.CommitTS}
		}
		return 0, fmt.Errorf("region: the transaction started at %d with primary %q committed at %d, by another commit request", startTS, primary, o.CommitTS)
	}
	if err := r.checkLocksLatched(b, startTS); err != nil {
		return 0, err
	}
	if err := r.validateTxn(ctx, startTS, b); err != nil {
		return 0, err
	}
	rec := &txnRecord{}
	for _, o := range b.ops {
		rec.locks = append(rec.locks, manifest.TxnLock{
			Key: bytes.Clone(o.key), StartTS: startTS, Primary: bytes.Clone(primary),
			Delete: o.kind == kv.KindDelete, Expiring: o.kind == kv.KindSetExpiring, Value: bytes.Clone(o.value), ExpiresAt: expiresAt.UnixNano(),
		})
	}
	return r.writeTxnRecord(rec)
}

// AlreadyCommittedError: a prewrite of a transaction whose primary's region
// has recorded its commit (a retry of a commit that reached its commit
// point).
type AlreadyCommittedError struct {
	StartTS, CommitTS uint64
}

func (e *AlreadyCommittedError) Error() string {
	return fmt.Sprintf("region: the transaction started at %d already committed at %d", e.StartTS, e.CommitTS)
}
