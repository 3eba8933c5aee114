package region

// A region's transaction locks and outcomes (txnState), and the checks that
// keep reads and writes from passing a lock: a cross-region transaction's
// key is locked from its prewrite (prewrite.go) until its resolution
// (resolve.go) writes its version or drops it.
//
// # Invariants
//
//   - Locks are added and removed, and Apply, CommitTxn and Prewrite check
//     for them, under the keys' latches: while a key is locked no other
//     write of it commits. So the version a commit writes at its commit
//     timestamp, though older than versions of other keys written since,
//     is the newest of its key: per key, versions stay newest first across
//     memstores and files, which is all read.go relies on. (Across keys a
//     file's timestamp range may now overlap an older file's.)
//   - A resolution writes its versions and removes the locks under
//     resolveMu (writeTxnRecord); a read takes its read state and checks
//     for locks under it (shared, acquireUnlocked): a read that finds no
//     lock has the versions in its state.
//   - nLocks is len(locks) whenever mu is released, so a zero lets the
//     common case (no key locked) skip mu.
//
// # Lock order
//
// txnState.mu is a leaf. resolveMu comes before the region's mu (a read
// takes its read state under it) and after the keys' latches (a
// resolution holds them); no other region lock is held with it.

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/bellows-kv/bellows/storage-engine/manifest"
)

// ErrLocked matches a *LockedError.
var ErrLocked = errors.New("region: key is locked by a transaction being committed")

// LockedError: Key has a lock of an unresolved cross-region transaction
// that the operation must not pass. Resolve it through its primary
// (CheckTxnStatus, then CommitLocks or RollbackLocks) and retry.
type LockedError struct {
	Key  []byte
	Lock manifest.TxnLock
}

func (e *LockedError) Error() string {
	return fmt.Sprintf("region: key %q is locked by the transaction started at %d (primary %q), which is not resolved yet",
		e.Key, e.Lock.StartTS, e.Lock.Primary)
}

func (e *LockedError) Is(target error) bool { return target == ErrLocked }

// txnState is the region's locks and outcomes.
type txnState struct {
	mu       sync.Mutex
	locks    map[string]manifest.TxnLock
	outcomes map[txnKey]manifest.TxnOutcome
	// committed indexes the committed outcomes that name their commit
	// request, by request ID and primary key (committedBy).
	committed map[requestKey]txnKey
	// nLocks mirrors len(locks), so writes and reads skip the check when
	// no key is locked (the common case).
	nLocks atomic.Int64
}

func newTxnState(m manifest.Manifest) *txnState {
	s := &txnState{locks: map[string]manifest.TxnLock{}, outcomes: map[txnKey]manifest.TxnOutcome{}, committed: map[requestKey]txnKey{}}
	for _, l := range m.Locks {
		s.locks[string(l.Key)] = l
	}
	for _, o := range m.TxnOutcomes {
		s.outcomes[keyOf(o.StartTS, o.Primary)] = o
		s.index(o)
	}
	s.nLocks.Store(int64(len(s.locks)))
	return s
}

func (s *txnState) lock(key []byte) (manifest.TxnLock, bool) {
	if s.nLocks.Load() == 0 {
		return manifest.TxnLock{}, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	l, ok := s.locks[string(key)]
	return l, ok
}

// txnKey identifies a transaction: its start timestamp and primary key
// (two transactions may start at one timestamp, on different stores).
type txnKey struct {
	startTS uint64
	primary string
}

func keyOf(startTS uint64, primary []byte) txnKey { return txnKey{startTS, string(primary)} }

// TxnID names a transaction to a read: its start timestamp and primary
// key.
type TxnID struct {
	StartTS uint64
	Primary []byte
}

// holds reports whether l is a lock of the transaction id names (the
// zero TxnID holds none).
func (id TxnID) holds(l manifest.TxnLock) bool {
	return id.StartTS != 0 && l.StartTS == id.StartTS && bytes.Equal(l.Primary, id.Primary)
}

func (s *txnState) outcome(startTS uint64, primary []byte) (manifest.TxnOutcome, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	o, ok := s.outcomes[keyOf(startTS, primary)]
	return o, ok
}

// requestKey names a commit request's transaction: its request ID and
// primary key.
type requestKey struct{ id, primary string }

// index records o in committed if it is a commit that names its request.
func (s *txnState) index(o manifest.TxnOutcome) {
	if o.CommitTS != 0 && o.RequestID != "" {
		s.committed[requestKey{o.RequestID, string(o.Primary)}] = keyOf(o.StartTS, o.Primary)
	}
}

// committedBy is the outcome of a transaction with primary key primary
// that the commit request requestID committed, at any start timestamp: a
// batch across regions takes a new start on each attempt, so its retry
// after a lost answer finds its commit by the request alone.
func (s *txnState) committedBy(requestID string, primary []byte) (manifest.TxnOutcome, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	k, ok := s.committed[requestKey{requestID, string(primary)}]
	if !ok {
		return manifest.TxnOutcome{}, false
	}
	o, ok := s.outcomes[k]
	return o, ok
}

func (s *txnState) apply(rec *txnRecord) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, k := range rec.forget {
		if o, ok := s.outcomes[keyOf(k.startTS, k.key)]; ok && o.RequestID != "" {
			delete(s.committed, requestKey{o.RequestID, string(o.Primary)})
		}
	}
	applyTxnRecord(s.locks, s.outcomes, rec)
	if rec.outcome != nil {
		s.index(*rec.outcome)
	}
	s.nLocks.Store(int64(len(s.locks)))
}

