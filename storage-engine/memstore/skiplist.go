package memstore

// Invariants of the skiplist:
//   - Every level is sorted by kv.Compare (node prefixes first), and level
//     i+1 is a subsequence of level i: a node is linked bottom up, level 0
//     first, so a reader that finds it at any level finds it at level 0.
//   - A node's key, value and height never change once it is linked, and no
//     node is ever unlinked: a pointer a reader loaded stays valid and its
//     successors only grow.
//   - Skiplist.height only grows, and is at least the height of every node
//     linked; the head has a tower of maxHeight.
//   - bytes and count include a node only after it is linked at every level.

import (
	"math/rand/v2"
	"sync"
	"sync/atomic"

	"github.com/bellows-kv/bellows/storage-engine/kv"
)

const (
	maxHeight = 20
	// pBranch is 1/4: each level holds a quarter of the one below, as in
	// LevelDB, which balances search cost and tower memory.
	pBranchBits = 2
	// nodeOverhead approximates a node's fixed cost (struct, slice headers,
	// tower pointers) for memory accounting.
	nodeOverhead = 112
)

// inlineHeight levels of a node's tower live in the node itself: with
// pBranch = 1/4 over 99% of nodes need no other allocation, and a search
// step touches one cache line instead of three (node, tower, key).
const inlineHeight = 4

type node struct {
	// prefix is the first 8 bytes of the user key, big-endian, zero-padded:
	// most comparisons are decided by it without touching the key bytes.
	prefix uint64
	key    kv.InternalKey
	value  []byte
	loc    loc // of key then value in the arena; flattening indexes it
	tower  [inlineHeight]atomic.Pointer[node]
	upper  []atomic.Pointer[node] // levels ≥ inlineHeight
}

func (n *node) next(level int) *atomic.Pointer[node] {
	if level < inlineHeight {
		return &n.tower[level]
	}
	return &n.upper[level-inlineHeight]
}

func keyPrefix(k []byte) uint64 {
	var p uint64
	for i := 0; i < 8; i++ {
		p <<= 8
		if i < len(k) {
			p |= uint64(k[i])
		}
	}
	return p
}

// compareNode orders n against key (whose prefix is kp) like kv.Compare.
// Padded big-endian prefixes order like the keys they come from whenever
// they differ, so only equal prefixes need the full comparison.
func compareNode(n *node, key kv.InternalKey, kp uint64) int {
	if n.prefix != kp {
		if n.prefix < kp {
			return -1
		}
		return 1
	}
	return kv.Compare(n.key, key)
}

// Skiplist is a lock-free, insert-only concurrent skiplist: inserts link a
// node level by level with compare-and-swap, retrying only the level that
// raced; readers follow atomic pointers and never lock.
//
// It is the active segment of a Memstore, and the whole memstore under
// policy None.
type Skiplist struct {
	arena  *arena
	head   *node
	height atomic.Int32
	bytes  atomic.Int64
	count  atomic.Int64
	minTS  atomic.Uint64 // of every version added; ^0 while empty
	maxTS  atomic.Uint64
	// writers are the commits that chose this segment and have not added
	// their versions yet (BeginWrite/EndWrite): a segment is flattened or
	// flushed only after they finish.
	writers sync.WaitGroup
}

var _ segment = (*Skiplist)(nil)

// NewSkiplist returns an empty skiplist.
func NewSkiplist() *Skiplist {
	s := &Skiplist{arena: newArena(), head: &node{upper: make([]atomic.Pointer[node], maxHeight-inlineHeight)}}
	s.height.Store(1)
	s.minTS.Store(^uint64(0))
	return s
}

// BeginWrite registers a commit that will add to s. The region calls it
// under its commit lock, in the same critical section that assigns the
// commit's timestamp and chooses s as the active segment: so every version
// of a segment that is no longer active was registered before the switch,
// and waiting for the writers (WaitWriters) waits for all of them.
func (s *Skiplist) BeginWrite() { s.writers.Add(1) }

// EndWrite marks a registered commit's versions added (or abandoned).
func (s *Skiplist) EndWrite() { s.writers.Done() }

// WaitWriters waits for every registered commit.
func (s *Skiplist) WaitWriters() { s.writers.Wait() }

func randomHeight() int {
	h := 1
	r := rand.Uint64()
	for h < maxHeight && r&(1<<pBranchBits-1) == 0 {
		h++
		r >>= pBranchBits
	}
	return h
}

