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
//   - beyond: its offset from a majority of the peers measured recently is
//     beyond Tolerance (80% of the maximum offset; a measurement can be
//     wrong by half its round trip, which is added to its offset);
//   - unchecked: since it started, it has not yet measured a majority of
//     its peers, and StartGrace has not passed (peers that do not answer
//     cannot be waited for forever, but a store started on a bad clock must
//     not hand out timestamps while its peers are about to answer).
//
// A store with no peers (one store, bellows local) is always within.
type OffsetMonitor struct {
	maxOffset time.Duration
	started   time.Time
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

// NewOffsetMonitor returns a monitor for a store started at started.
func NewOffsetMonitor(maxOffset time.Duration, started time.Time) *OffsetMonitor {
	return &OffsetMonitor{maxOffset: maxOffset, started: started, peers: map[string]Measurement{}}
}

// Tolerance is the offset beyond which a store stops serving.
func (m *OffsetMonitor) Tolerance() time.Duration { return m.maxOffset * 4 / 5 }

// StartGrace is how long a store that has measured no majority of its
// peers waits before serving anyway.
func (m *OffsetMonitor) StartGrace() time.Duration { return 10 * m.maxOffset }

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
		worst := x.Offset.Abs() + x.RTT/2
		if worst > m.Tolerance() {
			beyond = append(beyond, fmt.Sprintf("%s %+v", p, x.Offset.Round(time.Microsecond)))
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
	if (len(fresh) == 0 || 2*len(fresh) < m.want) && now.Sub(m.started) < m.StartGrace() {
		return &OffsetError{Unchecked: true, Tolerance: m.Tolerance(), MaxOffset: m.maxOffset}
	}
	return nil
}

// OffsetError: the store's clock is (or is not yet known to be within) the
// bound of its peers'.
type OffsetError struct {
	Unchecked bool
	Tolerance time.Duration
	MaxOffset time.Duration
	Peers     []string // "peer offset" of the peers beyond it
	Offsets   []time.Duration
}

func (e *OffsetError) Error() string {
	if e.Unchecked {
		return fmt.Sprintf("this store has not yet measured its clock against a majority of its peers (maximum clock offset %v): it serves once it has", e.MaxOffset)
	}
	return fmt.Sprintf("this store's clock is beyond %v (80%% of the maximum clock offset %v) from a majority of its peers (%s): it refuses requests until it is back within; check NTP/chrony on its node",
		e.Tolerance, e.MaxOffset, strings.Join(e.Peers, ", "))
}
