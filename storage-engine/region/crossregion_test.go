package region

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/bellows-kv/bellows/storage-engine/kv"
	"github.com/bellows-kv/bellows/storage-engine/manifest"
)

var bg = context.Background()

func wantLocked(t *testing.T, err error, key string, startTS uint64) {
	t.Helper()
	var le *LockedError
	if !errors.Is(err, ErrLocked) || !errors.As(err, &le) || string(le.Key) != key || le.Lock.StartTS != startTS {
		t.Fatalf("got %v, want the lock of the transaction started at %d on %q", err, startTS, key)
	}
}

func prewrite(t *testing.T, r *Region, startTS uint64, primary string, ttl time.Duration, kvs ...string) uint64 {
	t.Helper()
	b := new(Batch)
	for i := 0; i < len(kvs); i += 2 {
		b.Put([]byte(kvs[i]), []byte(kvs[i+1]))
	}
	p, err := r.Prewrite(bg, startTS, []byte(primary), b, time.Now().Add(ttl), "")
	if err != nil {
		t.Fatalf("prewrite at %d: %v", startTS, err)
	}
	if p <= startTS {
		t.Fatalf("prepare timestamp %d is not after the start %d", p, startTS)
	}
	return p
}

func keys(ks ...string) [][]byte {
	out := make([][]byte, len(ks))
	for i, k := range ks {
		out[i] = []byte(k)
	}
	return out
}

func getAt(t *testing.T, r *Region, key string, ts uint64) (string, error) {
	t.Helper()
	v, ok, err := r.Get([]byte(key), ts)
	if err != nil {
		return "", err
	}
	if !ok {
		return "<none>", nil
	}
	return string(v), nil
}

// A prewritten key is locked: a read at or after the transaction's start,
// a plain write and another transaction's prewrite or commit all meet the
// lock; a read before the start does not. After the commit, reads at or
// after the commit timestamp see the write and reads before it do not.
func TestLockBlocksUntilCommitThenVersionAtCommitTS(t *testing.T) {
	r := openForTxns(t)
	old := mustPut(t, r, "a", "old")
	startTS := old + 1
	prep := prewrite(t, r, startTS, "a", time.Minute, "a", "new", "b", "new-b")
	if v, err := getAt(t, r, "a", old); err != nil || v != "old" {
		t.Fatalf("read before the start: %q, %v", v, err)
	}
	_, _, err := r.Get([]byte("a"), kv.MaxTimestamp)
	wantLocked(t, err, "a", startTS)
	_, err = r.Scan(nil, nil, 0, kv.MaxTimestamp)
	wantLocked(t, err, "a", startTS)
	_, err = r.Put([]byte("b"), []byte("plain"))
	wantLocked(t, err, "b", startTS)
	x := begin(t, r)
	x.b.Put([]byte("b"), []byte("other"))
	_, err = x.commit(r)
	wantLocked(t, err, "b", startTS)
	_, err = r.Prewrite(bg, prep, []byte("b"), new(Batch).Put([]byte("b"), []byte("x")), time.Now().Add(time.Minute), "")
	wantLocked(t, err, "b", startTS)
	// An unrelated key is not held up.
	mustPut(t, r, "c", "free")
	// Some other writes move the clock on: the commit timestamp is still
	// the one chosen, older than them.
	later := mustPut(t, r, "d", "later")
	commitTS := prep + 1
	if err := r.CommitLocks(bg, startTS, commitTS, keys("a", "b"), true, ""); err != nil {
		t.Fatal(err)
	}
	if later <= commitTS {
		t.Logf("the clock did not pass the commit timestamp (%d ≤ %d); still a valid run", later, commitTS)
	}
	for _, c := range []struct {
		key  string
		ts   uint64
		want string
	}{{"a", commitTS - 1, "old"}, {"a", commitTS, "new"}, {"b", commitTS - 1, "<none>"}, {"b", commitTS, "new-b"}, {"a", kv.MaxTimestamp, "new"}} {
		if v, err := getAt(t, r, c.key, c.ts); err != nil || v != c.want {
			t.Errorf("%s at %d = %q, %v; want %q", c.key, c.ts, v, err, c.want)
		}
	}
	if st, err := r.CheckTxnStatus(bg, []byte("a"), startTS, time.Now(), false); err != nil || st.CommitTS != commitTS {
		t.Fatalf("status %+v, %v; want committed at %d", st, err, commitTS)
	}
	// A retried commit is a no-op; a plain write now goes ahead and is newer.
	if err := r.CommitLocks(bg, startTS, commitTS, keys("a", "b"), true, ""); err != nil {
		t.Fatalf("retried commit: %v", err)
	}
	ts := mustPut(t, r, "a", "newest")
	if ts <= commitTS {
		t.Fatalf("a write after the commit got %d, not after the commit timestamp %d", ts, commitTS)
	}
	mustGet(t, r, "a", "newest")
	if err := r.checkInvariants(); err != nil {
		t.Fatal(err)
	}
}

