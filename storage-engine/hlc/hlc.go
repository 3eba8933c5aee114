// Package hlc is a store's clock: a hybrid logical clock (Kulkarni et al.,
// as CockroachDB uses it) whose timestamps are nanoseconds since the epoch.
// See docs/clock.md for why Bellows uses one instead of a timestamp oracle.
//
// # Invariants
//
//   - Now is strictly increasing across calls, and above every timestamp
//     Update accepted: a timestamp issued after the clock learned of ts is
//     above ts.
//   - Now is at least the physical clock. It runs ahead of it only by what
//     Update accepted (at most MaxOffset), what Forward was given (a
//     timestamp this store's regions already issued, from what Update
//     accepted elsewhere) and one nanosecond per timestamp issued within a
//     nanosecond: the logical component is folded into the low
//     nanoseconds, so timestamps stay comparable with wall time.
//   - Every version a store holds is at or below its clock (Forward): a
//     transaction that observed the clock at R may take every version above
//     R for one written after it began (docs/clock.md, observed clocks).
//   - Update refuses a timestamp more than MaxOffset ahead of the physical
//     clock: no clock within the bound issued it, and following it would
//     carry one bad clock to every store.
package hlc

import (
	"fmt"
	"sync/atomic"
	"time"
)

// Clock is safe for concurrent use.
type Clock struct {
	physical  func() time.Time
	maxOffset time.Duration
	last      atomic.Uint64
}

// New returns a clock reading physical (nil: time.Now) whose peers' clocks
// are assumed within maxOffset of it.
func New(physical func() time.Time, maxOffset time.Duration) *Clock {
	if physical == nil {
		physical = time.Now
	}
	return &Clock{physical: physical, maxOffset: maxOffset}
}

// Offset is a physical clock moved by d: what the test-only
// --test-clock-offset gives a store.
func Offset(d time.Duration) func() time.Time {
	return func() time.Time { return time.Now().Add(d) }
}

// MaxOffset is the bound this clock assumes between any two stores' clocks.
func (c *Clock) MaxOffset() time.Duration { return c.maxOffset }

// Physical is the physical clock's reading.
func (c *Clock) Physical() time.Time { return c.physical() }

// Now returns a new timestamp.
func (c *Clock) Now() uint64 {
	phys := uint64(c.physical().UnixNano())
	for {
		last := c.last.Load()
		ts := max(phys, last+1)
		if c.last.CompareAndSwap(last, ts) {
			return ts
		}
	}
}

// Last is the newest timestamp the clock issued or accepted.
func (c *Clock) Last() uint64 { return c.last.Load() }

// Update observes ts, issued or read elsewhere: later timestamps are above
// it. A ts more than MaxOffset ahead of the physical clock is refused with
// an *AheadError and not observed.
func (c *Clock) Update(ts uint64) error {
	if c.maxOffset > 0 {
		phys := c.physical()
		if limit := uint64(phys.Add(c.maxOffset).UnixNano()); ts > limit {
			return &AheadError{TS: ts, Physical: phys, MaxOffset: c.maxOffset}
		}
	}
	c.Forward(ts)
	return nil
}

// Forward moves the clock to ts if it is behind: a region gave a version
// timestamp ts (a commit timestamp decided by another store's prepare, or
// one past its own last) that the clock has not issued. Unlike Update it
// never refuses: the version exists, and a clock reading below it would
// tell a transaction that observed it that the version came after it.
func (c *Clock) Forward(ts uint64) {
	for {
		last := c.last.Load()
		if ts <= last || c.last.CompareAndSwap(last, ts) {
			return
		}
	}
}

// WaitPast returns once the physical clock has passed ts (or ctxDone
// closes, returning false): what a region opening from another process's
// manifest waits for, so it issues no timestamp below a read its previous
// owner may have served.
func (c *Clock) WaitPast(ts uint64, ctxDone <-chan struct{}) bool {
	for {
		phys := uint64(c.physical().UnixNano())
		if phys > ts {
			return true
		}
		t := time.NewTimer(time.Duration(ts - phys + 1))
		select {
		case <-ctxDone:
			t.Stop()
			return false
		case <-t.C:
		}
	}
}

// AheadError is a timestamp too far ahead of this clock to have come from
// a clock within the offset bound.
type AheadError struct {
	TS        uint64
	Physical  time.Time
	MaxOffset time.Duration
}

func (e *AheadError) Error() string {
	ahead := time.Duration(int64(e.TS) - e.Physical.UnixNano())
	return fmt.Sprintf("timestamp %d is %v ahead of this store's clock, beyond the maximum clock offset %v: a clock in the cluster is off (check NTP/chrony on the nodes)",
		e.TS, ahead.Round(time.Microsecond), e.MaxOffset)
}
