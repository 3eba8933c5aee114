package liveness

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bellows-kv/bellows/internal/contract"
	"github.com/bellows-kv/bellows/storage-engine/blob"
)

// bucket is a file bucket in a test directory, and that directory.
func bucket(t *testing.T) (*blob.Bucket, string) {
	t.Helper()
	dir := t.TempDir()
	b, err := blob.Open(context.Background(), "file://"+dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b, dir
}

// kept are the numbers of store's records in b, in order.
func kept(t *testing.T, b *blob.Bucket, store string) []uint64 {
	t.Helper()
	objs, err := b.List(context.Background(), storePrefix(store))
	if err != nil {
		t.Fatal(err)
	}
	var ks []uint64
	for _, o := range objs {
		if k, err := strconv.ParseUint(strings.TrimPrefix(o.Key, storePrefix(store)), 10, 64); err == nil {
			ks = append(ks, k)
		}
	}
	slices.Sort(ks)
	return ks
}

// same: a and b are one record (times compared as instants).
func same(a, b Record) bool {
	return a.K == b.K && a.Store == b.Store && a.Incarnation == b.Incarnation && a.Fenced == b.Fenced && a.Expiry.Equal(b.Expiry)
}

const (
	term   = 3 * time.Second
	offset = 250 * time.Millisecond
)

var t0 = time.Unix(1_000_000, 0)

// A store's renewals number its records 1, 2, 3 …, each expiring a term
// after its clock reading; Current reads the newest; the serving rule is
// expiry − offset; collection keeps the history short.
func TestRenewalsNumberTheRecordsAndKeepTheHistoryShort(t *testing.T) {
	ctx := context.Background()
	b, _ := bucket(t)
	if cur, err := Current(ctx, b, "0"); err != nil || cur.K != 0 {
		t.Fatalf("before any renewal: %v %v", cur, err)
	}
	var held Record
	for i := range 30 {
		now := t0.Add(time.Duration(i) * 750 * time.Millisecond)
		rec, err := Renew(ctx, b, "0", "a", held, now, term)
		if err != nil {
			t.Fatalf("renewal %d: %v", i, err)
		}
		if rec.K != uint64(i+1) || !rec.Expiry.Equal(now.Add(term)) || rec.Fenced || rec.Store != "0" || rec.Incarnation != "a" {
			t.Fatalf("renewal %d wrote %+v", i, rec)
		}
		held = rec
	}
	cur, err := Current(ctx, b, "0")
	if err != nil || !same(cur, held) {
		t.Fatalf("Current: %+v %v, want the last renewal %+v", cur, err, held)
	}
	if got, want := ServingUntil(cur, offset), held.Expiry.Add(-offset); !got.Equal(want) {
		t.Errorf("ServingUntil %v, want %v", got, want)
	}
	if n, err := Collect(ctx, b, "0", time.Now().Add(time.Minute), offset); err != nil || n != 30-contract.DefaultFencingLogKeep {
		t.Errorf("collection a minute on deleted %d records, %v; want all but the newest %d", n, err, contract.DefaultFencingLogKeep)
	}
	if got := kept(t, b, "0"); len(got) != contract.DefaultFencingLogKeep || got[0] != 30-contract.DefaultFencingLogKeep+1 {
		t.Errorf("records kept: %v, want the newest %d", got, contract.DefaultFencingLogKeep)
	}
	if cur, err := Current(ctx, b, "0"); err != nil || !same(cur, held) {
		t.Fatalf("Current after the collection: %+v %v, want %+v", cur, err, held)
	}
	// Another store's lease is its own history.
	if other, err := Current(ctx, b, "1"); err != nil || other.K != 0 {
		t.Errorf("store 1: %v %v", other, err)
	}
}

// The balancer fences only after expiry + offset, by its clock; the fence
// names the incarnation; fencing again is idempotent.
func TestFenceWaitsForExpiryPlusOffset(t *testing.T) {
	ctx := context.Background()
	b, _ := bucket(t)
	if ok, _, err := Fence(ctx, b, "0", t0, offset); ok || err != nil {
		t.Fatalf("fencing a store that never renewed: %v %v", ok, err)
	}
	rec, err := Renew(ctx, b, "0", "a", Record{}, t0, term)
	if err != nil {
		t.Fatal(err)
	}
	for _, now := range []time.Time{t0, rec.Expiry, rec.Expiry.Add(offset)} {
		if ok, cur, err := Fence(ctx, b, "0", now, offset); ok || err != nil || !same(cur, rec) {
			t.Fatalf("fence at %v (expiry %v, offset %v): %v %v %v, want refused", now, rec.Expiry, offset, ok, cur, err)
		}
	}
	ok, f, err := Fence(ctx, b, "0", rec.Expiry.Add(offset+time.Millisecond), offset)
	if err != nil || !ok || !f.Fenced || f.K != rec.K+1 || f.Incarnation != "a" {
		t.Fatalf("fence after expiry + offset: %v %+v %v", ok, f, err)
	}
	if !ServingUntil(f, offset).IsZero() {
		t.Errorf("a fence allows serving until %v", ServingUntil(f, offset))
	}
	again, g, err := Fence(ctx, b, "0", rec.Expiry.Add(time.Hour), offset)
	if err != nil || !again || !same(g, f) {
		t.Fatalf("fencing again: %v %+v %v, want the same fence", again, g, err)
	}
}

// A fenced incarnation never renews again, whether it joins afresh or
// renews from the record it held; a new incarnation joins above the fence
// and holds the lease from then on; the old one, still renewing, is told
// it was fenced.
func TestAFencedIncarnationCannotRenewButANewOneRejoins(t *testing.T) {
	ctx := context.Background()
	b, _ := bucket(t)
	held, err := Renew(ctx, b, "0", "a", Record{}, t0, term)
	if err != nil {
		t.Fatal(err)
	}
	late := held.Expiry.Add(time.Second)
	if ok, _, err := Fence(ctx, b, "0", late, offset); !ok || err != nil {
		t.Fatalf("fence: %v %v", ok, err)
	}
	for _, h := range []Record{held, {}} {
		if rec, err := Renew(ctx, b, "0", "a", h, late, term); !errors.Is(err, ErrFenced) {
			t.Fatalf("incarnation a renewing from %v after its fence: %+v %v, want ErrFenced", h, rec, err)
		}
	}
	b1, err := Renew(ctx, b, "0", "b", Record{}, late, term)
	if err != nil || b1.K != 3 || b1.Fenced {
		t.Fatalf("a new incarnation joining: %+v %v", b1, err)
	}
	if _, err := Renew(ctx, b, "0", "b", b1, late.Add(time.Second), term); err != nil {
		t.Fatalf("the new incarnation renewing: %v", err)
	}
	if _, err := Renew(ctx, b, "0", "a", held, late.Add(time.Second), term); !errors.Is(err, ErrFenced) {
		t.Fatalf("the fenced incarnation renewing after the new one joined: %v, want ErrFenced", err)
	}
	// The fence of a is no fence of b: b expires and is fenced in turn
	// only by a new fence naming it.
	cur, _ := Current(ctx, b, "0")
	if ok, _, _ := Fence(ctx, b, "0", cur.Expiry, offset); ok {
		t.Fatal("b, renewed, was fenced before its expiry")
	}
}

// A process that starts while the previous one of the same store still
// renews takes the lease over; the previous one, renewing from its record,
// finds itself superseded (ErrFenced) and never writes again.
func TestANewIncarnationSupersedesTheRunningOne(t *testing.T) {
	ctx := context.Background()
	b, _ := bucket(t)
	a, err := Renew(ctx, b, "0", "a", Record{}, t0, term)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Renew(ctx, b, "0", "b", Record{}, t0, term); err != nil {
		t.Fatalf("b joining over a's valid record: %v", err)
	}
	if _, err := Renew(ctx, b, "0", "a", a, t0, term); !errors.Is(err, ErrFenced) {
		t.Fatalf("a renewing after b joined: %v, want ErrFenced", err)
	}
	if cur, _ := Current(ctx, b, "0"); cur.Incarnation != "b" {
		t.Fatalf("the newest record is %v, want b's", cur)
	}
}

// A renewal whose write landed though the caller did not learn it (held
// not updated) renews above it instead of failing.
func TestARenewalAboveItsOwnUnseenRecord(t *testing.T) {
	ctx := context.Background()
	b, _ := bucket(t)
	r1, err := Renew(ctx, b, "0", "a", Record{}, t0, term)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Renew(ctx, b, "0", "a", r1, t0.Add(time.Second), term); err != nil {
		t.Fatal(err)
	}
	r3, err := Renew(ctx, b, "0", "a", r1, t0.Add(2*time.Second), term) // held is r1, record 2 exists
	if err != nil || r3.K != 3 {
		t.Fatalf("renewing from a stale held record: %+v %v, want record 3", r3, err)
	}
}

// A renewal and a fence racing for one record number: the bucket's
// create-if-absent lets exactly one write it, and both sides agree on
// which.
func TestRenewalAndFenceRaceHasOneWinner(t *testing.T) {
	ctx := context.Background()
	renewals, fences := 0, 0
	for round := range 40 {
		b, _ := bucket(t)
		held, err := Renew(ctx, b, "0", "a", Record{}, t0, term)
		if err != nil {
			t.Fatal(err)
		}
		late := held.Expiry.Add(time.Second)
		var wg sync.WaitGroup
		var renewErr, fenceErr error
		var fenced bool
		var rec, frec Record
		start := make(chan struct{})
		wg.Add(2)
		go func() {
			defer wg.Done()
			<-start
			rec, renewErr = Renew(ctx, b, "0", "a", held, late, term)
		}()
		go func() {
			defer wg.Done()
			<-start
			fenced, frec, fenceErr = Fence(ctx, b, "0", late, offset)
		}()
		close(start)
		wg.Wait()
		if fenceErr != nil {
			t.Fatalf("round %d: fence: %v", round, fenceErr)
		}
		cur, err := Current(ctx, b, "0")
		if err != nil || cur.K != 2 {
			t.Fatalf("round %d: newest %v %v, want record 2", round, cur, err)
		}
		switch {
		case renewErr == nil && !fenced:
			renewals++
			if !same(cur, rec) || !same(frec, rec) || cur.Fenced {
				t.Fatalf("round %d: the renewal won with %v, but the newest is %v and the fence saw %v", round, rec, cur, frec)
			}
		case errors.Is(renewErr, ErrFenced) && fenced:
			fences++
			if !same(cur, frec) || !cur.Fenced {
				t.Fatalf("round %d: the fence won with %v, but the newest is %v", round, frec, cur)
			}
		default:
			t.Fatalf("round %d: renewal %v %v, fence %v %v: not exactly one winner", round, rec, renewErr, fenced, frec)
		}
	}
	t.Logf("%d renewals, %d fences won", renewals, fences)
}

// Two balancers fencing at once and two processes of one store joining at
// once: one record per number, and both fencers report the store fenced.
func TestConcurrentFencesAgree(t *testing.T) {
	ctx := context.Background()
	b, _ := bucket(t)
	held, err := Renew(ctx, b, "0", "a", Record{}, t0, term)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	results := make([]bool, 4)
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ok, _, err := Fence(ctx, b, "0", held.Expiry.Add(time.Minute), offset)
			if err != nil {
				t.Error(err)
			}
			results[i] = ok
		}()
	}
	wg.Wait()
	for i, ok := range results {
		if !ok {
			t.Errorf("fencer %d reports the store alive", i)
		}
	}
	if cur, _ := Current(ctx, b, "0"); cur.K != 2 || !cur.Fenced {
		t.Errorf("newest %v, want one fence at record 2", cur)
	}
}

