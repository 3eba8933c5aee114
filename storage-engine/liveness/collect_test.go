package liveness

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bellows-kv/bellows/internal/contract"
)

// shortRetention runs the records' retention at d for the test, so that
// collection and the writers' guard against stale views play out in real
// time.
func shortRetention(t *testing.T, d time.Duration) {
	prev := retention
	retention = d
	t.Cleanup(func() { retention = prev })
}

// An incarnation paused while its lease ran out, the balancer fenced it
// and a new incarnation of the store joined and renewed, long enough for
// the fence's number to be collected, still cannot renew when it resumes:
// its write lands in the freed number, finds the record it held gone, is
// withdrawn, and the incarnation learns it was superseded. (With a plain
// create-if-absent write into the freed number it would serve again.)
func TestAPausedIncarnationCannotRenewIntoACollectedNumber(t *testing.T) {
	shortRetention(t, 300*time.Millisecond)
	ctx := context.Background()
	b, _ := bucket(t)
	held, err := Renew(ctx, b, "0", "a", Record{}, t0, term)
	if err != nil {
		t.Fatal(err)
	}
	late := held.Expiry.Add(time.Second)
	if ok, f, err := Fence(ctx, b, "0", late, offset); !ok || err != nil || f.K != 2 {
		t.Fatalf("fence: %v %v %v", ok, f, err)
	}
	var bh Record
	for i := range 20 {
		if bh, err = Renew(ctx, b, "0", "b", bh, late.Add(time.Duration(i)*750*time.Millisecond), term); err != nil {
			t.Fatal(err)
		}
	}
	// The stale view's age is what is under test: real time must pass.
	time.Sleep(retention + 100*time.Millisecond)
	if n, err := Collect(ctx, b, "0", time.Now(), 0); err != nil || n != 22-contract.DefaultFencingLogKeep {
		t.Fatalf("collected %d records, %v; want all but the newest %d", n, err, contract.DefaultFencingLogKeep)
	}
	if ok, _ := b.Exists(ctx, Object("0", 2)); ok {
		t.Fatal("the fence was not collected: the test tests nothing")
	}
	// a resumes and renews its record 1 into number 2.
	rec, err := Renew(ctx, b, "0", "a", held, late.Add(time.Minute), term)
	if !errors.Is(err, ErrFenced) {
		t.Fatalf("the paused incarnation renewed into the collected number: %+v %v, want ErrFenced", rec, err)
	}
	if ok, _ := b.Exists(ctx, Object("0", 2)); ok {
		t.Error("the refused renewal's object stays in the bucket")
	}
	if cur, err := Current(ctx, b, "0"); err != nil || !same(cur, bh) {
		t.Fatalf("newest %v %v, want b's %v", cur, err, bh)
	}
	// b goes on renewing above its own record.
	if _, err := Renew(ctx, b, "0", "b", bh, late.Add(time.Minute), term); err != nil {
		t.Fatalf("b renewing after a's refused renewal: %v", err)
	}
}

// Collection beside a store's keeper, a balancer reading and fencing
// checks, and other collections: every renewal goes on succeeding, every
// read sees the newest record or a newer one, and the history stays
// within the retention's worth of records.
func TestCollectionBesideRenewalsAndReaders(t *testing.T) {
	shortRetention(t, 200*time.Millisecond)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	b, _ := bucket(t)
	k := NewKeeper(b, "0", "a", term, 5*time.Millisecond, offset, nil)
	if _, err := k.Renew(ctx); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	run := func(f func() error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				if err := f(); err != nil && ctx.Err() == nil {
					t.Error(err)
					cancel()
				}
			}
		}()
	}
	var renewals, collected atomic.Int64
	run(func() error {
		_, err := k.Renew(ctx)
		renewals.Add(1)
		time.Sleep(2 * time.Millisecond) // a keeper's pace, not synchronisation
		return err
	})
	var last uint64
	run(func() error {
		cur, err := Current(ctx, b, "0")
		if err == nil && cur.K < last {
			err = errors.New("Current went back")
		}
		last = cur.K
		return err
	})
	for range 2 {
		run(func() error {
			n, err := Collect(ctx, b, "0", time.Now(), 0)
			collected.Add(int64(n))
			time.Sleep(10 * time.Millisecond) // a collector's pace, not synchronisation
			return err
		})
	}
	run(func() error {
		ok, rec, err := Fence(ctx, b, "0", time.Now(), offset)
		if ok {
			err = errors.Join(err, errors.New("a renewing store was fenced: "+rec.String()))
		}
		return err
	})
	// Until the history has been collected many times over beside them.
	deadline := time.Now().Add(30 * time.Second)
	for renewals.Load() < 300 || collected.Load() < 200 {
		if time.Now().After(deadline) {
			t.Fatalf("after 30 s: %d renewals, %d records collected", renewals.Load(), collected.Load())
		}
		time.Sleep(10 * time.Millisecond) // polling interval
	}
	cancel()
	wg.Wait()
	held := k.Held()
	if cur, err := Current(context.Background(), b, "0"); err != nil || !same(cur, held) {
		t.Fatalf("newest %v %v, want the keeper's %v", cur, err, held)
	}
	got := kept(t, b, "0")
	if len(got) > 200 || got[len(got)-1] != held.K {
		t.Fatalf("after %d renewals the bucket keeps records %d to %d (%d of them)", renewals.Load(), got[0], got[len(got)-1], len(got))
	}
	t.Logf("%d renewals; %d records kept", renewals.Load(), len(got))
}
