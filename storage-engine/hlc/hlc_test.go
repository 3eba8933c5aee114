package hlc

import (
	"errors"
	"strings"
	"sync"
	"testing"
	"time"
)

// fixed is a physical clock a test moves by hand.
type fixed struct {
	mu sync.Mutex
	t  time.Time
}

func (f *fixed) now() time.Time { f.mu.Lock(); defer f.mu.Unlock(); return f.t }
func (f *fixed) add(d time.Duration) {
	f.mu.Lock()
	f.t = f.t.Add(d)
	f.mu.Unlock()
}

func TestNowIsIncreasingAndFollowsThePhysicalClock(t *testing.T) {
	f := &fixed{t: time.Unix(1000, 0)}
	c := New(f.now, 250*time.Millisecond)
	a, b := c.Now(), c.Now()
	if a != uint64(f.t.UnixNano()) || b != a+1 {
		t.Fatalf("two timestamps within one nanosecond: %d, %d; want the physical clock, then one more", a, b)
	}
	f.add(time.Second)
	if got := c.Now(); got != uint64(f.now().UnixNano()) {
		t.Fatalf("after the physical clock moved on, Now = %d, want %d", got, f.now().UnixNano())
	}
	// A physical clock that steps back does not take timestamps back.
	before := c.Now()
	f.add(-time.Second)
	if got := c.Now(); got <= before {
		t.Fatalf("Now went back with the physical clock: %d after %d", got, before)
	}
}

func TestUpdateMovesTheClockWithinTheBoundAndRefusesBeyondIt(t *testing.T) {
	f := &fixed{t: time.Unix(1000, 0)}
	c := New(f.now, 250*time.Millisecond)
	ahead := uint64(f.t.Add(200 * time.Millisecond).UnixNano())
	if err := c.Update(ahead); err != nil {
		t.Fatal(err)
	}
	if got := c.Now(); got <= ahead {
		t.Fatalf("Now = %d after observing %d: a timestamp issued after must be above", got, ahead)
	}
	far := uint64(f.t.Add(300 * time.Millisecond).UnixNano())
	err := c.Update(far)
	var ae *AheadError
	if !errors.As(err, &ae) {
		t.Fatalf("Update 300ms ahead with a 250ms bound: %v, want an *AheadError", err)
	}
	if c.Last() >= far {
		t.Fatalf("a refused timestamp was observed: last %d", c.Last())
	}
	if want := "300ms ahead of this store's clock, beyond the maximum clock offset 250ms"; !strings.Contains(err.Error(), want) {
		t.Fatalf("message %q does not say %q", err, want)
	}
}

// Forward follows a timestamp a region already issued, wherever it is:
// the clock must not read below a version the store holds, even one past
// the bound Update guards; and it never moves the clock back.
func TestForwardFollowsWhatTheStoreIssued(t *testing.T) {
	f := &fixed{t: time.Unix(1000, 0)}
	c := New(f.now, 250*time.Millisecond)
	ahead := uint64(f.t.Add(time.Second).UnixNano())
	if err := c.Update(ahead); err == nil {
		t.Fatal("Update accepted a timestamp a second ahead with a 250ms bound")
	}
	c.Forward(ahead)
	if now := c.Now(); now != ahead+1 {
		t.Fatalf("after Forward(%d): Now %d, want %d", ahead, now, ahead+1)
	}
	c.Forward(ahead - 5)
	if now := c.Now(); now != ahead+2 {
		t.Fatalf("Forward to an older timestamp moved the clock: Now %d, want %d", now, ahead+2)
	}
}

func TestConcurrentNowIsUnique(t *testing.T) {
	c := New(nil, time.Second)
	const n, each = 8, 10000
	out := make(chan uint64, n*each)
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				out <- c.Now()
			}
		}()
	}
	wg.Wait()
	close(out)
	seen := map[uint64]bool{}
	for ts := range out {
		if seen[ts] {
			t.Fatalf("timestamp %d issued twice", ts)
		}
		seen[ts] = true
	}
}

func TestWaitPastWaitsForThePhysicalClock(t *testing.T) {
	c := New(nil, time.Second)
	target := uint64(time.Now().Add(30 * time.Millisecond).UnixNano())
	if !c.WaitPast(target, nil) {
		t.Fatal("WaitPast gave up without a done channel")
	}
	if now := uint64(time.Now().UnixNano()); now <= target {
		t.Fatalf("WaitPast returned at %d, before %d", now, target)
	}
	done := make(chan struct{})
	close(done)
	if c.WaitPast(uint64(time.Now().Add(time.Hour).UnixNano()), done) {
		t.Fatal("WaitPast an hour ahead returned true with done closed")
	}
}
