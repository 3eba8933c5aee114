package sstable

import (
	"encoding/binary"
	"errors"

	"github.com/bellows-kv/bellows/storage-engine/kv"
)

// An index slab lists data blocks: each block's last and first internal
// keys and its handle, laid out so that a reader searches it in place,
// without decoding it (a format 2 index partition is one, as stored and as
// the block cache holds it):
//
//	keys   := (lastKey firstKey)*
//	slab   := keys uint32(off)*(2n+1) (uint64(offset) uint64(length))*n uint32(n)
//
// off[2i] is where entry i's last key starts in keys, off[2i+1] where its
// first key starts, off[2i+2] where both end. A format 1 file's whole index
// and a format 2 file's top level are built into slabs when the file is
// opened and pinned for the reader's life.

// indexBuilder collects the entries of one slab.
type indexBuilder struct {
	keys    []byte
	offs    []uint32
	handles []Handle
}

func (b *indexBuilder) add(last, first []byte, h Handle) {
	if len(b.offs) == 0 {
		b.offs = append(b.offs, 0)
	}
	b.keys = append(b.keys, last...)
	b.offs = append(b.offs, uint32(len(b.keys)))
	b.keys = append(b.keys, first...)
	b.offs = append(b.offs, uint32(len(b.keys)))
	b.handles = append(b.handles, h)
}

func (b *indexBuilder) len() int { return len(b.handles) }

// size is the slab's length once built.
func (b *indexBuilder) size() int {
	return len(b.keys) + 4*max(len(b.offs), 1) + 16*len(b.handles) + 4
}

// last is entry i's last key.
func (b *indexBuilder) last(i int) []byte { return b.keys[b.offs[2*i]:b.offs[2*i+1]] }

// first is entry i's first key.
func (b *indexBuilder) first(i int) []byte { return b.keys[b.offs[2*i+1]:b.offs[2*i+2]] }

// appendSlab appends the slab to dst.
func (b *indexBuilder) appendSlab(dst []byte) []byte {
	dst = append(dst, b.keys...)
	if len(b.offs) == 0 {
		dst = binary.LittleEndian.AppendUint32(dst, 0)
	}
	for _, o := range b.offs {
		dst = binary.LittleEndian.AppendUint32(dst, o)
	}
	for _, h := range b.handles {
		dst = binary.LittleEndian.AppendUint64(dst, h.Offset)
		dst = binary.LittleEndian.AppendUint64(dst, h.Length)
	}
	return binary.LittleEndian.AppendUint32(dst, uint32(len(b.handles)))
}

func (b *indexBuilder) reset() {
	b.keys, b.offs, b.handles = b.keys[:0], b.offs[:0], b.handles[:0]
}

// indexView reads a slab in place.
type indexView struct {
	b      []byte
	n      int
	offsAt int // where off[0] starts
	hAt    int // where the handles start
}

var errCorruptIndex = errors.New("corrupt index slab")

// viewIndex checks a slab's structure (every offset in order and within its
// keys) and returns a view of it. A view of a slab already checked is
// viewIndexChecked.
func viewIndex(b []byte) (indexView, error) {
	v, ok := viewIndexChecked(b)
	if !ok {
		return indexView{}, errCorruptIndex
	}
	prev := uint32(0)
	for i := 0; i <= 2*v.n; i++ {
		o := binary.LittleEndian.Uint32(b[v.offsAt+4*i:])
		if o < prev || int(o) > v.offsAt || (i == 0 && o != 0) {
			return indexView{}, errCorruptIndex
		}
		prev = o
	}
	if int(prev) != v.offsAt {
		return indexView{}, errCorruptIndex
	}
	return v, nil
}

// viewIndexChecked is viewIndex on a slab whose offsets were checked when
// it was read: the block cache's copy. It checks only the lengths.
func viewIndexChecked(b []byte) (indexView, bool) {
	if len(b) < 8 {
		return indexView{}, false
	}
	n := int(binary.LittleEndian.Uint32(b[len(b)-4:]))
	tail := 4*(2*n+1) + 16*n + 4
	if n == 0 || tail > len(b) {
		return indexView{}, false
	}
	offsAt := len(b) - tail
	return indexView{b: b, n: n, offsAt: offsAt, hAt: offsAt + 4*(2*n+1)}, true
}

func (v indexView) len() int { return v.n }

func (v indexView) off(i int) int { return int(binary.LittleEndian.Uint32(v.b[v.offsAt+4*i:])) }

// last is entry i's last internal key, encoded.
func (v indexView) last(i int) []byte {
	s, e := v.off(2*i), v.off(2*i+1)
	return v.b[s:e:e]
}

// first is entry i's first internal key, encoded.
func (v indexView) first(i int) []byte {
	s, e := v.off(2*i+1), v.off(2*i+2)
	return v.b[s:e:e]
}

// lastUser is entry i's last user key.
func (v indexView) lastUser(i int) []byte { return kv.UserKey(v.last(i)) }

func (v indexView) handle(i int) Handle {
	at := v.hAt + 16*i
	return Handle{Offset: binary.LittleEndian.Uint64(v.b[at:]), Length: binary.LittleEndian.Uint64(v.b[at+8:])}
}

// search returns the first entry whose last key is ≥ target, or len().
func (v indexView) search(target []byte) int {
	lo, hi := 0, v.n
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if kv.CompareEncoded(v.last(m), target) < 0 {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo
}

// memoryBytes is what the slab holds.
func (v indexView) memoryBytes() int64 { return int64(cap(v.b)) }
