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
	a := NewOffsetMonitor(bound)
	a.SetPeers([]string{"b", "c"})
	a.Record("b", ok)
	a.Record("c", off)
	if err := a.Check(now); err != nil {
		t.Fatalf("A, off from one of two peers: %v, want it to serve", err)
	}
	// C sees both off: it stops, and says by how much.
	c := NewOffsetMonitor(bound)
	c.SetPeers([]string{"a", "b"})
	c.Record("a", off)
	c.Record("b", off)
	err := c.Check(now)
	var oe *OffsetError
	if !errors.As(err, &oe) {
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

func TestOnlyAnOffsetBeyondTheToleranceForCertainRefuses(t *testing.T) {
	start := time.Unix(1000, 0)
	now := start.Add(time.Minute)
	m := NewOffsetMonitor(250 * time.Millisecond)
	m.SetPeers([]string{"b"})
	// 470ms off with a 950ms round trip (a loaded machine): the peer's
	// clock may have been read anywhere in it, so it may be right.
	m.Record("b", Measurement{Offset: 470 * time.Millisecond, RTT: 950 * time.Millisecond, At: now})
	if err := m.Check(now); err != nil {
		t.Fatalf("an offset within its round trip's error: %v, want it to serve", err)
	}
	// 300ms off with a 120ms round trip: at least 240ms off, beyond 200ms.
	m.Record("b", Measurement{Offset: 300 * time.Millisecond, RTT: 120 * time.Millisecond, At: now})
	if err := m.Check(now); err == nil {
		t.Fatal("an offset beyond the tolerance even after its round trip's error was accepted")
	}
}

func TestWithNothingMeasuredAStoreServes(t *testing.T) {
	start := time.Unix(1000, 0)
	m := NewOffsetMonitor(250 * time.Millisecond)
	m.SetPeers([]string{"b", "c"})
	if err := m.Check(start); err != nil {
		t.Fatalf("no peer measured (all down): %v, want it to serve", err)
	}
	// A measurement too old no longer counts against it.
	m.Record("b", Measurement{Offset: time.Second, At: start})
	m.Record("c", Measurement{Offset: time.Second, At: start})
	if err := m.Check(start.Add(time.Second)); err == nil {
		t.Fatal("both peers a second off, measured a second ago: want a refusal")
	}
	if err := m.Check(start.Add(time.Hour)); err != nil {
		t.Fatalf("the same measurements an hour old: %v, want it to serve", err)
	}
	// A peer no longer listed is forgotten.
	m.Record("b", Measurement{Offset: time.Second, At: start.Add(time.Hour)})
	m.SetPeers([]string{"c"})
	if err := m.Check(start.Add(time.Hour)); err != nil {
		t.Fatalf("the only off peer left the cluster: %v", err)
	}
}