// Locks and outcomes are durable: through a restart that replays the WAL,
// through a flush that truncates it, and through a release to another
// store (another WAL directory), the locks stay and then commit there.
func TestLocksSurviveRestartFlushAndMove(t *testing.T) {
	dir := t.TempDir()
	opts := testOptions(t, dir)
	r := mustOpen(t, opts)
	base := mustPut(t, r, "k0", "v0")
	prewrite(t, r, base+1, "p", time.Minute, "k1", "v1", "k2", "v2")
	prep2 := prewrite(t, r, base+2, "k3", time.Minute, "k3", "v3")
	if err := r.CommitLocks(bg, base+2, prep2+1, keys("k3"), true, ""); err != nil {
		t.Fatal(err)
	}
	restart := func(why string) {
		t.Helper()
		if err := r.Close(); err != nil {
			t.Fatal(err)
		}
		r = mustOpen(t, opts)
		if got := r.Locks(); len(got) != 2 || string(got[0].Key) != "k1" || string(got[1].Key) != "k2" || got[0].StartTS != base+1 {
			t.Fatalf("after %s: locks %+v, want k1 and k2 of the transaction at %d", why, got, base+1)
		}
		if st, err := r.CheckTxnStatus(bg, []byte("k3"), base+2, time.Now(), false); err != nil || st.CommitTS != prep2+1 {
			t.Fatalf("after %s: status %+v, %v; want committed at %d", why, st, err, prep2+1)
		}
		mustGet(t, r, "k3", "v3")
	}
	restart("a restart replaying the WAL")
	if err := r.Flush(bg); err != nil {
		t.Fatal(err)
	}
	for i := range 50 {
		mustPut(t, r, fmt.Sprintf("fill%d", i), "x")
	}
	if err := r.Flush(bg); err != nil {
		t.Fatal(err)
	}
	restart("two flushes that truncated the WAL")
	if err := r.Release(bg); err != nil {
		t.Fatal(err)
	}
	opts.WALDir = dir + "/wal2" // another store
	r = mustOpen(t, opts)
	defer func() { _ = r.Close() }()
	if got := r.Locks(); len(got) != 2 {
		t.Fatalf("after a move: locks %+v, want k1 and k2", got)
	}
	if err := r.CommitLocks(bg, base+1, base+100, keys("k1", "k2"), false, ""); err != nil {
		t.Fatal(err)
	}
	if v, err := getAt(t, r, "k1", base+100); err != nil || v != "v1" {
		t.Fatalf("k1 at the commit: %q, %v", v, err)
	}
	if v, err := getAt(t, r, "k1", base+99); err != nil || v != "<none>" {
		t.Fatalf("k1 before the commit: %q, %v", v, err)
	}
	if len(r.Locks()) != 0 {
		t.Fatalf("locks left: %+v", r.Locks())
	}
}

// A transaction whose primary lock expired is rolled back by the first
// status check, which records the outcome: its coordinator can no longer
// commit it, nor prewrite it again, and its other locks roll back.
func TestExpiredPrimaryRollsBackAndStaysRolledBack(t *testing.T) {
	r := openForTxns(t)
	startTS := mustPut(t, r, "x", "0") + 1
	prep := prewrite(t, r, startTS, "p", -time.Second, "p", "1", "s", "1")
	st, err := r.CheckTxnStatus(bg, []byte("p"), startTS, time.Now(), false)
	if err != nil || !st.RolledBack {
		t.Fatalf("status %+v, %v; want rolled back", st, err)
	}
	if err := r.CommitLocks(bg, startTS, prep+1, keys("p", "s"), true, ""); !errors.Is(err, ErrTxnRolledBack) {
		t.Fatalf("commit after the rollback: %v, want ErrTxnRolledBack", err)
	}
	if _, err := r.Prewrite(bg, startTS, []byte("p"), new(Batch).Put([]byte("p"), []byte("2")), time.Now().Add(time.Minute), ""); !errors.Is(err, ErrTxnRolledBack) {
		t.Fatalf("prewrite after the rollback: %v, want ErrTxnRolledBack", err)
	}
	// The secondary's lock is still there until resolved.
	_, _, err = r.Get([]byte("s"), kv.MaxTimestamp)
	wantLocked(t, err, "s", startTS)
	if err := r.RollbackLocks(bg, startTS, keys("s"), false); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"p", "s"} {
		if v, err := getAt(t, r, k, kv.MaxTimestamp); err != nil || v != "<none>" {
			t.Fatalf("%s = %q, %v after the rollback", k, v, err)
		}
	}
	// A live lock is reported pending, not rolled back; a primary never
	// prewritten is rolled back only when asked to.
	start2 := startTS + 10
	prewrite(t, r, start2, "q", time.Minute, "q", "1")
	if st, err := r.CheckTxnStatus(bg, []byte("q"), start2, time.Now(), true); err != nil || st.Decided() || st.Lock == nil {
		t.Fatalf("live lock: %+v, %v; want pending with the lock", st, err)
	}
	if st, err := r.CheckTxnStatus(bg, []byte("nope"), start2+1, time.Now(), false); err != nil || st.Decided() || st.Lock != nil {
		t.Fatalf("absent primary: %+v, %v; want undecided", st, err)
	}
	if st, err := r.CheckTxnStatus(bg, []byte("nope"), start2+1, time.Now(), true); err != nil || !st.RolledBack {
		t.Fatalf("absent primary, rollback asked: %+v, %v", st, err)
	}
	// Outcomes go after the retention.
	if err := r.ForgetTxns(time.Time{}, time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if outs := r.TxnOutcomes(); len(outs) != 0 {
		t.Fatalf("outcomes left: %+v", outs)
	}
}

