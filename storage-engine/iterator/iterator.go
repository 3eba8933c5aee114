// Package iterator defines the engine's internal-key iterator and the merging
// iterator that combines memstores and SSTs into one ordered stream.
package iterator

import (
	"bytes"
	"container/heap"

	"github.com/bellows-kv/bellows/storage-engine/kv"
)

// Iterator walks internal keys in kv.Compare order, in either direction.
// Key and Value are valid until the next positioning call; callers copy
// what they keep.
//
// Reverse iteration is Pebble's (and LevelDB's) SeekLT/Last/Prev: a reverse
// scan of user keys meets each key's versions oldest first, and the reader
// (region.Iterator) resolves them; nothing below it knows about
// timestamps. Next after Prev and Prev after Next are allowed: the
// iterator moves to the key adjacent to the current one.
type Iterator interface {
	// SeekGE positions at the first key ≥ key.
	SeekGE(key kv.InternalKey) bool
	// SeekLT positions at the last key < key.
	SeekLT(key kv.InternalKey) bool
	First() bool
	Last() bool
	Next() bool
	Prev() bool
	Valid() bool
	Key() kv.InternalKey
	Value() []byte
	// Err reports the error that made the iterator invalid, if any.
	Err() error
	Close() error
}

// Merging yields the union of its children in order. Children hold disjoint
// versions (timestamps are unique per region), so no de-duplication is needed.
// Each heap item caches its child's current key: the heap compares keys far
// more often than children move.
//
// Invariant: moving forward, every child is at its first key > the last key
// returned before the current one (the heap is a min-heap, the current key
// its top); moving backward, at its last key < it (a max-heap). Changing
// direction re-seeks every child around the current key, as Pebble's
// mergingIter does (switchToMinHeap/switchToMaxHeap): keys are unique across
// children, so each lands on the current key's neighbour.
type Merging struct {
	children []Iterator
	items    []mergeItem
	h        mergeHeap
	err      error
	// turn holds the current key while the children are re-seeked around
	// it: their positioning may overwrite the buffer it aliases.
	turn []byte
}

type mergeItem struct {
	it  Iterator
	key kv.InternalKey
}

// NewMerging returns an unpositioned merging iterator over children.
func NewMerging(children ...Iterator) *Merging {
	m := &Merging{children: children, items: make([]mergeItem, len(children))}
	m.h.items = make([]*mergeItem, 0, len(children))
	for i, c := range children {
		m.items[i].it = c
	}
	return m
}

func (m *Merging) rebuild() bool {
	m.h.items = m.h.items[:0]
	for i := range m.items {
		c := &m.items[i]
		if c.it.Valid() {
			c.key = c.it.Key()
			m.h.items = append(m.h.items, c)
		} else if err := c.it.Err(); err != nil {
			m.err = err
			m.h.items = m.h.items[:0]
			return false
		}
	}
	heap.Init(&m.h)
	return m.Valid()
}

func (m *Merging) SeekGE(key kv.InternalKey) bool {
	m.err, m.h.reverse = nil, false
	for _, c := range m.children {
		c.SeekGE(key)
	}
	return m.rebuild()
}

func (m *Merging) SeekLT(key kv.InternalKey) bool {
	m.err, m.h.reverse = nil, true
	for _, c := range m.children {
		c.SeekLT(key)
	}
	return m.rebuild()
}

func (m *Merging) First() bool {
	m.err, m.h.reverse = nil, false
	for _, c := range m.children {
		c.First()
	}
	return m.rebuild()
}

func (m *Merging) Last() bool {
	m.err, m.h.reverse = nil, true
	for _, c := range m.children {
		c.Last()
	}
	return m.rebuild()
}

func (m *Merging) Next() bool {
	if !m.Valid() {
		return false
	}
	if m.h.reverse {
		// Every child is below the current key: move each to its first
		// key above it. The new top is the next key.
		cur := m.current()
		m.h.reverse = false
		for _, c := range m.children {
			if c.SeekGE(cur) && kv.Compare(c.Key(), cur) == 0 {
				c.Next()
			}
		}
		return m.rebuild()
	}
	return m.step(Iterator.Next)
}

func (m *Merging) Prev() bool {
	if !m.Valid() {
		return false
	}
	if !m.h.reverse {
		cur := m.current()
		m.h.reverse = true
		for _, c := range m.children {
			c.SeekLT(cur)
		}
		return m.rebuild()
	}
	return m.step(Iterator.Prev)
}

// current is a copy of the current key that outlives the children's moves.
func (m *Merging) current() kv.InternalKey {
	k := m.Key()
	m.turn = append(m.turn[:0], k.UserKey...)
	k.UserKey = m.turn
	return k
}

