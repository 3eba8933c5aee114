package memstore

import (
	"math/rand/v2"
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
	nodeOverhead = 64
)

type node struct {
	key   kv.InternalKey
	value []byte
	// tower[i] is the successor at level i; len(tower) is the node's height.
	tower []atomic.Pointer[node]
}

// Skiplist is a lock-free, insert-only concurrent skiplist: inserts link a
// node level by level with compare-and-swap, retrying only the level that
// raced; readers follow atomic pointers and never lock.
type Skiplist struct {
	head   *node
	height atomic.Int32
	bytes  atomic.Int64
	count  atomic.Int64
}

var _ Memstore = (*Skiplist)(nil)

// NewSkiplist returns an empty skiplist memstore.
func NewSkiplist() *Skiplist {
	s := &Skiplist{head: &node{tower: make([]atomic.Pointer[node], maxHeight)}}
	s.height.Store(1)
	return s
}

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
	// One allocation for key and value bytes keeps nodes compact.
	buf := make([]byte, len(key.UserKey)+len(value))
	copy(buf, key.UserKey)
	copy(buf[len(key.UserKey):], value)
	nk := len(key.UserKey)
	n := &node{
		key:   kv.InternalKey{UserKey: buf[:nk:nk], TS: key.TS, Kind: key.Kind},
		value: buf[nk:],
		tower: make([]atomic.Pointer[node], h),
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
		x, next[level] = findSplice(n.key, level, x)
		prev[level] = x
	}
	for level := 0; level < h; level++ {
		for {
			n.tower[level].Store(next[level])
			if prev[level].tower[level].CompareAndSwap(next[level], n) {
				break
			}
			// Someone linked a node between prev and next at this level;
			// search again from prev, which still precedes key.
			prev[level], next[level] = findSplice(n.key, level, prev[level])
		}
	}
	s.bytes.Add(int64(len(buf) + nodeOverhead + 8*h))
	s.count.Add(1)
}

// findSplice walks level from start and returns the last node < key and its
// successor at that level.
func findSplice(key kv.InternalKey, level int, start *node) (prev, next *node) {
	x := start
	for {
		nx := x.tower[level].Load()
		if nx == nil || kv.Compare(nx.key, key) >= 0 {
			return x, nx
		}
		x = nx
	}
}

// seekGE returns the first node ≥ key, or nil.
func (s *Skiplist) seekGE(key kv.InternalKey) *node {
	x := s.head
	var next *node
	for level := int(s.height.Load()) - 1; level >= 0; level-- {
		x, next = findSplice(key, level, x)
	}
	return next
}

// Get implements Memstore.
func (s *Skiplist) Get(userKey []byte, readTS uint64) ([]byte, kv.Kind, bool) {
	n := s.seekGE(kv.MakeSearchKey(userKey, readTS))
	if n == nil || string(n.key.UserKey) != string(userKey) {
		return nil, 0, false
	}
	return n.value, n.key.Kind, true
}

// ApproximateBytes implements Memstore.
func (s *Skiplist) ApproximateBytes() int64 { return s.bytes.Load() }

// Len implements Memstore.
func (s *Skiplist) Len() int64 { return s.count.Load() }
