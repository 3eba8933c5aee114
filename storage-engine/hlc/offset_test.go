package hlc

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestTheStoreOffFromAMajorityStopsAndTheOthersServe(t *testing.T) {
	start := time.Unix(1000, 0)
	now := start.Add(time.Minute)
	const bound = 250 * time.Millisecond
	ok := Measurement{Offset: 5 * time.Millisecond, RTT: time.Millisecond, At: now}
	off := Measurement{Offset: -300 * time.Millisecond, RTT: time.Millisecond, At: now}

	// Three stores, C 300ms ahead. A sees B fine and C off: it serves.
	a := NewOffsetMonitor(bound, start)
	a.SetPeers([]string{"b", "c"})
	a.Record("b", ok)
	a.Record("c", off)
	if err := a.Check(now); err != nil {
		t.Fatalf("A, off from one of two peers: %v, want it to serve", err)
	}
	// C sees both off: it stops, and says by how much.
	c := NewOffsetMonitor(bound, start)
	c.SetPeers([]string{"a", "b"})
	c.Record("a", off)
	c.Record("b", off)
	err := c.Check(now)
	var oe *OffsetError
	if !errors.As(err, &oe) || oe.Unchecked {
		t.Fatalf("C, off from both peers: %v, want an *OffsetError", err)
	}
	for _, want := range []string{"a -300ms", "b -300ms", "beyond 200ms (80% of the maximum clock offset 250ms)"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("message %q does not say %q", err, want)
		}
	}
	// Back within: it serves again.
	c.Record("a", ok)
	c.Record("b", ok)
	if err := c.Check(now); err != nil {
		t.Fatalf("C back within the bound: %v", err)
	}
}

func TestHalfTheRoundTripCountsAgainstTheOffset(t *testing.T) {
	start := time.Unix(1000, 0)
	now := start.Add(time.Minute)
	m := NewOffsetMonitor(250*time.Millisecond, start)
	m.SetPeers([]string{"b"})
	// 150ms off with a 120ms round trip: it may be 210ms off, beyond 200ms.
	m.Record("b", Measurement{Offset: 150 * time.Millisecond, RTT: 120 * time.Millisecond, At: now})
	if err := m.Check(now); err == nil {
		t.Fatal("an offset that may be beyond the tolerance was accepted")
	}
}

func TestAStoreDoesNotServeUntilItHasMeasuredItsPeers(t *testing.T) {
	start := time.Unix(1000, 0)
	m := NewOffsetMonitor(250*time.Millisecond, start)
	m.SetPeers([]string{"b", "c"})
	err := m.Check(start.Add(time.Second))
	var oe *OffsetError
	if !errors.As(err, &oe) || !oe.Unchecked {
		t.Fatalf("no measurement yet: %v, want an unchecked *OffsetError", err)
	}
	m.Record("b", Measurement{At: start.Add(time.Second)})
	if err := m.Check(start.Add(time.Second)); err != nil {
		t.Fatalf("one of two peers measured fine: %v", err)
	}
	// Peers that never answer are not waited for past the grace; stale
	// measurements stop counting.
	if err := m.Check(start.Add(m.StartGrace() + time.Minute)); err != nil {
		t.Fatalf("past the start grace with only stale measurements: %v", err)
	}
	alone := NewOffsetMonitor(250*time.Millisecond, start)
	if err := alone.Check(start); err != nil {
		t.Fatalf("a store without peers: %v", err)
	}
}