// cutOff makes the bucket's liveness prefix unusable the way a lost bucket
// is: a file stands where its directory was, so every list, read and write
// under it fails. restore undoes it.
func cutOff(t *testing.T, dir string) (restore func()) {
	t.Helper()
	live := filepath.Join(dir, "liveness")
	away := filepath.Join(dir, "liveness.away")
	if err := os.Rename(live, away); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(live, []byte("in the way"), 0o644); err != nil {
		t.Fatal(err)
	}
	return func() {
		if err := os.Remove(live); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(away, live); err != nil {
			t.Fatal(err)
		}
	}
}

// A keeper serves until its record's expiry − offset; renewals that fail
// leave that deadline in force, so it stops serving by itself when it
// passes, and serves again after a renewal succeeds.
func TestKeeperStopsServingWhenRenewalsFail(t *testing.T) {
	ctx := context.Background()
	b, dir := bucket(t)
	now := t0
	clock := func() time.Time { return now }
	k := NewKeeper(b, "0", "a", term, 750*time.Millisecond, offset, clock)
	if k.Serving(now) {
		t.Fatal("serving before the first renewal")
	}
	rec, err := k.Renew(ctx)
	if err != nil {
		t.Fatal(err)
	}
	deadline := rec.Expiry.Add(-offset)
	if !k.Serving(now) || !k.ServingUntil().Equal(deadline) || !k.LastRenewal().Equal(now) {
		t.Fatalf("after a renewal at %v: serving %v until %v, last renewal %v", now, k.Serving(now), k.ServingUntil(), k.LastRenewal())
	}
	restore := cutOff(t, dir)
	for range 3 {
		now = now.Add(750 * time.Millisecond)
		if _, err := k.Renew(ctx); err == nil {
			t.Fatal("a renewal succeeded with the bucket cut off")
		} else if errors.Is(err, ErrFenced) {
			t.Fatalf("a failed renewal reported a fence: %v", err)
		}
		if !k.Serving(now) {
			t.Fatalf("stopped serving at %v, before the deadline %v", now, deadline)
		}
	}
	if !k.LastRenewal().Equal(t0) {
		t.Errorf("last renewal %v, want the last success %v", k.LastRenewal(), t0)
	}
	if k.Serving(deadline) || k.Serving(deadline.Add(time.Millisecond)) {
		t.Fatalf("still serving at the deadline %v", deadline)
	}
	select {
	case <-k.Fenced():
		t.Fatal("Fenced closed on failed renewals")
	default:
	}
	restore()
	now = deadline.Add(time.Second) // expired, but nobody fenced it
	if _, err := k.Renew(ctx); err != nil {
		t.Fatalf("renewing with the bucket back: %v", err)
	}
	if !k.Serving(now) {
		t.Fatal("not serving after a renewal")
	}
}

