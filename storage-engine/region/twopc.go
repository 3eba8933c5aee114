package region

// Cross-region transactions: a region's part in a Percolator-style
// two-phase commit (LogBase's MVOCC across regions; TiKV's prewrite,
// commit and lock resolution). The coordinator is a store
// (server/twopc.go): it prewrites each region's writes as locks
// (Prewrite), picks a commit timestamp above every region's prepare
// timestamp, commits the primary key's region (CommitLocks with the
// outcome: the commit point, one durable WAL record), then the other
// regions (CommitLocks). A read or write that meets a lock gets a
// *LockedError; the server asks the primary's region for the outcome
// (CheckTxnStatus, which rolls back a transaction whose primary lock has
// expired) and resolves the lock (CommitLocks or RollbackLocks).
//
// # Invariants
//
//   - A lock is durable (a WAL record, then the manifest of the flush that
//     drops that record) before Prewrite returns, and it goes only by a
//     durable record that writes its version at the commit timestamp or
//     drops it. A region that moves keeps its locks: Release flushes, and
//     the manifest carries them.
//   - Locks are added and removed, and Apply, CommitTxn and Prewrite check
//     for them, under the keys' latches: while a key is locked no other
//     write of it commits. So the version a commit writes at its commit
//     timestamp, though older than versions of other keys written since,
//     is the newest of its key: per key, versions stay newest first across
//     memstores and files, which is all read.go relies on. (Across keys a
//     file's timestamp range may now overlap an older file's.)
//   - A prepare timestamp is the prewrite record's own timestamp, above
//     the region's clock when the lock was added; the commit timestamp is
//     above every prepare timestamp, and a region's clock moves past it
//     before the commit record is written. A read at T that found no lock
//     either read before the prewrite (then T < commit timestamp) or after
//     the resolution, whose versions it sees.
//   - A resolution writes its versions and removes the locks under
//     resolveMu; a read takes its read state and checks for locks under it
//     (shared): a read that finds no lock has the versions in its state.
//   - The outcome of a transaction (its start timestamp and primary key) is
//     recorded in its primary's region by the record that commits or rolls
//     back the primary's lock, and only there. Once the coordinator has
//     resolved every lock it is kept for the commit request's retries
//     (contract.DefaultTxnOutcomeRetryWindow); otherwise for
//     contract.DefaultTxnOutcomeRetention.
//   - Every record has its own timestamp L from the region's clock, in WAL
//     order like a batch's: FlushedTS and WAL truncation count L.
//
// # Lock order
//
// txnState.mu is a leaf. resolveMu comes before the region's mu (a read
// takes its read state under it) and after the keys' latches (a
// resolution holds them); no other region lock is held with it.

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bellows-kv/bellows/storage-engine/kv"
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

// txnState is the region's locks and outcomes.
type txnState struct {
	mu       sync.Mutex
	locks    map[string]manifest.TxnLock
	outcomes map[txnKey]manifest.TxnOutcome
	// nLocks mirrors len(locks), so writes and reads skip the check when
	// no key is locked (the common case).
	nLocks atomic.Int64
}

