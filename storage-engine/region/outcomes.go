package region

// The outcomes of cross-region transactions, decided and kept by their
// primary key's region: what a resolver asks (CheckTxnStatus) before it
// commits or rolls back a lock it met, and what a retried commit learns.
//
// # Invariants
//
//   - The outcome of a transaction (its start timestamp and primary key) is
//     recorded in its primary's region by the record that commits or rolls
//     back the primary's lock, and only there; once recorded, whether and
//     when it committed never changes until it is forgotten.
//   - Once the coordinator has resolved every lock (MarkTxnResolved) an
//     outcome is kept for the commit request's retries
//     (contract.DefaultTxnOutcomeRetryWindow); otherwise for
//     contract.DefaultTxnOutcomeRetention, so a lock left behind still
//     finds it.
//   - A transaction whose primary lock has expired, or (rollbackIfAbsent)
//     was never written, is rolled back by recording the rollback under the
//     primary's latch, so its coordinator's commit, which takes the same
//     latch, cannot follow it.
//
// # Lock order
//
// The primary key's latch, then txnState.mu (a leaf), then
// writeTxnRecord's locks.

import (
	"bytes"
	"context"
	"errors"
	"time"

	"github.com/bellows-kv/bellows/storage-engine/manifest"
)

// ErrTxnRolledBack: the transaction was rolled back (its primary lock
// expired, or was never written) and can no longer commit.
var ErrTxnRolledBack = errors.New("region: the transaction was rolled back")

// TxnStatus is a transaction's state as its primary's region knows it.
type TxnStatus struct {
	// CommitTS is the commit timestamp of a committed transaction.
	CommitTS uint64
	// RolledBack: it will never commit.
	RolledBack bool
	// Lock is the primary's lock of a transaction still being committed;
	// nil when the primary has no lock (not prewritten yet).
	Lock *manifest.TxnLock
}

// Decided reports whether the transaction committed or rolled back.
func (s TxnStatus) Decided() bool { return s.CommitTS != 0 || s.RolledBack }

// CheckTxnStatus reports the state of transaction startTS whose primary
// key, in this region, is primary. A transaction whose primary lock has
// expired by now is rolled back first; so is one whose primary has no
// lock, when rollbackIfAbsent is set (the caller met an expired lock of
// it elsewhere: its coordinator is gone before it prewrote the primary).
func (r *Region) CheckTxnStatus(ctx context.Context, primary []byte, startTS uint64, now time.Time, rollbackIfAbsent bool) (TxnStatus, error) {
	// Another region's primary would be "absent" here, and rolled back.
	if err := r.checkKey(primary); err != nil {
		return TxnStatus{}, err
	}
	b := new(Batch)
	b.ops = append(b.ops, op{key: primary})
	slots := r.latches.slotsOf(b)
	r.latches.lock(slots)
	defer r.latches.unlock(slots)
	if o, ok := r.txn.outcome(startTS, primary); ok {
		return TxnStatus{CommitTS: o.CommitTS, RolledBack: o.CommitTS == 0}, nil
	}
	l, ok := r.txn.lock(primary)
	mine := ok && l.StartTS == startTS
	if mine && now.UnixNano() < l.ExpiresAt {
		return TxnStatus{Lock: &l}, nil
	}
	if !mine && !rollbackIfAbsent {
		return TxnStatus{}, nil
	}
	rec := &txnRecord{outcome: &manifest.TxnOutcome{StartTS: startTS, Primary: bytes.Clone(primary), DecidedAt: now.UnixNano()}}
	if mine {
		rec.unlocks = append(rec.unlocks, lockRef{key: l.Key, startTS: startTS})
	}
	if _, err := r.writeTxnRecord(rec); err != nil {
		return TxnStatus{}, err
	}
	return TxnStatus{RolledBack: true}, nil
}

// MarkTxnResolved records that every lock of the transaction (startTS,
// primary) is resolved: its outcome is then kept only for retries of its
// commit request (ForgetTxns).
func (r *Region) MarkTxnResolved(startTS uint64, primary []byte) error {
	if err := r.checkKey(primary); err != nil {
		return err
	}
	b := new(Batch)
	b.ops = append(b.ops, op{key: primary})
	slots := r.latches.slotsOf(b)
	r.latches.lock(slots)
	defer r.latches.unlock(slots)
	o, ok := r.txn.outcome(startTS, primary)
	if !ok || o.Resolved {
		return nil
	}
	o.Resolved = true
	_, err := r.writeTxnRecord(&txnRecord{outcome: &o})
	return err
}

// ForgetTxns drops the outcomes decided before resolvedBefore whose
// transactions are resolved, and every outcome decided before anyBefore
// (a zero time drops none): see contract.DefaultTxnOutcomeRetryWindow and
// DefaultTxnOutcomeRetention.
func (r *Region) ForgetTxns(resolvedBefore, anyBefore time.Time) error {
	rec := &txnRecord{}
	r.txn.mu.Lock()
	for k, o := range r.txn.outcomes {
		if (o.Resolved && !resolvedBefore.IsZero() && o.DecidedAt < resolvedBefore.UnixNano()) ||
			(!anyBefore.IsZero() && o.DecidedAt < anyBefore.UnixNano()) {
			rec.forget = append(rec.forget, lockRef{startTS: k.startTS, key: []byte(k.primary)})
		}
	}
	r.txn.mu.Unlock()
	if len(rec.forget) == 0 {
		return nil
	}
	_, err := r.writeTxnRecord(rec)
	return err
}

// TxnOutcomes returns the outcomes this region keeps as a primary's.
func (r *Region) TxnOutcomes() []manifest.TxnOutcome {
	r.txn.mu.Lock()
	defer r.txn.mu.Unlock()
	_, outs := r.txn.sorted()
	return outs
}
