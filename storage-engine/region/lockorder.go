package region

import (
	"bytes"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"sync"
)

// lockRank is a lock's place in the region's lock order (see the package
// documentation): a goroutine takes a region's locks in increasing rank.
type lockRank uint8

const (
	rankCompact  lockRank = 1 + iota // compactMu
	rankManifest                     // manifestMu
	rankCommit                       // commitMu
	rankMu                           // mu, read or write
)

func (k lockRank) String() string {
	switch k {
	case rankCompact:
		return "compactMu"
	case rankManifest:
		return "manifestMu"
	case rankCommit:
		return "commitMu"
	case rankMu:
		return "mu"
	}
	return fmt.Sprintf("lockRank(%d)", uint8(k))
}

// checkLocks turns on the lock assertions: the lock order, and that mu is
// not held where the region does I/O (checkIO). Only this package's tests
// set it (lockorder_test.go). Otherwise nothing is recorded and a lock
// operation costs one predictable branch on this variable.
var checkLocks bool

// heldLocks records which of one region's locks each goroutine holds, while
// checkLocks is set.
type heldLocks struct {
	mu sync.Mutex
	by map[uint64][]lockRank // goroutine ID → ranks, in acquisition order
}

func (h *heldLocks) acquire(k lockRank, try bool) {
	g := goid()
	h.mu.Lock()
	defer h.mu.Unlock()
	held := h.by[g]
	// TryLock never waits, so it cannot deadlock whatever is held.
	if !try && len(held) > 0 && slices.Max(held) >= k {
		panic(fmt.Sprintf("region: lock order violated: goroutine %d takes %v while holding %v (order: compactMu → manifestMu → commitMu → mu)", g, k, held))
	}
	if h.by == nil {
		h.by = map[uint64][]lockRank{}
	}
	h.by[g] = append(held, k)
}

// release forgets k for the calling goroutine or, when another goroutine
// took it (a lock handed from one goroutine to another), for that one.
func (h *heldLocks) release(k lockRank) {
	g := goid()
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.drop(g, k) {
		return
	}
	for other := range h.by {
		if h.drop(other, k) {
			return
		}
	}
	panic(fmt.Sprintf("region: goroutine %d releases %v, which no goroutine holds", g, k))
}

func (h *heldLocks) drop(g uint64, k lockRank) bool {
	held := h.by[g]
	i := slices.Index(held, k)
	if i < 0 {
		return false
	}
	if held = slices.Delete(held, i, i+1); len(held) == 0 {
		delete(h.by, g)
	} else {
		h.by[g] = held
	}
	return true
}

// adopt moves k to the calling goroutine: it continues the work of the
// goroutine that took the lock and will release it.
func (h *heldLocks) adopt(k lockRank) {
	h.mu.Lock()
	for other := range h.by {
		if h.drop(other, k) {
			break
		}
	}
	h.mu.Unlock()
	h.acquire(k, true)
}

func (h *heldLocks) holds(k lockRank) bool {
	g := goid()
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Contains(h.by[g], k)
}

// goid is the calling goroutine's ID, from its stack header ("goroutine N
// [...]"): slow, and only for the checks.
func goid() uint64 {
	var buf [64]byte
	b := bytes.TrimPrefix(buf[:runtime.Stack(buf[:], false)], []byte("goroutine "))
	if i := bytes.IndexByte(b, ' '); i >= 0 {
		b = b[:i]
	}
	n, err := strconv.ParseUint(string(b), 10, 64)
	if err != nil {
		panic("region: cannot parse the goroutine ID from the stack header")
	}
	return n
}

// mutex is a sync.Mutex with a place in the lock order.
type mutex struct {
	m    sync.Mutex
	rank lockRank
	held *heldLocks // nil: not checked (a Region not made by Open)
}

func (m *mutex) Lock() {
	if checkLocks && m.held != nil {
		m.held.acquire(m.rank, false)
	}
	m.m.Lock()
}

func (m *mutex) TryLock() bool {
	if !m.m.TryLock() {
		return false
	}
	if checkLocks && m.held != nil {
		m.held.acquire(m.rank, true)
	}
	return true
}

func (m *mutex) Unlock() {
	if checkLocks && m.held != nil {
		m.held.release(m.rank)
	}
	m.m.Unlock()
}

// handedOver is called by a goroutine that continues the work of the one
// that locked m, and will unlock it.
func (m *mutex) handedOver() {
	if checkLocks && m.held != nil {
		m.held.adopt(m.rank)
	}
}

// rwMutex is a sync.RWMutex with a place in the lock order. Read and write
// locks have the same rank: a goroutine never read-locks mu twice (a
// waiting writer would deadlock it).
type rwMutex struct {
	m    sync.RWMutex
	rank lockRank
	held *heldLocks
}

func (m *rwMutex) Lock() {
	if checkLocks && m.held != nil {
		m.held.acquire(m.rank, false)
	}
	m.m.Lock()
}

func (m *rwMutex) Unlock() {
	if checkLocks && m.held != nil {
		m.held.release(m.rank)
	}
	m.m.Unlock()
}

func (m *rwMutex) RLock() {
	if checkLocks && m.held != nil {
		m.held.acquire(m.rank, false)
	}
	m.m.RLock()
}

func (m *rwMutex) RUnlock() {
	if checkLocks && m.held != nil {
		m.held.release(m.rank)
	}
	m.m.RUnlock()
}

// initLocks gives the region's locks their ranks.
func (r *Region) initLocks() {
	r.compactMu = mutex{rank: rankCompact, held: &r.locks}
	r.manifestMu = mutex{rank: rankManifest, held: &r.locks}
	r.commitMu = mutex{rank: rankCommit, held: &r.locks}
	r.mu = rwMutex{rank: rankMu, held: &r.locks}
}

// checkIO marks a place where the calling goroutine does I/O (a bucket
// call, closing or deleting a file): with checks on, it panics if the
// goroutine holds mu, which readers and writers take on every request.
func (r *Region) checkIO(what string) {
	if checkLocks && r.mu.held != nil && r.locks.holds(rankMu) {
		panic("region: mu is held across I/O: " + what)
	}
}