func newTxnState(m manifest.Manifest) *txnState {
	s := &txnState{locks: map[string]manifest.TxnLock{}, outcomes: map[txnKey]manifest.TxnOutcome{}}
	for _, l := range m.Locks {
		s.locks[string(l.Key)] = l
	}
	for _, o := range m.TxnOutcomes {
		s.outcomes[keyOf(o.StartTS, o.Primary)] = o
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

func (s *txnState) outcome(startTS uint64, primary []byte) (manifest.TxnOutcome, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	o, ok := s.outcomes[keyOf(startTS, primary)]
	return o, ok
}

func (s *txnState) apply(rec *txnRecord) {
	s.mu.Lock()
	defer s.mu.Unlock()
	applyTxnRecord(s.locks, s.outcomes, rec)
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

// txnRecord is one WAL record of transaction state: locks added, locks
// removed, the versions a commit writes (at commitTS), an outcome decided,
// outcomes forgotten. Applying it is idempotent.
type txnRecord struct {
	locks    []manifest.TxnLock
	unlocks  []lockRef
	commitTS uint64
	versions []op // at commitTS
	outcome  *manifest.TxnOutcome
	forget   []lockRef // start timestamp and primary
}

type lockRef struct {
	key     []byte
	startTS uint64
}

// txnRecordFlag marks a WAL record as a txnRecord: a batch record starts
// with its timestamp, and timestamps (Unix nanoseconds) stay below 2^63.
const txnRecordFlag = uint64(1) << 63

func (rec *txnRecord) encodedLen() int {
	n := 8 + 5*10
	for _, l := range rec.locks {
		n += 4*10 + 1 + len(l.Key) + len(l.Primary) + len(l.Value)
	}
	for _, u := range rec.unlocks {
		n += 2*10 + len(u.key)
	}
	for _, o := range rec.versions {
		n += 1 + 2*10 + len(o.key) + len(o.value)
	}
	if rec.outcome != nil {
		n += 4*10 + 2 + len(rec.outcome.Primary) + len(rec.outcome.RequestID)
	}
	for _, f := range rec.forget {
		n += 2*10 + len(f.key)
	}
	return n + 3*10 + 1
}

func (rec *txnRecord) encode(buf []byte, ts uint64) []byte {
	putBytes := func(b []byte) {
		buf = binary.AppendUvarint(buf, uint64(len(b)))
		buf = append(buf, b...)
	}
	buf = binary.LittleEndian.AppendUint64(buf, txnRecordFlag|ts)
	buf = binary.AppendUvarint(buf, uint64(len(rec.locks)))
	for _, l := range rec.locks {
		putBytes(l.Key)
		putBytes(l.Primary)
		if l.Delete {
			buf = append(buf, 1)
		} else {
			buf = append(buf, 0)
		}
		putBytes(l.Value)
		buf = binary.AppendUvarint(buf, l.StartTS)
		buf = binary.AppendVarint(buf, l.ExpiresAt)
	}
	buf = binary.AppendUvarint(buf, uint64(len(rec.unlocks)))
	for _, u := range rec.unlocks {
		putBytes(u.key)
		buf = binary.AppendUvarint(buf, u.startTS)
	}
	buf = binary.AppendUvarint(buf, rec.commitTS)
	buf = binary.AppendUvarint(buf, uint64(len(rec.versions)))
	for _, o := range rec.versions {
		buf = append(buf, byte(o.kind))
		putBytes(o.key)
		putBytes(o.value)
	}
	if rec.outcome != nil {
		buf = append(buf, 1)
		buf = binary.AppendUvarint(buf, rec.outcome.StartTS)
		putBytes(rec.outcome.Primary)
		buf = binary.AppendUvarint(buf, rec.outcome.CommitTS)
		buf = binary.AppendVarint(buf, rec.outcome.DecidedAt)
		putBytes([]byte(rec.outcome.RequestID))
		if rec.outcome.Resolved {
			buf = append(buf, 1)
		} else {
			buf = append(buf, 0)
		}
	} else {
		buf = append(buf, 0)
	}
	buf = binary.AppendUvarint(buf, uint64(len(rec.forget)))
	for _, f := range rec.forget {
		buf = binary.AppendUvarint(buf, f.startTS)
		putBytes(f.key)
	}
	return buf
}

var errBadTxnRecord = errors.New("region: malformed WAL transaction record")

// isTxnRecord reports whether a WAL record is a txnRecord.
func isTxnRecord(rec []byte) bool {
	return len(rec) >= 8 && binary.LittleEndian.Uint64(rec)&txnRecordFlag != 0
}

func decodeTxnRecord(p []byte) (uint64, *txnRecord, error) {
	if !isTxnRecord(p) {
		return 0, nil, errBadTxnRecord
	}
	ts := binary.LittleEndian.Uint64(p) &^ txnRecordFlag
	p = p[8:]
	bad := false
	uv := func() uint64 {
		v, n := binary.Uvarint(p)
		if n <= 0 {
			bad = true
			return 0
		}
		p = p[n:]
		return v
	}
	sv := func() int64 {
		v, n := binary.Varint(p)
		if n <= 0 {
			bad = true
			return 0
		}
		p = p[n:]
		return v
	}
	bs := func() []byte {
		l := uv()
		if bad || uint64(len(p)) < l {
			bad = true
			return nil
		}
		b := bytes.Clone(p[:l])
		p = p[l:]
		return b
	}
	byt := func() byte {
		if len(p) < 1 {
			bad = true
			return 0
		}
		b := p[0]
		p = p[1:]
		return b
	}
	rec := &txnRecord{}
	for n := uv(); !bad && n > 0; n-- {
		l := manifest.TxnLock{Key: bs(), Primary: bs(), Delete: byt() == 1, Value: bs()}
		l.StartTS, l.ExpiresAt = uv(), sv()
		rec.locks = append(rec.locks, l)
	}
	for n := uv(); !bad && n > 0; n-- {
		rec.unlocks = append(rec.unlocks, lockRef{key: bs(), startTS: uv()})
	}
	rec.commitTS = uv()
	for n := uv(); !bad && n > 0; n-- {
		o := op{kind: kv.Kind(byt()), key: bs(), value: bs()}
		if o.kind != kv.KindSet && o.kind != kv.KindDelete {
			bad = true
		}
		rec.versions = append(rec.versions, o)
	}
	if byt() == 1 {
		rec.outcome = &manifest.TxnOutcome{StartTS: uv(), Primary: bs(), CommitTS: uv(), DecidedAt: sv(), RequestID: string(bs()), Resolved: byt() == 1}
	}
	for n := uv(); !bad && n > 0; n-- {
		rec.forget = append(rec.forget, lockRef{startTS: uv(), key: bs()})
	}
	if bad {
		return 0, nil, errBadTxnRecord
	}
	return ts, rec, nil
}

// writeTxnRecord makes rec durable, adds its versions to the memstore at
// rec.commitTS and applies it to the region's transaction state, in that
// order. The caller holds the latches of every key rec names. It returns
// the record's timestamp L.
func (r *Region) writeTxnRecord(rec *txnRecord) (uint64, error) {
	// The clock moves past the commit timestamp first (floor), so no later
	// write of these keys gets an older timestamp than their committed
	// version.
	ts, seg, err := r.commitRecord(rec.commitTS, rec.encodedLen(), rec.encode, func(mt *memTable, ts uint64) {
		mt.txnRecs = append(mt.txnRecs, rec)
		mt.txnMinTS.CompareAndSwap(0, ts)
	})
	if err != nil {
		return 0, err
	}
	if len(rec.versions) > 0 {
		r.txnVersions.Store(true)
	}
	// Versions, then the locks' removal, excluded from the reads' lock
	// checks (acquireUnlocked).
	r.resolveMu.Lock()
	for _, o := range rec.versions {
		seg.Add(kv.InternalKey{UserKey: o.key, TS: rec.commitTS, Kind: o.kind}, o.value)
	}
	r.txn.apply(rec)
	r.resolveMu.Unlock()
	seg.EndWrite()
	r.vis.done(ts)
	if len(rec.versions) > 0 {
		r.stats.recordWrite(len(rec.versions))
	}
	return ts, nil
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
	r.resolveMu.RLock()
	defer r.resolveMu.RUnlock()
	rs, err := r.acquire(readTS)
	if err != nil {
		return nil, err
	}
	if rs.ts < rs.exactFrom && !rs.pinned {
		rs.release()
		return nil, &SnapshotTooOldError{Region: r.opts.Name, ReadTS: rs.ts, ExactFrom: rs.exactFrom}
	}
	if err := check(rs.ts); err != nil {
		rs.release()
		return nil, err
	}
	return rs, nil
}

// checkReadLock returns a *LockedError if key has a lock a read at readTS
// must not pass: one whose transaction started at or before the read's
// timestamp (it may commit at or before it). A later one commits after it.
func (r *Region) checkReadLock(key []byte, readTS uint64) error {
	l, ok := r.txn.lock(key)
	if !ok || l.StartTS > readTS {
		return nil
	}
	return &LockedError{Key: bytes.Clone(key), Lock: l}
}

// checkReadLocks is checkReadLock for every key in [start, end) (end nil:
// to the region's end).
func (r *Region) checkReadLocks(start, end []byte, readTS uint64) error {
	if r.txn.nLocks.Load() == 0 {
		return nil
	}
	ts := readTS
	r.txn.mu.Lock()
	defer r.txn.mu.Unlock()
	var first *manifest.TxnLock
	for _, l := range r.txn.locks {
		if l.StartTS > ts || bytes.Compare(l.Key, start) < 0 || (end != nil && bytes.Compare(l.Key, end) >= 0) {
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

// Prewrite is the first phase of a cross-region commit in this region:
// b's writes become locks of the transaction that read at startTS, whose
// primary key is primary (perhaps in another region), expiring at
// expiresAt. It fails with a *ConflictError if a version of one of b's
// keys is newer than startTS, with a *LockedError if another transaction
// holds a lock on one, and with ErrTxnRolledBack if this region is the
// primary's and rolled the transaction back. A retried prewrite of the
// same transaction succeeds again; one of a transaction this region
// recorded as committed by the same commit request (requestID, when not
// empty) returns an *AlreadyCommittedError: a retry of a commit whose
// answer was lost. It returns the prepare timestamp: the commit timestamp
// must be above it.
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
			Delete: o.kind == kv.KindDelete, Value: bytes.Clone(o.value), ExpiresAt: expiresAt.UnixNano(),
		})
	}
	return r.writeTxnRecord(rec)
}

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
	return r.resolve(startTS, commitTS, keys, primary, requestID)
}

// RollbackLocks removes the locks transaction startTS holds on keys. With
// primary set (keys[0] is the primary key) it records the rollback as the
// outcome, and fails if the transaction committed.
func (r *Region) RollbackLocks(ctx context.Context, startTS uint64, keys [][]byte, primary bool) error {
	return r.resolve(startTS, 0, keys, primary, "")
}

func (r *Region) resolve(startTS, commitTS uint64, keys [][]byte, primary bool, requestID string) error {
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
	rec := &txnRecord{commitTS: commitTS}
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
			kind := kv.KindSet
			if l.Delete {
				kind = kv.KindDelete
			}
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

// Locks returns the region's unresolved locks, in key order.
func (r *Region) Locks() []manifest.TxnLock {
	r.txn.mu.Lock()
	defer r.txn.mu.Unlock()
	locks, _ := r.txn.sorted()
	return locks
}

// TxnOutcomes returns the outcomes this region keeps as a primary's.
func (r *Region) TxnOutcomes() []manifest.TxnOutcome {
	r.txn.mu.Lock()
	defer r.txn.mu.Unlock()
	_, outs := r.txn.sorted()
	return outs
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
