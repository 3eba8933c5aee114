package sstable

import (
	"encoding/binary"
	"errors"
	"sort"

	"github.com/bellows-kv/bellows/storage-engine/kv"
)

// blockBuilder prefix-compresses sorted entries:
//
//	entry   := varint(shared) varint(unshared) varint(valueLen) keyDelta value
//	block   := entry* uint32(restart)* uint32(numRestarts)
type blockBuilder struct {
	buf      []byte
	restarts []uint32
	lastKey  []byte
	counter  int
	entries  int
}

func (b *blockBuilder) add(key, value []byte) {
	shared := 0
	if b.counter < restartInterval {
		n := min(len(key), len(b.lastKey))
		for shared < n && key[shared] == b.lastKey[shared] {
			shared++
		}
	} else {
		b.counter = 0
	}
	if b.counter == 0 {
		b.restarts = append(b.restarts, uint32(len(b.buf)))
		shared = 0
	}
	b.buf = binary.AppendUvarint(b.buf, uint64(shared))
	b.buf = binary.AppendUvarint(b.buf, uint64(len(key)-shared))
	b.buf = binary.AppendUvarint(b.buf, uint64(len(value)))
	b.buf = append(b.buf, key[shared:]...)
	b.buf = append(b.buf, value...)
	b.lastKey = append(b.lastKey[:0], key...)
	b.counter++
	b.entries++
}

func (b *blockBuilder) finish() []byte {
	for _, r := range b.restarts {
		b.buf = binary.LittleEndian.AppendUint32(b.buf, r)
	}
	return binary.LittleEndian.AppendUint32(b.buf, uint32(len(b.restarts)))
}

func (b *blockBuilder) size() int { return len(b.buf) + 4*len(b.restarts) + 4 }

func (b *blockBuilder) reset() {
	b.buf, b.restarts, b.lastKey = b.buf[:0], b.restarts[:0], b.lastKey[:0]
	b.counter, b.entries = 0, 0
}

var errCorruptBlock = errors.New("corrupt block structure")

// blockIter walks one decoded block. Keys are encoded internal keys.
type blockIter struct {
	data        []byte // entries only
	restarts    []byte
	numRestarts int
	off         int // offset of the current entry
	next        int // offset of the entry after it
	key         []byte
	val         []byte
	ikey        kv.InternalKey
	err         error
	// back caches the entries of one restart interval for Prev: entries
	// only decode forward from a restart point (prefix compression), so a
	// step back decodes the interval once and then walks the cache, as
	// Pebble's blockIter does, instead of decoding up to restartInterval
	// entries per step. backKeys holds the entries' full keys.
	back     []backEntry
	backKeys []byte
}

type backEntry struct {
	off, next        int
	keyEnd           int // in backKeys; the key starts at the previous entry's keyEnd
	valStart, valEnd int
}

func (it *blockIter) init(block []byte) error {
	if len(block) < 4 {
		return errCorruptBlock
	}
	n := int(binary.LittleEndian.Uint32(block[len(block)-4:]))
	end := len(block) - 4 - 4*n
	if n == 0 || end < 0 {
		return errCorruptBlock
	}
	*it = blockIter{data: block[:end], restarts: block[end : len(block)-4], numRestarts: n, key: it.key[:0],
		back: it.back[:0], backKeys: it.backKeys[:0]}
	it.off = len(it.data)
	return nil
}

func (it *blockIter) restartOffset(i int) int {
	return int(binary.LittleEndian.Uint32(it.restarts[4*i:]))
}

// decodeAt decodes the entry at off given the key of the previous entry in
// it.key; returns false at the end of the block or on corruption.
func (it *blockIter) decodeAt(off int) bool {
	if off >= len(it.data) {
		it.off = len(it.data)
		return false
	}
	p := it.data[off:]
	shared, n1 := binary.Uvarint(p)
	unshared, n2 := binary.Uvarint(p[max(n1, 0):])
	vlen, n3 := binary.Uvarint(p[max(n1+n2, 0):])
	if n1 <= 0 || n2 <= 0 || n3 <= 0 {
		it.err = errCorruptBlock
		return false
	}
	h := n1 + n2 + n3
	if int(shared) > len(it.key) || uint64(len(p)) < uint64(h)+unshared+vlen {
		it.err = errCorruptBlock
		return false
	}
	it.key = append(it.key[:shared], p[h:h+int(unshared)]...)
	it.val = p[h+int(unshared) : h+int(unshared)+int(vlen)]
	ik, err := kv.Decode(it.key)
	if err != nil {
		it.err = err
		return false
	}
	it.ikey = ik
	it.off = off
	it.next = off + h + int(unshared) + int(vlen)
	return true
}

