package region

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"
)

// A read at S with limit L (docs/clock.md): a version in (S, L] fails it
// with an *UncertainError naming the version, by Get and by iterators in
// both directions, a tombstone as much as a value; one above L is the
// future and is not seen; without a limit nothing changes.
func TestReadsWithinTheUncertaintyWindowFail(t *testing.T) {
	r := openForTxns(t)
	mustPut(t, r, "a", "1")
	mustPut(t, r, "m", "1")
	in := mustPut(t, r, "b", "2")
	del, err := r.Delete([]byte("m"))
	if err != nil {
		t.Fatal(err)
	}
	mustPut(t, r, "z", "3")
	ctx := context.Background()
	readTS := in - 1
	limit := del // in and del within (readTS, limit]; after beyond it

	var ue *UncertainError
	if _, _, err := r.GetUncertain(ctx, []byte("b"), readTS, Uncertainty{Limit: limit}); !errors.As(err, &ue) || ue.TS != in || string(ue.Key) != "b" {
		t.Fatalf("Get of a key written within the window: %v, want an *UncertainError at %d", err, in)
	}
	if _, _, err := r.GetUncertain(ctx, []byte("m"), readTS, Uncertainty{Limit: limit}); !errors.As(err, &ue) || ue.TS != del {
		t.Fatalf("Get of a key deleted within the window: %v, want an *UncertainError at %d", err, del)
	}
	if v, ok, err := r.GetUncertain(ctx, []byte("a"), readTS, Uncertainty{Limit: limit}); err != nil || !ok || string(v.Value) != "1" {
		t.Fatalf("Get of a key untouched in the window: %q %v %v", v.Value, ok, err)
	}
	if _, ok, err := r.GetUncertain(ctx, []byte("z"), readTS, Uncertainty{Limit: limit}); err != nil || ok {
		t.Fatalf("Get of a key written after the limit: %v %v, want absent", ok, err)
	}
	if v, ok, err := r.GetUncertain(ctx, []byte("b"), readTS, Uncertainty{}); err != nil || ok {
		t.Fatalf("Get without a limit: %q %v %v, want the snapshot (absent)", v.Value, ok, err)
	}
	for _, dir := range []string{"forward", "reverse"} {
		it, err := r.NewIteratorUncertain(ctx, nil, nil, readTS, Uncertainty{Limit: limit})
		if err != nil {
			t.Fatal(err)
		}
		var keys []string
		ok := it.First()
		if dir == "reverse" {
			ok = it.Last()
		}
		for ; ok; ok = map[bool]func() bool{true: it.Prev, false: it.Next}[dir == "reverse"]() {
			keys = append(keys, string(it.Key()))
		}
		err = it.Err()
		_ = it.Close()
		if !errors.As(err, &ue) || ue.ReadTS != readTS {
			t.Fatalf("%s scan over the window: keys %v, err %v; want an *UncertainError", dir, keys, err)
		}
		// Forward, "a" is live before "b"; reverse, "z" is beyond the
		// limit and not seen, and "m" (deleted in the window) stops it.
		if want := map[string]string{"forward": "[a]", "reverse": "[]"}[dir]; fmt.Sprint(keys) != want {
			t.Fatalf("%s scan returned %v before the uncertain key, want %s", dir, keys, want)
		}
	}
}

// A commit timestamp decided by another store's prepare can be ahead of
// this store's clock. Once the region holds a version there, the clock is
// past it: a transaction that begins here afterwards, or takes this
// clock's reading as bounding every version here, is above it. (Before,
// only the region's own last timestamp moved: a transaction begun at the
// coordinator of a commit it had just acknowledged started below it and,
// narrowed to that start, read the snapshot without it.)
func TestAVersionAboveTheClockMovesTheClock(t *testing.T) {
	r := openForTxns(t)
	clock := r.opts.Clock
	start := clock.Now()
	prewrite(t, r, start, "k", time.Minute, "k", "v")
	commit := clock.Now() + uint64(time.Second) // another store's prepare, a second ahead
	if err := r.CommitLocks(bg, start, commit, [][]byte{[]byte("k")}, true, ""); err != nil {
		t.Fatal(err)
	}
	if now := clock.Now(); now <= commit {
		t.Fatalf("the store's clock reads %d after the region committed at %d: %v behind a version it holds", now, commit, time.Duration(commit-now))
	}
}