// A prewrite validates like a commit: a version newer than the start is a
// conflict; the same transaction's retried prewrite succeeds.
func TestPrewriteConflictsAndRetries(t *testing.T) {
	r := openForTxns(t)
	startTS := mustPut(t, r, "a", "0")
	mustPut(t, r, "a", "1")
	_, err := r.Prewrite(bg, startTS, []byte("a"), new(Batch).Put([]byte("a"), []byte("2")), time.Now().Add(time.Minute), "")
	wantConflict(t, err, "a")
	s2 := mustPut(t, r, "z", "0")
	prewrite(t, r, s2, "b", time.Minute, "b", "1")
	prewrite(t, r, s2, "b", time.Minute, "b", "1")
	if n := len(r.Locks()); n != 1 {
		t.Fatalf("%d locks after a retried prewrite, want 1", n)
	}
}

// Malformed WAL transaction records are refused, not half-applied; a good
// one round-trips.
func TestTxnRecordEncoding(t *testing.T) {
	rec := &txnRecord{commitTS: 7, versions: []op{{kind: kv.KindSet, key: []byte("k"), value: []byte("v")}, {kind: kv.KindDelete, key: []byte("d")}},
		unlocks: []lockRef{{key: []byte("k"), startTS: 3}}}
	rec.locks = append(rec.locks, lockOf("l", 3, "p"))
	rec.forget = []lockRef{{startTS: 1, key: []byte("p")}, {startTS: 2}}
	rec.outcome = &manifest.TxnOutcome{StartTS: 5, Primary: []byte("p"), CommitTS: 9, RequestID: "id", Resolved: true, DecidedAt: -3}
	buf := rec.encode(nil, 42)
	if len(buf) > rec.encodedLen() {
		t.Fatalf("encoded %d bytes, bound %d", len(buf), rec.encodedLen())
	}
	ts, got, err := decodeTxnRecord(buf)
	if err != nil || ts != 42 || got.commitTS != 7 || len(got.versions) != 2 || got.versions[1].kind != kv.KindDelete ||
		len(got.locks) != 1 || string(got.locks[0].Primary) != "p" || len(got.forget) != 2 || string(got.forget[0].key) != "p" || len(got.unlocks) != 1 ||
		got.outcome == nil || string(got.outcome.Primary) != "p" || got.outcome.RequestID != "id" || !got.outcome.Resolved || got.outcome.DecidedAt != -3 {
		t.Fatalf("decoded %d %+v %v", ts, got, err)
	}
	for n := 9; n < len(buf); n++ {
		if _, _, err := decodeTxnRecord(buf[:n]); err == nil {
			t.Fatalf("a record cut to %d of %d bytes decoded", n, len(buf))
		}
	}
	// A lock's kind byte: an expiring lock round-trips; a kind this
	// version does not know, or an expiring value too short for its TTL,
	// is refused rather than committed as a plain value.
	exp := lockOf("e", 3, "p")
	exp.Expiring, exp.Value = true, kv.ExpiringValue(time.Minute, []byte("v"))
	one := &txnRecord{locks: []manifest.TxnLock{exp}}
	buf = one.encode(nil, 42)
	if _, got, err := decodeTxnRecord(buf); err != nil || !got.locks[0].Expiring || !bytes.Equal(got.locks[0].Value, exp.Value) {
		t.Fatalf("an expiring lock decoded as %+v, %v", got, err)
	}
	kindAt := 8 + 1 + 1 + len("e") + 1 + len("p") // flag and ts, lock count, key, primary
	if buf[kindAt] != 2 {
		t.Fatalf("the lock's kind byte is not at %d", kindAt)
	}
	for _, c := range []struct {
		name string
		kind byte
		lock manifest.TxnLock
	}{{"an unknown kind", 3, exp}, {"an expiring value without its TTL", 2, lockOf("e", 3, "p")}} {
		b := (&txnRecord{locks: []manifest.TxnLock{c.lock}}).encode(nil, 42)
		b[kindAt] = c.kind
		if _, _, err := decodeTxnRecord(b); !errors.Is(err, errBadTxnRecord) {
			t.Fatalf("%s decoded: %v", c.name, err)
		}
	}
}