// step moves the top child one key in the heap's direction.
func (m *Merging) step(move func(Iterator) bool) bool {
	top := m.h.items[0]
	if move(top.it) {
		top.key = top.it.Key()
		heap.Fix(&m.h, 0)
	} else {
		if err := top.it.Err(); err != nil {
			m.err = err
			m.h.items = m.h.items[:0]
			return false
		}
		heap.Pop(&m.h)
	}
	return m.Valid()
}

func (m *Merging) Valid() bool         { return m.err == nil && len(m.h.items) > 0 }
func (m *Merging) Key() kv.InternalKey { return m.h.items[0].key }
func (m *Merging) Value() []byte       { return m.h.items[0].it.Value() }
func (m *Merging) Err() error          { return m.err }

func (m *Merging) Close() error {
	var first error
	for _, c := range m.children {
		if err := c.Close(); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// mergeHeap is a min-heap of the children's keys, or a max-heap when
// reverse.
type mergeHeap struct {
	items   []*mergeItem
	reverse bool
}

func (h *mergeHeap) Len() int { return len(h.items) }
func (h *mergeHeap) Less(i, j int) bool {
	c := kv.Compare(h.items[i].key, h.items[j].key)
	if h.reverse {
		return c > 0
	}
	return c < 0
}
func (h *mergeHeap) Swap(i, j int) { h.items[i], h.items[j] = h.items[j], h.items[i] }
func (h *mergeHeap) Push(x any)    { h.items = append(h.items, x.(*mergeItem)) }
func (h *mergeHeap) Pop() any {
	n := len(h.items) - 1
	x := h.items[n]
	h.items = h.items[:n]
	return x
}

// Empty is an iterator over nothing.
type Empty struct{}

func (Empty) SeekGE(kv.InternalKey) bool { return false }
func (Empty) SeekLT(kv.InternalKey) bool { return false }
func (Empty) First() bool                { return false }
func (Empty) Last() bool                 { return false }
func (Empty) Next() bool                 { return false }
func (Empty) Prev() bool                 { return false }
func (Empty) Valid() bool                { return false }
func (Empty) Key() kv.InternalKey        { return kv.InternalKey{} }
func (Empty) Value() []byte              { return nil }
func (Empty) Err() error                 { return nil }
func (Empty) Close() error               { return nil }

// Bounded yields the keys of it whose user key is in [start, end) (a nil
// end is unbounded): a region reading files it shares with a sibling by
// reference sees only its own range (docs/regions.md).
func Bounded(it Iterator, start, end []byte) Iterator {
	return &bounded{Iterator: it, start: start, end: end}
}

type bounded struct {
	Iterator
	start, end []byte
	valid      bool
}

// settle and settleBack check only the bound the move went towards: the
// other holds where the move started.
func (b *bounded) settle(ok bool) bool {
	b.valid = ok && (b.end == nil || bytes.Compare(b.Iterator.Key().UserKey, b.end) < 0)
	return b.valid
}

func (b *bounded) settleBack(ok bool) bool {
	b.valid = ok && bytes.Compare(b.Iterator.Key().UserKey, b.start) >= 0
	return b.valid
}

func (b *bounded) SeekGE(key kv.InternalKey) bool {
	if bytes.Compare(key.UserKey, b.start) < 0 {
		key = kv.MakeSearchKey(b.start, kv.MaxTimestamp)
	}
	return b.settle(b.Iterator.SeekGE(key))
}

func (b *bounded) First() bool {
	return b.settle(b.Iterator.SeekGE(kv.MakeSearchKey(b.start, kv.MaxTimestamp)))
}

func (b *bounded) Next() bool { return b.valid && b.settle(b.Iterator.Next()) }

// SeekLT below start is nothing; past end it is Last.
func (b *bounded) SeekLT(key kv.InternalKey) bool {
	if b.end != nil && bytes.Compare(key.UserKey, b.end) >= 0 {
		return b.Last()
	}
	return b.settleBack(b.Iterator.SeekLT(key))
}

// Last is the last version of the last user key below end: the seek key
// is end's smallest internal key.
func (b *bounded) Last() bool {
	if b.end == nil {
		return b.settleBack(b.Iterator.Last())
	}
	return b.settleBack(b.Iterator.SeekLT(kv.MakeSearchKey(b.end, kv.MaxTimestamp)))
}

func (b *bounded) Prev() bool { return b.valid && b.settleBack(b.Iterator.Prev()) }

func (b *bounded) Valid() bool { return b.valid }
