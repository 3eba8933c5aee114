package regionmap

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/bellows-kv/bellows/internal/contract"
)

// The lease passes only when its term plus the clock offset is over; the
// holder renews at will; collection keeps the history short.
func TestTheBalancerLeaseHasOneHolderPerTerm(t *testing.T) {
	ctx := context.Background()
	b := bucket(t)
	t0 := time.Unix(1_000_000, 0)
	const term, offset = 10 * time.Second, 500 * time.Millisecond
	l, ok, err := AcquireLease(ctx, b, "a", t0, term, offset)
	if err != nil || !ok || l.Holder != "a" || l.N != 1 {
		t.Fatalf("first acquire: %+v %v %v", l, ok, err)
	}
	if l, ok, _ := AcquireLease(ctx, b, "b", t0.Add(term), term, offset); ok || l.Holder != "a" {
		t.Fatalf("b at the expiry (within the offset) got %+v %v", l, ok)
	}
	if l, ok, _ := AcquireLease(ctx, b, "a", t0.Add(5*time.Second), term, offset); !ok || l.N != 2 || !l.Expiry.Equal(t0.Add(15*time.Second)) {
		t.Fatalf("a renewing: %+v %v", l, ok)
	}
	if _, ok, _ := AcquireLease(ctx, b, "b", t0.Add(15*time.Second+offset), term, offset); ok {
		t.Fatal("b took the lease at expiry + offset exactly")
	}
	l, ok, err = AcquireLease(ctx, b, "b", t0.Add(16*time.Second), term, offset)
	if err != nil || !ok || l.Holder != "b" || l.N != 3 {
		t.Fatalf("b after expiry + offset: %+v %v %v", l, ok, err)
	}
	for i := range 20 {
		if _, ok, err := AcquireLease(ctx, b, "b", t0.Add(time.Duration(17+i)*time.Second), term, offset); !ok || err != nil {
			t.Fatal(ok, err)
		}
	}
	if n, err := CollectLeaseTerms(ctx, b, time.Now().Add(time.Minute), offset); err != nil || n != 23-contract.DefaultFencingLogKeep {
		t.Errorf("collection a minute on deleted %d terms, %v; want all but the newest %d", n, err, contract.DefaultFencingLogKeep)
	}
	if got := numbers(t, b, leasePrefix); len(got) != contract.DefaultFencingLogKeep || got[len(got)-1] != 23 {
		t.Errorf("terms kept: %v, want the newest %d", got, contract.DefaultFencingLogKeep)
	}
	if l, ok, err := AcquireLease(ctx, b, "b", t0.Add(40*time.Second), term, offset); err != nil || !ok || l.N != 24 {
		t.Fatalf("renewing after the collection: %+v %v %v", l, ok, err)
	}
}

// Contenders racing for an expired lease: exactly one wins each term.
func TestContendersForTheLeaseGetOneWinner(t *testing.T) {
	ctx := context.Background()
	b := bucket(t)
	now := time.Unix(2_000_000, 0)
	for round := range 5 {
		var wg sync.WaitGroup
		var mu sync.Mutex
		winners := map[string]bool{}
		for _, h := range []string{"a", "b", "c", "d"} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, ok, err := AcquireLease(ctx, b, h, now, time.Second, 0)
				if err != nil {
					t.Error(err)
				}
				if ok {
					mu.Lock()
					winners[h] = true
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		if len(winners) != 1 {
			t.Fatalf("round %d: winners %v, want exactly one", round, winners)
		}
		now = now.Add(2 * time.Second) // the term is over: the next round is open
	}
}