// applyTxnRecord changes locks and outcomes as rec does.
func applyTxnRecord(locks map[string]manifest.TxnLock, outcomes map[txnKey]manifest.TxnOutcome, rec *txnRecord) {
	for _, u := range rec.unlocks {
		if l, ok := locks[string(u.key)]; ok && l.StartTS == u.startTS {
			delete(locks, string(u.key))
		}
	}
	for _, l := range rec.locks {
		locks[string(l.Key)] = l
	}
	if rec.outcome != nil {
		outcomes[keyOf(rec.outcome.StartTS, rec.outcome.Primary)] = *rec.outcome
	}
	for _, k := range rec.forget {
		delete(outcomes, keyOf(k.startTS, k.key))
	}
}

// manifestTxnState is prev's transaction state changed by recs, in the
// manifest's sorted form.
func manifestTxnState(prev manifest.Manifest, recs []*txnRecord) ([]manifest.TxnLock, []manifest.TxnOutcome) {
	if len(recs) == 0 {
		return prev.Locks, prev.TxnOutcomes
	}
	s := newTxnState(prev)
	for _, rec := range recs {
		applyTxnRecord(s.locks, s.outcomes, rec)
	}
	return s.sorted()
}

func (s *txnState) sorted() ([]manifest.TxnLock, []manifest.TxnOutcome) {
	var locks []manifest.TxnLock
	for _, l := range s.locks {
		locks = append(locks, l)
	}
	slices.SortFunc(locks, func(a, b manifest.TxnLock) int { return bytes.Compare(a.Key, b.Key) })
	var outs []manifest.TxnOutcome
	for _, o := range s.outcomes {
		outs = append(outs, o)
	}
	slices.SortFunc(outs, func(a, b manifest.TxnOutcome) int {
		if c := cmpUint(a.StartTS, b.StartTS); c != 0 {
			return c
		}
		return bytes.Compare(a.Primary, b.Primary)
	})
	return locks, outs
}

func cmpUint(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// checkLocksLatched returns a *LockedError if one of b's keys is locked by
// a transaction other than startTS (0: any). The caller holds b's latches.
func (r *Region) checkLocksLatched(b *Batch, startTS uint64) error {
	if r.txn.nLocks.Load() == 0 {
		return nil
	}
	for _, o := range b.ops {
		if l, ok := r.txn.lock(o.key); ok && (startTS == 0 || l.StartTS != startTS) {
			return &LockedError{Key: bytes.Clone(o.key), Lock: l}
		}
	}
	return nil
}

// acquireUnlocked is acquire for a read that must not pass a lock: check
// (checkReadLock or checkReadLocks) runs at the read state's timestamp,
// excluded from resolutions (resolveMu), so a lock it does not find was
// never there for this read or was resolved into versions the read state
// holds.
func (r *Region) acquireUnlocked(readTS uint64, check func(ts uint64) error) (*readState, error) {
	rs := new(readState)
	if err := r.acquireUnlockedInto(rs, readTS, check); err != nil {
		return nil, err
	}
	return rs, nil
}

// acquireUnlockedInto is acquireUnlocked into rs (a pooled iterator's).
func (r *Region) acquireUnlockedInto(rs *readState, readTS uint64, check func(ts uint64) error) error {
	r.resolveMu.RLock()
	defer r.resolveMu.RUnlock()
	if err := r.acquireInto(rs, readTS); err != nil {
		return err
	}
	if rs.ts < rs.exactFrom && !rs.pinned {
		rs.release()
		return &SnapshotTooOldError{Region: r.opts.Name, ReadTS: rs.ts, ExactFrom: rs.exactFrom}
	}
	if err := check(rs.ts); err != nil {
		rs.release()
		return err
	}
	return nil
}

// checkReadLock returns a *LockedError if key has a lock a read at readTS
// must not pass: one whose transaction started at or before the read's
// timestamp (it may commit at or before it). A later one commits after it.
// own's locks (the reading transaction's) do not stop it.
func (r *Region) checkReadLock(key []byte, readTS uint64, own TxnID) error {
	l, ok := r.txn.lock(key)
	if !ok || l.StartTS > readTS || own.holds(l) {
		return nil
	}
	return &LockedError{Key: bytes.Clone(key), Lock: l}
}

// checkReadLocks is checkReadLock for every key in [start, end) (end nil:
// to the region's end).
func (r *Region) checkReadLocks(start, end []byte, readTS uint64, own TxnID) error {
	if r.txn.nLocks.Load() == 0 {
		return nil
	}
	ts := readTS
	r.txn.mu.Lock()
	defer r.txn.mu.Unlock()
	var first *manifest.TxnLock
	for _, l := range r.txn.locks {
		if l.StartTS > ts || own.holds(l) || bytes.Compare(l.Key, start) < 0 || (end != nil && bytes.Compare(l.Key, end) >= 0) {
			continue
		}
		if first == nil || bytes.Compare(l.Key, first.Key) < 0 {
			first = &l
		}
	}
	if first == nil {
		return nil
	}
	return &LockedError{Key: bytes.Clone(first.Key), Lock: *first}
}

// Locks returns the region's unresolved locks, in key order.
func (r *Region) Locks() []manifest.TxnLock {
	r.txn.mu.Lock()
	defer r.txn.mu.Unlock()
	locks, _ := r.txn.sorted()
	return locks
}

// minLockStart is the oldest start timestamp of a lock held here (0: none).
func (s *txnState) minLockStart() uint64 {
	l, _ := s.oldestLock()
	return l.StartTS
}

// oldestLock is the lock held here with the oldest start, if any.
func (s *txnState) oldestLock() (manifest.TxnLock, bool) {
	if s.nLocks.Load() == 0 {
		return manifest.TxnLock{}, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var oldest manifest.TxnLock
	found := false
	for _, l := range s.locks {
		if !found || l.StartTS < oldest.StartTS {
			oldest, found = l, true
		}
	}
	return oldest, found
}
