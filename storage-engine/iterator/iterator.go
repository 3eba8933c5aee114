// Package iterator defines the engine's internal-key iterator and the merging
// iterator that combines memstores and SSTs into one ordered stream.
package iterator

import (
	"bytes"
	"encoding/binary"

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
// Each heap item caches its child's current key and that key's abbreviation:
// the heap compares keys far more often than children move, and two
// different abbreviations order two keys without reading them (abbreviated
// keys, as PostgreSQL's sorts use them). The keys a scan meets share a
// prefix (a table's, a tenant's, the digits the range starts with): the
// abbreviation is the eight bytes after the prefix every key in the heap
// shares, up to eight bytes of it (skip), so it tells apart the keys of
// a narrow range too.
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
	// heap holds the items of the valid children, as a binary min-heap
	// (max-heap when reverse) on their keys. Specialised rather than
	// container/heap: its comparisons are the merge's inner loop, and the
	// interface's dynamic calls kept them from being inlined.
	heap    []*mergeItem
	reverse bool
	// Every key in the heap has its first skip bytes (0 to 8) equal to
	// the first skip bytes of prefix (a key's first eight bytes as
	// abbreviate0 reads them); mask selects them in such a number.
	skip   int
	prefix uint64
	mask   uint64
	err    error
	// turn holds the current key while the children are re-seeked around
	// it: their positioning may overwrite the buffer it aliases.
	turn []byte
}

type mergeItem struct {
	it  Iterator
	key kv.InternalKey
	abb uint64 // abbreviate(key.UserKey[skip:])
}

// abbreviate is the first eight bytes of k as a big-endian number,
// zero-padded: abbreviate(a) < abbreviate(b) implies a < b (bytewise), so
// only keys with equal abbreviations need comparing in full. Applied to
// the keys' suffixes past a prefix they share, the same holds of the keys.
func abbreviate(k []byte) uint64 {
	if len(k) >= 8 {
		return binary.BigEndian.Uint64(k)
	}
	var b [8]byte
	copy(b[:], k)
	return binary.BigEndian.Uint64(b[:])
}

// prefixMask selects the first n (0 to 8) bytes of an abbreviation.
func prefixMask(n int) uint64 {
	if n == 0 {
		return 0
	}
	return ^uint64(0) << (64 - 8*n)
}

// sharesPrefix says whether k has the prefix every key in the heap has.
func (m *Merging) sharesPrefix(k []byte) bool {
	return len(k) >= m.skip && (abbreviate(k)^m.prefix)&m.mask == 0
}

// setItem records the child's current key in c, and narrows the shared
// prefix first if the key lacks it.
func (m *Merging) setItem(c *mergeItem) {
	c.key = c.it.Key()
	if !m.sharesPrefix(c.key.UserKey) {
		m.narrow(c.key.UserKey)
	}
	c.abb = abbreviate(c.key.UserKey[m.skip:])
}

// narrow shortens the shared prefix to what k shares of it and
// re-abbreviates the heap's keys: their order, and so the heap, is as it was.
func (m *Merging) narrow(k []byte) {
	n, a := 0, abbreviate(k)
	for n < m.skip && n < len(k) && byte(a>>(56-8*n)) == byte(m.prefix>>(56-8*n)) {
		n++
	}
	m.skip, m.mask = n, prefixMask(n)
	for _, h := range m.heap {
		h.abb = abbreviate(h.key.UserKey[n:])
	}
}

// NewMerging returns an unpositioned merging iterator over children.
func NewMerging(children ...Iterator) *Merging {
	m := &Merging{}
	m.Init(children)
	return m
}

// Init makes m an unpositioned merging iterator over children, reusing its
// memory: a caller that pools Merging iterators calls it instead of
// NewMerging. m keeps children (the slice) until the next Init.
func (m *Merging) Init(children []Iterator) {
	m.children = children
	if cap(m.items) < len(children) {
		m.items = make([]mergeItem, len(children))
		m.heap = make([]*mergeItem, 0, len(children))
	}
	m.items = m.items[:len(children)]
	for i, c := range children {
		m.items[i] = mergeItem{it: c}
	}
	m.heap, m.reverse, m.err = m.heap[:0], false, nil
}

// Reset drops m's references to its children (and their memory) so that m
// can be pooled; Init makes it usable again.
func (m *Merging) Reset() {
	clear(m.items)
	clear(m.heap[:cap(m.heap)])
	m.children, m.items, m.heap, m.err = nil, m.items[:0], m.heap[:0], nil
}

// less orders two items by the heap's direction.
func (m *Merging) less(a, b *mergeItem) bool {
	if a.abb != b.abb {
		return (a.abb < b.abb) != m.reverse
	}
	var c int
	if la := len(a.key.UserKey); la == len(b.key.UserKey) && la <= m.skip+8 {
		// The abbreviations hold the whole keys past the shared prefix:
		// two versions of one key.
		c = compareVersions(a.key, b.key)
	} else {
		c = kv.Compare(a.key, b.key)
	}
	if m.reverse {
		return c > 0
	}
	return c < 0
}

