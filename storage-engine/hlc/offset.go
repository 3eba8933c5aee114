package hlc

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"
)

// OffsetMonitor decides whether this store's clock is within the bound of
// its peers', from measurements of each peer's offset (the server takes
// them with the Clock RPC). A store refuses to serve while it is not
// (docs/clock.md, rule 5):
//
// its offset from a majority of the peers measured recently is beyond
// Tolerance (80% of the maximum offset) for certain: a measurement can be
// wrong by half its round trip, which is taken off its offset, as
// CockroachDB's clock monitor does. A slow round trip (a loaded machine, a
// peer's queue) then never makes a store refuse; a clock truly off still
// does, as soon as a round trip is quick enough to show it. A store with no peer
// measured (one store, bellows local, every peer down) is within: nothing
// says otherwise, and refusing would make a lone store unavailable.
type OffsetMonitor struct {
	maxOffset time.Duration
	mu        sync.Mutex
	peers     map[string]Measurement
	want      int // peers the store knows of
}

// Measurement is one peer's offset: peer's clock minus ours at the
// midpoint of a round trip of RTT.
type Measurement struct {
	Offset time.Duration
	RTT    time.Duration
	At     time.Time
}

// NewOffsetMonitor returns a monitor of a store's clock against its peers'.
func NewOffsetMonitor(maxOffset time.Duration) *OffsetMonitor {
	return &OffsetMonitor{maxOffset: maxOffset, peers: map[string]Measurement{}}
}

// Tolerance is the offset beyond which a store stops serving.
func (m *OffsetMonitor) Tolerance() time.Duration { return m.maxOffset * 4 / 5 }

// staleAfter: a measurement older than this no longer counts.
func (m *OffsetMonitor) staleAfter() time.Duration { return max(10*time.Second, 10*m.maxOffset) }

// SetPeers says which peers the store knows of (not itself); measurements
// of the others are forgotten.
func (m *OffsetMonitor) SetPeers(peers []string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for p := range m.peers {
		if !slices.Contains(peers, p) {
			delete(m.peers, p)
		}
	}
	m.want = len(peers)
}

// Record stores a measurement of peer.
func (m *OffsetMonitor) Record(peer string, x Measurement) {
	m.mu.Lock()
	m.peers[peer] = x
	m.mu.Unlock()
}

// Forget drops peer's measurement (it stopped answering).
func (m *OffsetMonitor) Forget(peer string) {
	m.mu.Lock()
	delete(m.peers, peer)
	m.mu.Unlock()
}

// Measurements is a copy of the current measurements, by peer.
func (m *OffsetMonitor) Measurements() map[string]Measurement {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make(map[string]Measurement, len(m.peers))
	for p, x := range m.peers {
		out[p] = x
	}
	return out
}

// Check is nil while the store may serve, and otherwise an *OffsetError
// that says why not.
func (m *OffsetMonitor) Check(now time.Time) error {
	if m.maxOffset <= 0 {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.want == 0 {
		return nil
	}
	var fresh, beyond []string
	var offsets []time.Duration
	for p, x := range m.peers {
		if now.Sub(x.At) > m.staleAfter() {
			continue
		}
		fresh = append(fresh, p)
		if x.Offset.Abs()-x.RTT/2 > m.Tolerance() {
			sign := "+"
			if x.Offset < 0 {
				sign = ""
			}
			beyond = append(beyond, fmt.Sprintf("%s %s%v", p, sign, x.Offset.Round(time.Microsecond)))
			offsets = append(offsets, x.Offset)
		}
	}
	// Beyond a majority of the peers measured: with three stores, the one
	// whose clock is off is beyond both others and stops, while each of the
	// others is beyond one of two and serves. With two, both stop: neither
	// can tell whose clock is wrong.
	if len(beyond) > 0 && 2*len(beyond) > len(fresh) {
		sort.Strings(beyond)
		return &OffsetError{Tolerance: m.Tolerance(), MaxOffset: m.maxOffset, Peers: beyond, Offsets: offsets}
	}
	return nil
}

// OffsetError: the store's clock is (or is not yet known to be within) the
// bound of its peers'.
type OffsetError struct {
	Tolerance time.Duration
	MaxOffset time.Duration
	Peers     []string // "peer offset" of the peers beyond it
	Offsets   []time.Duration
}

func (e *OffsetError) Error() string {
	return fmt.Sprintf("this store's clock is beyond %v (80%% of the maximum clock offset %v) from a majority of its peers (%s): it refuses requests until it is back within; check NTP/chrony on its node",
		e.Tolerance, e.MaxOffset, strings.Join(e.Peers, ", "))
}