// Add implements Memstore.
func (s *Skiplist) Add(key kv.InternalKey, value []byte) {
	h := randomHeight()
	buf, at := s.arena.alloc(len(key.UserKey) + len(value))
	copy(buf, key.UserKey)
	copy(buf[len(key.UserKey):], value)
	nk := len(key.UserKey)
	n := &node{
		prefix: keyPrefix(key.UserKey),
		key:    kv.InternalKey{UserKey: buf[:nk:nk], TS: key.TS, Kind: key.Kind},
		value:  buf[nk:],
		loc:    at,
	}
	if h > inlineHeight {
		n.upper = make([]atomic.Pointer[node], h-inlineHeight)
	}
	for {
		cur := s.height.Load()
		if int32(h) <= cur || s.height.CompareAndSwap(cur, int32(h)) {
			break
		}
	}
	var prev, next [maxHeight]*node
	x := s.head
	for level := int(s.height.Load()) - 1; level >= 0; level-- {
		x, next[level] = findSplice(n.key, n.prefix, level, x)
		prev[level] = x
	}
	for level := 0; level < h; level++ {
		for {
			n.next(level).Store(next[level])
			if prev[level].next(level).CompareAndSwap(next[level], n) {
				break
			}
			// Someone linked a node between prev and next at this level;
			// search again from prev, which still precedes key.
			prev[level], next[level] = findSplice(n.key, n.prefix, level, prev[level])
		}
	}
	s.bytes.Add(int64(len(buf) + nodeOverhead + 8*len(n.upper)))
	s.count.Add(1)
	for cur := s.minTS.Load(); key.TS < cur && !s.minTS.CompareAndSwap(cur, key.TS); cur = s.minTS.Load() {
	}
	for cur := s.maxTS.Load(); key.TS > cur && !s.maxTS.CompareAndSwap(cur, key.TS); cur = s.maxTS.Load() {
	}
}

// findSplice walks level from start and returns the last node < key and its
// successor at that level.
func findSplice(key kv.InternalKey, kp uint64, level int, start *node) (prev, next *node) {
	x := start
	for {
		nx := x.next(level).Load()
		if nx == nil || compareNode(nx, key, kp) >= 0 {
			return x, nx
		}
		x = nx
	}
}

// seekGE returns the first node ≥ key, or nil.
func (s *Skiplist) seekGE(key kv.InternalKey) *node {
	x := s.head
	var next *node
	kp := keyPrefix(key.UserKey)
	for level := int(s.height.Load()) - 1; level >= 0; level-- {
		x, next = findSplice(key, kp, level, x)
	}
	return next
}

// seekLT returns the last node < key, or nil. Nodes have no back links
// (a lock-free list keeps one direction only), so every step backwards is
// a search from the top, as in LevelDB's memtable (FindLessThan): O(log n)
// a step where forward steps are O(1).
func (s *Skiplist) seekLT(key kv.InternalKey) *node {
	x := s.head
	kp := keyPrefix(key.UserKey)
	for level := int(s.height.Load()) - 1; level >= 0; level-- {
		x, _ = findSplice(key, kp, level, x)
	}
	if x == s.head {
		return nil
	}
	return x
}

// last returns the last node, or nil.
func (s *Skiplist) last() *node {
	x := s.head
	for level := int(s.height.Load()) - 1; level >= 0; level-- {
		for nx := x.next(level).Load(); nx != nil; nx = x.next(level).Load() {
			x = nx
		}
	}
	if x == s.head {
		return nil
	}
	return x
}

// Get returns the newest version of userKey with timestamp ≤ readTS.
func (s *Skiplist) Get(userKey []byte, readTS uint64) ([]byte, kv.Kind, bool) {
	val, k, _, ok := s.GetVersion(userKey, readTS)
	return val, k, ok
}

// GetVersion is Get that also returns the version's timestamp.
func (s *Skiplist) GetVersion(userKey []byte, readTS uint64) ([]byte, kv.Kind, uint64, bool) {
	n := s.seekGE(kv.MakeSearchKey(userKey, readTS))
	if n == nil || string(n.key.UserKey) != string(userKey) {
		return nil, 0, 0, false
	}
	return n.value, n.key.Kind, n.key.TS, true
}

// ApproximateBytes is the memory s accounts for: key and value bytes plus
// each node's fixed cost.
func (s *Skiplist) ApproximateBytes() int64 { return s.bytes.Load() }

// Len is the number of versions held.
func (s *Skiplist) Len() int64 { return s.count.Load() }

func (s *Skiplist) tsRange() (uint64, uint64) { return s.minTS.Load(), s.maxTS.Load() }