// A keeper that finds its incarnation fenced stops serving at once, closes
// Fenced and never renews again; Run returns ErrFenced.
func TestKeeperLearnsItWasFenced(t *testing.T) {
	ctx := context.Background()
	b, _ := bucket(t)
	now := t0
	k := NewKeeper(b, "0", "a", term, 750*time.Millisecond, offset, func() time.Time { return now })
	rec, err := k.Renew(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// The keeper paused past its term; the balancer fenced it.
	if ok, _, err := Fence(ctx, b, "0", rec.Expiry.Add(time.Second), offset); !ok || err != nil {
		t.Fatalf("fence: %v %v", ok, err)
	}
	if !k.Serving(now) {
		t.Fatal("the keeper does not know of the fence yet: it still serves by its deadline")
	}
	if _, err := k.Renew(ctx); !errors.Is(err, ErrFenced) {
		t.Fatalf("renewal after the fence: %v, want ErrFenced", err)
	}
	select {
	case <-k.Fenced():
	default:
		t.Fatal("Fenced not closed")
	}
	if k.Serving(now) {
		t.Fatal("serving after learning of the fence")
	}
	if _, err := k.Renew(ctx); !errors.Is(err, ErrFenced) {
		t.Fatalf("renewing again: %v", err)
	}
	if cur, _ := Current(ctx, b, "0"); cur.K != 2 {
		t.Fatalf("newest %v: the fenced keeper wrote after its fence", cur)
	}
}

// Run renews on its ticker; a fence written meanwhile ends it with
// ErrFenced and closes Fenced.
func TestKeeperRunEndsAtAFence(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b, _ := bucket(t)
	k := NewKeeper(b, "0", "a", time.Hour, 5*time.Millisecond, offset, nil)
	done := make(chan error, 1)
	go func() { done <- k.Run(ctx, func(err error) { t.Log(err) }) }()
	for k.Held().K < 3 {
		select {
		case err := <-done:
			t.Fatalf("Run ended: %v", err)
		case <-time.After(time.Millisecond):
		}
	}
	if !k.Serving(time.Now()) {
		t.Fatal("not serving while renewing")
	}
	// The balancer's clock says the term is over (a fence needs that;
	// here the clock is moved rather than waited for).
	for attempt := 0; ; attempt++ {
		ok, _, err := Fence(ctx, b, "0", time.Now().Add(2*time.Hour), offset)
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			break
		}
		if attempt == 100 {
			t.Fatal("every fence lost the race to a renewal")
		}
		// The keeper's renewal took the number: fence its newest record.
	}
	select {
	case <-k.Fenced():
	case <-ctx.Done():
		t.Fatal("Fenced not closed after the fence")
	}
	if err := <-done; !errors.Is(err, ErrFenced) {
		t.Fatalf("Run returned %v, want ErrFenced", err)
	}
	if k.Serving(time.Now()) {
		t.Fatal("serving after the fence")
	}
}