// A transaction's observation R of the clock narrows its reads here to R
// (docs/clock.md), except past a lock held at R that commits later above
// R: its transaction may have been acknowledged before the reader began
// (its coordinator left the lock behind, or gave up on committing it).
// Such a commit stays within the window; a lock its coordinator commits
// while waiting for the answer (CommitLocks with a live request) is
// narrowed away as a write after R.
func TestALockCommittedLateStaysUncertain(t *testing.T) {
	for _, c := range []struct {
		name      string
		commit    func(r *Region, start, commitTS uint64, key []byte) error
		uncertain bool
	}{
		{"left behind, committed by a request that met it", func(r *Region, start, commitTS uint64, key []byte) error {
			return r.CommitLeftLocks(bg, start, commitTS, [][]byte{key})
		}, true},
		{"committed for a coordinator that has gone", func(r *Region, start, commitTS uint64, key []byte) error {
			ctx, cancel := context.WithCancel(bg)
			cancel()
			return r.CommitLocks(ctx, start, commitTS, [][]byte{key}, false, "")
		}, true},
		{"committed for its waiting coordinator", func(r *Region, start, commitTS uint64, key []byte) error {
			return r.CommitLocks(bg, start, commitTS, [][]byte{key}, false, "")
		}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := openForTxns(t)
			clock := r.opts.Clock
			mustPut(t, r, "k", "old")
			writer := clock.Now()
			prewrite(t, r, writer, "elsewhere", time.Minute, "k", "new")
			// The reader begins elsewhere and first reaches this store now,
			// the lock held.
			readTS := clock.Now()
			u := Uncertainty{Limit: readTS + uint64(time.Second), Observed: clock.Now()}
			commitTS := u.Observed + uint64(time.Millisecond) // the primary's store, ahead
			if err := c.commit(r, writer, commitTS, []byte("k")); err != nil {
				t.Fatal(err)
			}
			got, ok, err := r.GetUncertain(bg, []byte("k"), readTS, u)
			v := got.Value
			var ue *UncertainError
			switch {
			case c.uncertain && (!errors.As(err, &ue) || ue.TS != commitTS):
				t.Fatalf("read at %d observed at %d after a late commit at %d: %q %v %v; want an *UncertainError at the commit", readTS, u.Observed, commitTS, v, ok, err)
			case !c.uncertain && (err != nil || string(v) != "old"):
				t.Fatalf("read at %d observed at %d after a commit at %d for its coordinator: %q %v %v; want the snapshot (old), narrowed to the observation", readTS, u.Observed, commitTS, v, ok, err)
			}
			// A reader that observed the clock after the commit narrows to
			// that observation, which is above the commit.
			later := Uncertainty{Limit: u.Limit, Observed: clock.Now()}
			if _, _, err := r.GetUncertain(bg, []byte("k"), readTS, later); !errors.As(err, &ue) || ue.TS != commitTS {
				t.Fatalf("read observed after the commit: %v, want an *UncertainError at %d", err, commitTS)
			}
		})
	}
}