func (it *blockIter) first() bool {
	it.key = it.key[:0]
	return it.decodeAt(0)
}

func (it *blockIter) nextEntry() bool {
	if it.off >= len(it.data) {
		return false
	}
	return it.decodeAt(it.next)
}

// seekGE positions at the first entry ≥ target (an encoded internal key).
func (it *blockIter) seekGE(target []byte) bool {
	// Binary search the restart points for the last restart whose key < target.
	i := sort.Search(it.numRestarts, func(i int) bool {
		off := it.restartOffset(i)
		it.key = it.key[:0]
		if !it.decodeAt(off) {
			return true
		}
		return kv.CompareEncoded(it.key, target) >= 0
	})
	if it.err != nil {
		return false
	}
	start := 0
	if i > 0 {
		start = it.restartOffset(i - 1)
	}
	it.key = it.key[:0]
	for ok := it.decodeAt(start); ok; ok = it.nextEntry() {
		if kv.CompareEncoded(it.key, target) >= 0 {
			return true
		}
	}
	return false
}

// last positions at the block's last entry.
func (it *blockIter) last() bool {
	return it.prevBefore(len(it.data))
}

// prevEntry moves to the entry before the current one; false at the start
// of the block or on corruption.
func (it *blockIter) prevEntry() bool {
	return it.prevBefore(it.off)
}

// prevBefore positions at the entry that ends at off (the one whose
// successor starts there).
func (it *blockIter) prevBefore(off int) bool {
	if off <= 0 {
		it.off = len(it.data) // invalid, as past the end
		return false
	}
	if j := it.backIndex(off); j >= 0 {
		return it.fromBack(j)
	}
	// Decode the restart interval holding the entry before off.
	i := sort.Search(it.numRestarts, func(i int) bool { return it.restartOffset(i) >= off }) - 1
	if i < 0 {
		it.err = errCorruptBlock
		return false
	}
	if it.back == nil {
		// One interval's worth at once: growing by appends would
		// allocate several times per iterator.
		it.back, it.backKeys = make([]backEntry, 0, restartInterval), make([]byte, 0, restartInterval*32)
	}
	it.back, it.backKeys = it.back[:0], it.backKeys[:0]
	it.key = it.key[:0]
	for ok := it.decodeAt(it.restartOffset(i)); ok; ok = it.decodeAt(it.next) {
		it.backKeys = append(it.backKeys, it.key...)
		it.back = append(it.back, backEntry{off: it.off, next: it.next, keyEnd: len(it.backKeys), valStart: it.next - len(it.val), valEnd: it.next})
		if it.next >= off {
			break
		}
	}
	if it.err != nil {
		return false
	}
	if n := len(it.back); n == 0 || it.back[n-1].next != off {
		it.err = errCorruptBlock
		return false
	}
	return it.fromBack(len(it.back) - 1)
}

// backIndex is the index of the cached entry whose successor starts at
// off, or -1.
func (it *blockIter) backIndex(off int) int {
	n := len(it.back)
	if n == 0 || off <= it.back[0].off || off > it.back[n-1].next {
		return -1
	}
	j := sort.Search(n, func(j int) bool { return it.back[j].next >= off })
	if j < n && it.back[j].next == off {
		return j
	}
	return -1
}

// fromBack positions at cached entry j.
func (it *blockIter) fromBack(j int) bool {
	e := &it.back[j]
	ks := 0
	if j > 0 {
		ks = it.back[j-1].keyEnd
	}
	it.key = append(it.key[:0], it.backKeys[ks:e.keyEnd]...)
	it.val = it.data[e.valStart:e.valEnd:e.valEnd]
	ik, err := kv.Decode(it.key)
	if err != nil {
		it.err = err
		return false
	}
	it.ikey, it.off, it.next = ik, e.off, e.next
	return true
}

// seekLT positions at the last entry < target (an encoded internal key).
func (it *blockIter) seekLT(target []byte) bool {
	if it.seekGE(target) {
		return it.prevEntry()
	}
	if it.err != nil {
		return false
	}
	return it.last()
}