// Run ends with its context.
func TestKeeperRunEndsWithItsContext(t *testing.T) {
	b, _ := bucket(t)
	ctx, cancel := context.WithCancel(context.Background())
	k := NewKeeper(b, "0", "a", 0, 5*time.Millisecond, offset, nil)
	done := make(chan error, 1)
	go func() { done <- k.Run(ctx, nil) }()
	for k.Held().K < 2 {
		time.Sleep(time.Millisecond)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Run returned %v", err)
	}
}

func TestStoreIDsAreChecked(t *testing.T) {
	b, _ := bucket(t)
	for _, s := range []string{"", "a/b"} {
		if _, err := Renew(context.Background(), b, s, "x", Record{}, t0, term); err == nil {
			t.Errorf("store id %q accepted", s)
		}
	}
}

// Dead: an incarnation is gone once a fence names it or a newer
// incarnation holds the lease; alive while it renews; a store with no
// record is not dead (nothing to take over).
func TestDeadIsAFenceOrANewerIncarnation(t *testing.T) {
	ctx := context.Background()
	b, _ := bucket(t)
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	if dead, err := Dead(ctx, b, "0", "a"); err != nil || dead {
		t.Fatalf("no record: dead %v, %v; want false", dead, err)
	}
	if _, err := Renew(ctx, b, "0", "a", Record{}, t0, 3*time.Second); err != nil {
		t.Fatal(err)
	}
	if dead, err := Dead(ctx, b, "0", "a"); err != nil || dead {
		t.Fatalf("renewing: dead %v, %v; want false", dead, err)
	}
	if _, err := Renew(ctx, b, "0", "b", Record{}, t0.Add(5*time.Second), 3*time.Second); err != nil {
		t.Fatal(err)
	}
	if dead, err := Dead(ctx, b, "0", "a"); err != nil || !dead {
		t.Fatalf("superseded: dead %v, %v; want true", dead, err)
	}
	if dead, err := Dead(ctx, b, "0", "b"); err != nil || dead {
		t.Fatalf("the newer incarnation: dead %v, %v; want false", dead, err)
	}
	if ok, _, err := Fence(ctx, b, "0", t0.Add(time.Minute), 250*time.Millisecond); err != nil || !ok {
		t.Fatalf("fence: %v, %v", ok, err)
	}
	if dead, err := Dead(ctx, b, "0", "b"); err != nil || !dead {
		t.Fatalf("fenced: dead %v, %v; want true", dead, err)
	}
}

// AwaitPredecessor waits for the running incarnation's expiry plus the
// offset, and not at all for a fenced or expired one.
func TestAwaitPredecessorWaitsOutTheRunningLease(t *testing.T) {
	ctx := context.Background()
	b, _ := bucket(t)
	now := time.Now()
	if _, err := Renew(ctx, b, "0", "a", Record{}, now, 300*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	if _, err := AwaitPredecessor(ctx, b, "0", "b", 100*time.Millisecond, nil); err != nil {
		t.Fatal(err)
	}
	if waited := time.Since(began); waited < 300*time.Millisecond {
		t.Fatalf("waited %v for a lease expiring 300ms after its renewal plus 100ms offset", waited)
	}
	began = time.Now()
	if _, err := AwaitPredecessor(ctx, b, "0", "b", 100*time.Millisecond, nil); err != nil {
		t.Fatal(err)
	}
	if waited := time.Since(began); waited > 100*time.Millisecond {
		t.Fatalf("waited %v for an expired lease", waited)
	}
}