func lockOf(key string, startTS uint64, primary string) manifest.TxnLock {
	return manifest.TxnLock{Key: []byte(key), StartTS: startTS, Primary: []byte(primary), Value: []byte("v"), ExpiresAt: 99}
}

// A retry of a commit request whose answer was lost learns from the
// primary's prewrite that it committed, also after its locks were all
// resolved and the store restarted; another request for the same
// transaction does not. A resolved outcome goes after the retry window, an
// unresolved one only after the retention.
func TestRetriedCommitLearnsItsOutcome(t *testing.T) {
	dir := t.TempDir()
	opts := testOptions(t, dir)
	r := mustOpen(t, opts)
	defer func() { _ = r.Close() }()
	startTS := mustPut(t, r, "p", "0") + 1
	prep, err := r.Prewrite(bg, startTS, []byte("p"), new(Batch).Put([]byte("p"), []byte("1")), time.Now().Add(time.Minute), "req-1")
	if err != nil {
		t.Fatal(err)
	}
	if err := r.CommitLocks(bg, startTS, prep+1, keys("p"), true, "req-1"); err != nil {
		t.Fatal(err)
	}
	if err := r.MarkTxnResolved(startTS, []byte("p")); err != nil {
		t.Fatal(err)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	r = mustOpen(t, opts)
	_, err = r.Prewrite(bg, startTS, []byte("p"), new(Batch).Put([]byte("p"), []byte("1")), time.Now().Add(time.Minute), "req-1")
	var ac *AlreadyCommittedError
	if !errors.As(err, &ac) || ac.CommitTS != prep+1 {
		t.Fatalf("the retried request's prewrite: %v; want already committed at %d", err, prep+1)
	}
	_, err = r.Prewrite(bg, startTS, []byte("p"), new(Batch).Put([]byte("p"), []byte("1")), time.Now().Add(time.Minute), "req-2")
	if err == nil || errors.As(err, &ac) {
		t.Fatalf("another request's prewrite: %v; want a refusal, not a commit", err)
	}
	// An unresolved outcome of another transaction stays when the retry
	// window passes; the resolved one goes.
	s2 := startTS + 100
	prewrite(t, r, s2, "q", time.Minute, "q", "1")
	if err := r.CommitLocks(bg, s2, s2+1, keys("q"), true, ""); err != nil {
		t.Fatal(err)
	}
	if err := r.ForgetTxns(time.Now().Add(time.Second), time.Time{}); err != nil {
		t.Fatal(err)
	}
	if outs := r.TxnOutcomes(); len(outs) != 1 || string(outs[0].Primary) != "q" {
		t.Fatalf("outcomes after the retry window: %+v; want only q's, which is not resolved", outs)
	}
}

// A batch across regions takes a new start on each attempt: a retry of one
// whose primary committed finds the commit by its request ID at any start,
// instead of committing the batch a second time.
func TestARetryAtANewStartFindsItsCommitByRequest(t *testing.T) {
	r := openForTxns(t)
	start := mustPut(t, r, "z", "0")
	b := func() *Batch { return new(Batch).Put([]byte("p"), []byte("1")) }
	prep, err := r.Prewrite(bg, start, []byte("p"), b(), time.Now().Add(time.Minute), "batch-7")
	if err != nil {
		t.Fatal(err)
	}
	if err := r.CommitLocks(bg, start, prep+1, keys("p"), true, "batch-7"); err != nil {
		t.Fatal(err)
	}
	later := mustPut(t, r, "z", "1")
	var ac *AlreadyCommittedError
	if _, err := r.Prewrite(bg, later, []byte("p"), b(), time.Now().Add(time.Minute), "batch-7"); !errors.As(err, &ac) || ac.CommitTS != prep+1 {
		t.Fatalf("the retry at a new start: %v, want AlreadyCommittedError at %d", err, prep+1)
	}
	// Another request at that start is a transaction of its own.
	if _, err := r.Prewrite(bg, later, []byte("p"), b(), time.Now().Add(time.Minute), "batch-8"); err != nil {
		t.Fatalf("another request's prewrite: %v", err)
	}
}
