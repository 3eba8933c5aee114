package region

import "testing"

// The lock assertions run in every test of this package.
func init() { checkLocks = true }

// panicText runs f and returns what it panicked with, or "" if it did not.
func panicText(f func()) (msg string) {
	defer func() {
		if p := recover(); p != nil {
			msg = p.(string)
		}
	}()
	f()
	return ""
}

func TestLockOrderViolationPanics(t *testing.T) {
	r := &Region{}
	r.initLocks()
	r.mu.RLock()
	got := panicText(func() { r.commitMu.Lock() })
	r.mu.RUnlock()
	want := "region: lock order violated: goroutine " // then the ID, which varies
	if len(got) < len(want) || got[:len(want)] != want {
		t.Fatalf("commitMu taken under mu: panic %q, want one starting %q", got, want)
	}
	const tail = " takes commitMu while holding [mu] (order: compactMu → manifestMu → commitMu → mu)"
	if len(got) < len(tail) || got[len(got)-len(tail):] != tail {
		t.Fatalf("commitMu taken under mu: panic %q, want one ending %q", got, tail)
	}

	// The documented nestings pass, and TryLock is never an order
	// violation: it cannot wait.
	r.compactMu.Lock()
	r.manifestMu.Lock()
	r.commitMu.Lock()
	r.mu.Lock()
	if held := r.locks.by[goid()]; len(held) != 4 {
		t.Errorf("holding all four locks, recorded %v", held)
	}
	r.mu.Unlock()
	r.commitMu.Unlock()
	r.mu.RLock()
	if got := panicText(func() {
		if !r.commitMu.TryLock() {
			t.Error("TryLock of a free lock failed")
		}
		r.commitMu.Unlock()
	}); got != "" {
		t.Errorf("TryLock of commitMu under mu: panic %q", got)
	}
	r.mu.RUnlock()
	r.manifestMu.Unlock()
	r.compactMu.Unlock()
	if len(r.locks.by) != 0 {
		t.Fatalf("locks still recorded after every unlock: %v", r.locks.by)
	}
}

func TestCheckIOPanicsUnderMu(t *testing.T) {
	r := &Region{}
	r.initLocks()
	if got := panicText(func() { r.checkIO("test") }); got != "" {
		t.Fatalf("checkIO with no lock held panicked: %q", got)
	}
	r.manifestMu.Lock()
	if got := panicText(func() { r.checkIO("test") }); got != "" {
		t.Fatalf("checkIO under manifestMu panicked: %q", got)
	}
	r.manifestMu.Unlock()
	r.mu.RLock()
	got := panicText(func() { r.checkIO("test") })
	r.mu.RUnlock()
	if want := "region: mu is held across I/O: test"; got != want {
		t.Fatalf("checkIO under mu: panic %q, want %q", got, want)
	}
}

func TestLockHandedToAnotherGoroutine(t *testing.T) {
	r := &Region{}
	r.initLocks()
	if !r.compactMu.TryLock() {
		t.Fatal("TryLock of a free lock failed")
	}
	done := make(chan string)
	go func() {
		done <- panicText(func() {
			r.compactMu.handedOver()
			r.manifestMu.Lock() // in order after the adopted compactMu
			if !r.locks.holds(rankCompact) {
				t.Error("the adopting goroutine does not hold compactMu")
			}
			r.manifestMu.Unlock()
			r.compactMu.Unlock()
		})
	}()
	if got := <-done; got != "" {
		t.Fatalf("handed-over lock: %q", got)
	}
	if len(r.locks.by) != 0 {
		t.Fatalf("locks still recorded after the handover: %v", r.locks.by)
	}
}
