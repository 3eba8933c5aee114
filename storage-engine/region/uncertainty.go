package region

// A transactional read's clock uncertainty (docs/clock.md): the window
// (readTS, limit] in which a version may have committed before the
// transaction began on a store whose clock is ahead, and its narrowing by
// the transaction's observation of this store's clock.
//
// # Invariants
//
//   - Every version the region holds is at or below the store's clock
//     (nextTS forwards the clock past a commit timestamp it floors to). So
//     at an observation R of the clock, every version here is at or below R.
//   - What R does not bound is a lock held at R that is committed later, at
//     a commit timestamp above R: its version appears after R, yet its
//     transaction may have been acknowledged before the observer began (its
//     coordinator failed to commit this lock, or its retried commit learned
//     the outcome and answered). Such late commits (CommitLeftLocks) are
//     recorded, under resolveMu, as lateAt (the record's timestamp, a clock
//     reading after every observation taken before it) and lateMax (their
//     largest commit timestamp); a read whose observation is older than
//     lateAt is narrowed no lower than lateMax. CockroachDB keeps a local
//     timestamp per version for the same purpose; two numbers per region
//     are coarser (an old observation loses its narrowing after any late
//     commit) but need nothing stored with the versions.

import (
	"bytes"

	"github.com/bellows-kv/bellows/storage-engine/kv"
)

// Uncertainty is a transactional read's clock uncertainty.
type Uncertainty struct {
	// Limit is the transaction's start plus the maximum clock offset, fixed
	// at its first start (0: no window).
	Limit uint64
	// Observed is the store's clock as the transaction first reached this
	// store (0: not yet).
	Observed uint64
	// Own is the reading transaction when its own locks must not stop the
	// read (zero: every lock does): a serializable transaction validating
	// its reads after its prewrite.
	Own TxnID
	// LiveThrough, when not 0, is a timestamp every value the read returns
	// must still be live at: one that expires at or before it fails the
	// read (*ExpiredError), as a newer version in the window would. A
	// serializable transaction's validation sets its commit timestamp: a
	// value read at the start and expired by the commit is not what a read
	// at the commit returns.
	LiveThrough uint64
}

// expiredBy returns an *ExpiredError if the version of key (kind, ts,
// stored value v), read live, expires at or before liveThrough (0: no
// bound).
func expiredBy(key []byte, kind kv.Kind, ts uint64, v []byte, liveThrough uint64) error {
	if liveThrough == 0 {
		return nil
	}
	if exp, ok := kv.Expiry(kind, ts, v); ok && exp <= liveThrough {
		return &ExpiredError{Key: bytes.Clone(key), Expiry: exp, LiveThrough: liveThrough}
	}
	return nil
}

// uncertaintyLimit is the limit a read with u uses here: u.Limit, narrowed
// to u.Observed when the observation bounds the region's versions. It
// holds only if the region was open here by then (a region that opened
// later holds versions from another process's clock) and no lock held then
// has been committed late since. The caller holds resolveMu.
func (r *Region) uncertaintyLimit(u Uncertainty) uint64 {
	if u.Limit == 0 || u.Observed == 0 || u.Observed < r.openedTS {
		return u.Limit
	}
	narrowed := u.Observed
	if u.Observed < r.lateAt {
		narrowed = max(narrowed, r.lateMax)
	}
	return min(u.Limit, narrowed)
}

// noteLateCommit records a late commit at commitTS by the record at ts.
// The caller holds resolveMu.
func (r *Region) noteLateCommit(ts, commitTS uint64) {
	r.lateAt = max(r.lateAt, ts)
	r.lateMax = max(r.lateMax, commitTS)
}
