package region

// Resolving a cross-region transaction's locks in this region: committing
// them (their versions at the commit timestamp) or rolling them back. At
// the primary's region the same record decides the outcome (outcomes.go).
//
// # Invariants
//
//   - A primary's commit is the transaction's commit point: one durable
//     record that writes the primary's version, removes its lock and
//     records the outcome. It is refused (ErrTxnRolledBack) when the
//     primary's lock is gone and no outcome says it committed, so a
//     transaction rolled back behind its coordinator's back never commits.
//   - Resolving a key that holds no lock of the transaction is a no-op (it
//     was resolved already), so any number of resolvers may race; a key
//     outside the region is refused rather than skipped.
//
// # Lock order
//
// resolve takes the keys' latches, then txnState.mu (a leaf) to read, then
// writeTxnRecord's locks.

import (
	"bytes"
	"context"
	"fmt"
	"time"

	"github.com/bellows-kv/bellows/storage-engine/kv"
	"github.com/bellows-kv/bellows/storage-engine/manifest"
)

// CommitLocks writes the versions of the locks that transaction startTS
// holds on keys at commitTS and removes the locks; keys it holds no lock
// on are skipped (resolved already). With primary set, keys[0] is the
// primary key, this region is the primary's, and the record is the
// transaction's commit point: it records the outcome (with the commit
// request's requestID), and fails with ErrTxnRolledBack if the transaction
// was rolled back or its primary lock is gone.
func (r *Region) CommitLocks(ctx context.Context, startTS, commitTS uint64, keys [][]byte, primary bool, requestID string) error {
	if commitTS <= startTS {
		return fmt.Errorf("region: commit timestamp %d is not after the start %d", commitTS, startTS)
	}
	var caller context.Context
	if !primary {
		caller = ctx
	}
	return r.resolve(startTS, commitTS, keys, primary, requestID, false, caller)
}

// CommitLeftLocks is CommitLocks of secondary locks a transaction's
// coordinator left behind (found by a request, or expired): the
// transaction may have been acknowledged while they were held, so reads
// whose observation of the clock predates this commit are not narrowed
// below it (uncertainty.go). CommitLocks of secondary locks whose caller
// (a coordinator) has gone by the time the versions apply is recorded the
// same way: the coordinator took the commit for failed and may have
// answered its client.
func (r *Region) CommitLeftLocks(ctx context.Context, startTS, commitTS uint64, keys [][]byte) error {
	if commitTS <= startTS {
		return fmt.Errorf("region: commit timestamp %d is not after the start %d", commitTS, startTS)
	}
	return r.resolve(startTS, commitTS, keys, false, "", true, nil)
}

// RollbackLocks removes the locks transaction startTS holds on keys. With
// primary set (keys[0] is the primary key) it records the rollback as the
// outcome, and fails if the transaction committed.
func (r *Region) RollbackLocks(ctx context.Context, startTS uint64, keys [][]byte, primary bool) error {
	return r.resolve(startTS, 0, keys, primary, "", false, nil)
}

func (r *Region) resolve(startTS, commitTS uint64, keys [][]byte, primary bool, requestID string, late bool, caller context.Context) error {
	if len(keys) == 0 {
		return ErrEmptyBatch
	}
	b := new(Batch)
	for _, k := range keys {
		b.ops = append(b.ops, op{key: k})
	}
	// A key of another region (a stale route after a split) would find no
	// lock here and be skipped as resolved: refuse it instead.
	if err := r.checkBatchRange(b); err != nil {
		return err
	}
	slots := r.latches.slotsOf(b)
	r.latches.lock(slots)
	defer r.latches.unlock(slots)
	rec := &txnRecord{commitTS: commitTS, late: late, caller: caller}
	if primary {
		if o, ok := r.txn.outcome(startTS, keys[0]); ok {
			switch {
			case o.CommitTS == commitTS:
				return nil // a retry
			case o.CommitTS == 0:
				return ErrTxnRolledBack
			default:
				return fmt.Errorf("region: the transaction started at %d committed at %d, not %d", startTS, o.CommitTS, commitTS)
			}
		}
		rec.outcome = &manifest.TxnOutcome{StartTS: startTS, Primary: bytes.Clone(keys[0]), CommitTS: commitTS,
			RequestID: requestID, DecidedAt: time.Now().UnixNano()}
	}
	for _, k := range keys {
		l, ok := r.txn.lock(k)
		if !ok || l.StartTS != startTS {
			continue
		}
		rec.unlocks = append(rec.unlocks, lockRef{key: l.Key, startTS: startTS})
		if commitTS != 0 {
			kind := lockKind(l)
			rec.versions = append(rec.versions, op{kind: kind, key: l.Key, value: l.Value})
		}
	}
	if primary && commitTS != 0 && (len(rec.unlocks) == 0 || !bytes.Equal(rec.unlocks[0].key, keys[0])) {
		// The primary's lock is gone and no outcome says why: it was
		// never written, or rolled back and forgotten. Never commit.
		return ErrTxnRolledBack
	}
	if len(rec.unlocks) == 0 && rec.outcome == nil {
		return nil
	}
	_, err := r.writeTxnRecord(rec)
	return err
}

// lockKind is the kind of the version l's write commits as.
func lockKind(l manifest.TxnLock) kv.Kind {
	switch {
	case l.Delete:
		return kv.KindDelete
	case l.Expiring:
		return kv.KindSetExpiring
	}
	return kv.KindSet
}
