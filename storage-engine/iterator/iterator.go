// Package iterator defines the engine's internal-key iterator and the merging
// iterator that combines memstores and SSTs into one ordered stream.
package iterator

import (
	"bytes"
	"container/heap"

	"github.com/bellows-kv/bellows/storage-engine/kv"
)

// Iterator walks internal keys in kv.Compare order. Key and Value are valid
// until the next positioning call; callers copy what they keep.
type Iterator interface {
	// SeekGE positions at the first key ≥ key.
	SeekGE(key kv.InternalKey) bool
	First() bool
	Next() bool
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
type Merging struct {
	children []Iterator
	items    []mergeItem
	h        mergeHeap
	err      error
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
	m.err = nil
	for _, c := range m.children {
		c.SeekGE(key)
	}
	return m.rebuild()
}

func (m *Merging) First() bool {
	m.err = nil
	for _, c := range m.children {
		c.First()
	}
	return m.rebuild()
}

func (m *Merging) Next() bool {
	if !m.Valid() {
		return false
	}
	top := m.h.items[0]
	if top.it.Next() {
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

type mergeHeap struct{ items []*mergeItem }

func (h *mergeHeap) Len() int { return len(h.items) }
func (h *mergeHeap) Less(i, j int) bool {
	return kv.Compare(h.items[i].key, h.items[j].key) < 0
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
func (Empty) First() bool                { return false }
func (Empty) Next() bool                 { return false }
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

func (b *bounded) settle(ok bool) bool {
	b.valid = ok && (b.end == nil || bytes.Compare(b.Iterator.Key().UserKey, b.end) < 0)
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

func (b *bounded) Valid() bool { return b.valid }