// compareVersions is kv.Compare of two versions of the same user key.
func compareVersions(a, b kv.InternalKey) int {
	switch {
	case a.TS > b.TS:
		return -1
	case a.TS < b.TS:
		return 1
	case a.Kind > b.Kind:
		return -1
	case a.Kind < b.Kind:
		return 1
	}
	return 0
}

// down moves the item at i towards the leaves until the heap holds.
func (m *Merging) down(i int) {
	h := m.heap
	n := len(h)
	for {
		l := 2*i + 1
		if l >= n {
			return
		}
		j := l
		if r := l + 1; r < n && m.less(h[r], h[l]) {
			j = r
		}
		if !m.less(h[j], h[i]) {
			return
		}
		h[i], h[j] = h[j], h[i]
		i = j
	}
}

func (m *Merging) rebuild() bool {
	m.heap = m.heap[:0]
	m.skip, m.mask = 8, prefixMask(8)
	for i := range m.items {
		c := &m.items[i]
		if c.it.Valid() {
			if len(m.heap) == 0 {
				m.prefix = abbreviate(c.it.Key().UserKey)
			}
			m.setItem(c)
			m.heap = append(m.heap, c)
		} else if err := c.it.Err(); err != nil {
			m.err = err
			m.heap = m.heap[:0]
			return false
		}
	}
	for i := len(m.heap)/2 - 1; i >= 0; i-- {
		m.down(i)
	}
	return m.Valid()
}

func (m *Merging) SeekGE(key kv.InternalKey) bool {
	m.err, m.reverse = nil, false
	for _, c := range m.children {
		c.SeekGE(key)
	}
	return m.rebuild()
}

// SkipTo is SeekGE to a key above the current one while moving forward:
// only the children behind key move, those at or past it stay where they
// are. A reader skipping the many versions of a key seeks past them with it
// instead of stepping over each (RocksDB's max_sequential_skip_in_iterations).
// Otherwise it is SeekGE.
func (m *Merging) SkipTo(key kv.InternalKey) bool {
	if m.reverse || !m.Valid() || kv.Compare(m.Key(), key) > 0 {
		return m.SeekGE(key)
	}
	// Children missing from the heap are exhausted: past key too.
	for i := 0; i < len(m.heap); {
		c := m.heap[i]
		if kv.Compare(c.key, key) >= 0 {
			i++
			continue
		}
		if c.it.SeekGE(key) {
			m.setItem(c)
			i++
			continue
		}
		if err := c.it.Err(); err != nil {
			m.err = err
			m.heap = m.heap[:0]
			return false
		}
		n := len(m.heap) - 1
		m.heap[i] = m.heap[n]
		m.heap[n] = nil
		m.heap = m.heap[:n]
	}
	for i := len(m.heap)/2 - 1; i >= 0; i-- {
		m.down(i)
	}
	return m.Valid()
}

func (m *Merging) SeekLT(key kv.InternalKey) bool {
	m.err, m.reverse = nil, true
	for _, c := range m.children {
		c.SeekLT(key)
	}
	return m.rebuild()
}

func (m *Merging) First() bool {
	m.err, m.reverse = nil, false
	for _, c := range m.children {
		c.First()
	}
	return m.rebuild()
}

func (m *Merging) Last() bool {
	m.err, m.reverse = nil, true
	for _, c := range m.children {
		c.Last()
	}
	return m.rebuild()
}

func (m *Merging) Next() bool {
	if !m.Valid() {
		return false
	}
	if m.reverse {
		// Every child is below the current key: move each to its first
		// key above it. The new top is the next key.
		cur := m.current()
		m.reverse = false
		for _, c := range m.children {
			if c.SeekGE(cur) && kv.Compare(c.Key(), cur) == 0 {
				c.Next()
			}
		}
		return m.rebuild()
	}
	top := m.heap[0]
	return m.stepped(top, top.it.Next())
}

func (m *Merging) Prev() bool {
	if !m.Valid() {
		return false
	}
	if !m.reverse {
		cur := m.current()
		m.reverse = true
		for _, c := range m.children {
			c.SeekLT(cur)
		}
		return m.rebuild()
	}
	top := m.heap[0]
	return m.stepped(top, top.it.Prev())
}

// current is a copy of the current key that outlives the children's moves.
func (m *Merging) current() kv.InternalKey {
	k := m.Key()
	m.turn = append(m.turn[:0], k.UserKey...)
	k.UserKey = m.turn
	return k
}

// stepped restores the heap after its top child moved one key in the
// heap's direction (ok: the child is still valid).
func (m *Merging) stepped(top *mergeItem, ok bool) bool {
	if ok {
		m.setItem(top)
		m.down(0)
		return true
	}
	if err := top.it.Err(); err != nil {
		m.err = err
		m.heap = m.heap[:0]
		return false
	}
	n := len(m.heap) - 1
	m.heap[0] = m.heap[n]
	m.heap[n] = nil
	m.heap = m.heap[:n]
	if n > 1 {
		m.down(0)
	}
	return n > 0
}

func (m *Merging) Valid() bool         { return m.err == nil && len(m.heap) > 0 }
func (m *Merging) Key() kv.InternalKey { return m.heap[0].key }
func (m *Merging) Value() []byte       { return m.heap[0].it.Value() }
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