// A read whose values must live through T (Uncertainty.LiveThrough, a
// serializable validation's commit timestamp) fails with an *ExpiredError
// on a value it reads live that expires at or before T, by Get and by
// iterators in both directions; a value expiring after T, one that never
// expires, and an expiring version hidden under a newer permanent one pass.
func TestReadsThatMustLiveThroughFailOnValuesThatExpireBefore(t *testing.T) {
	r := openForTxns(t)
	ctx := context.Background()
	hidden := putExpiring(t, r, "h", "old", time.Minute)
	mustPut(t, r, "h", "permanent")
	put := putExpiring(t, r, "e", "v", time.Hour)
	readTS := mustPut(t, r, "p", "plain")
	expiry := put + uint64(time.Hour)

	if v, ok, err := r.GetUncertain(ctx, []byte("e"), readTS, Uncertainty{LiveThrough: expiry - 1}); err != nil || !ok || string(v.Value) != "v" || v.Expiry != expiry || v.TS != put {
		t.Fatalf("Get of a value live through the bound: %+v %v %v, want v at %d expiring at %d", v, ok, err, put, expiry)
	}
	var ee *ExpiredError
	if _, _, err := r.GetUncertain(ctx, []byte("e"), readTS, Uncertainty{LiveThrough: expiry}); !errors.As(err, &ee) || ee.Expiry != expiry || string(ee.Key) != "e" {
		t.Fatalf("Get of a value expiring at the bound: %v, want an *ExpiredError at %d", err, expiry)
	}
	for _, k := range []string{"p", "h"} {
		if v, ok, err := r.GetUncertain(ctx, []byte(k), readTS, Uncertainty{LiveThrough: hidden + uint64(time.Hour)}); err != nil || !ok || v.Expiry != 0 {
			t.Fatalf("Get of %s, whose newest version never expires: %+v %v %v", k, v, ok, err)
		}
	}
	for _, reverse := range []bool{false, true} {
		scan := func(liveThrough uint64) ([]string, error) {
			it, err := r.NewIteratorUncertain(ctx, nil, nil, readTS, Uncertainty{LiveThrough: liveThrough})
			if err != nil {
				return nil, err
			}
			defer it.Close()
			var got []string
			ok := it.First()
			if reverse {
				ok = it.Last()
			}
			for ; ok; ok = map[bool]func() bool{false: it.Next, true: it.Prev}[reverse]() {
				got = append(got, string(it.Key()))
			}
			return got, it.Err()
		}
		if got, err := scan(expiry - 1); err != nil || len(got) != 3 {
			t.Fatalf("reverse %t: scan live through the bound: %v %v, want e, h and p", reverse, got, err)
		}
		if _, err := scan(expiry); !errors.As(err, &ee) || ee.Expiry != expiry || string(ee.Key) != "e" {
			t.Fatalf("reverse %t: scan with e expiring at the bound: %v, want an *ExpiredError at %d", reverse, err, expiry)
		}
	}
}

// A transaction passes its own locks only: another transaction's lock on a
// key, started at the same timestamp (on another store) with another
// primary key, stops the read.
func TestOwnLocksAreTheTransactionsStartAndPrimary(t *testing.T) {
	r := openForTxns(t)
	ctx := context.Background()
	startTS := r.opts.Clock.Now()
	prewrite(t, r, startTS, "k", time.Minute, "k", "locked")
	readTS := r.opts.Clock.Now()
	if _, _, err := r.GetUncertain(ctx, []byte("k"), readTS, Uncertainty{Own: TxnID{StartTS: startTS, Primary: []byte("k")}}); err != nil {
		t.Fatalf("a read by the lock's transaction: %v", err)
	}
	var le *LockedError
	if _, _, err := r.GetUncertain(ctx, []byte("k"), readTS, Uncertainty{Own: TxnID{StartTS: startTS, Primary: []byte("other")}}); !errors.As(err, &le) {
		t.Fatalf("a read by another transaction of the same start: %v, want a *LockedError", err)
	}
	it, err := r.NewIteratorUncertain(ctx, nil, nil, readTS, Uncertainty{Own: TxnID{StartTS: startTS, Primary: []byte("other")}})
	if err == nil {
		it.Close()
	}
	if !errors.As(err, &le) {
		t.Fatalf("a scan by another transaction of the same start: %v, want a *LockedError", err)
	}
}
