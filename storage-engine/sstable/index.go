package sstable

import (
	"encoding/binary"
	"errors"

	"github.com/bellows-kv/bellows/storage-engine/kv"
)

// An index slab lists data blocks: each block's last internal key, maybe
// its first, and its handle, laid out so that a reader searches it in place,
// without decoding it (a format 2 index partition is one, as stored and as
// the block cache holds it):
//
//	slab    := keys uint32(off)*(k·n+1) handles uint32(n) uint8(flags)
//	keys    := (lastKey firstKey?)*
//	handles := (uint64(offset) uint64(length))*n        explicit
//	         | uint64(offset) uint32(end)*n              contiguous
//
// With first keys (flags&slabFirstKeys) k is 2: off[2i] is where entry i's
// last key starts in keys, off[2i+1] where its first key starts, off[2i+2]
// where both end; without, k is 1. Contiguous handles (flags&slabContiguous)
// list blocks that follow each other in the file: the first block's offset,
// then where each block's stored bytes and trailer end, from that offset. A
// format 2 partition has neither first keys nor explicit handles: about 32
// bytes an entry for 16-byte keys, against 72. A format 1 file's whole index
// and a format 2 file's top level have both; they are built when the file
// is opened and pinned for the reader's life.
const (
	slabFirstKeys  = 1
	slabContiguous = 2
	slabTrailerLen = 5
)

// indexBuilder collects the entries of one slab.
type indexBuilder struct {
	flags   uint8
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
	if b.flags&slabFirstKeys != 0 {
		b.keys = append(b.keys, first...)
		b.offs = append(b.offs, uint32(len(b.keys)))
	}
	b.handles = append(b.handles, h)
}

func (b *indexBuilder) len() int { return len(b.handles) }

// size is the slab's length once built.
func (b *indexBuilder) size() int {
	n := len(b.keys) + 4*max(len(b.offs), 1) + slabTrailerLen
	if b.flags&slabContiguous != 0 {
		return n + 8 + 4*len(b.handles)
	}
	return n + 16*len(b.handles)
}

// span is the bytes from the first block's start to the last one's
// trailer's end: what a contiguous slab's ends count.
func (b *indexBuilder) span() uint64 {
	if len(b.handles) == 0 {
		return 0
	}
	last := b.handles[len(b.handles)-1]
	return last.Offset + last.Length + trailerLen - b.handles[0].Offset
}

// last is entry i's last key.
func (b *indexBuilder) last(i int) []byte {
	k := b.keysPer()
	return b.keys[b.offs[k*i]:b.offs[k*i+1]]
}

func (b *indexBuilder) keysPer() int {
	if b.flags&slabFirstKeys != 0 {
		return 2
	}
	return 1
}

// appendSlab appends the slab to dst. Contiguous handles must follow each
// other in the file (the writer's partitions' blocks do).
func (b *indexBuilder) appendSlab(dst []byte) []byte {
	dst = append(dst, b.keys...)
	if len(b.offs) == 0 {
		dst = binary.LittleEndian.AppendUint32(dst, 0)
	}
	for _, o := range b.offs {
		dst = binary.LittleEndian.AppendUint32(dst, o)
	}
	if b.flags&slabContiguous != 0 {
		var start uint64
		if len(b.handles) > 0 {
			start = b.handles[0].Offset
		}
		dst = binary.LittleEndian.AppendUint64(dst, start)
		for _, h := range b.handles {
			dst = binary.LittleEndian.AppendUint32(dst, uint32(h.Offset+h.Length+trailerLen-start))
		}
	} else {
		for _, h := range b.handles {
			dst = binary.LittleEndian.AppendUint64(dst, h.Offset)
			dst = binary.LittleEndian.AppendUint64(dst, h.Length)
		}
	}
	dst = binary.LittleEndian.AppendUint32(dst, uint32(len(b.handles)))
	return append(dst, b.flags)
}

func (b *indexBuilder) reset() {
	b.keys, b.offs, b.handles = b.keys[:0], b.offs[:0], b.handles[:0]
}

// indexView reads a slab in place.
type indexView struct {
	b      []byte
	n      int
	k      int // keys per entry: 2 with first keys, else 1
	offsAt int // where off[0] starts
	hAt    int // where the handles start
	contig bool
}

var errCorruptIndex = errors.New("corrupt index slab")

// viewIndex checks a slab's structure (every offset in order and within its
// keys, and contiguous ends increasing) and returns a view of it. A view of
// a slab already checked is viewIndexChecked.
func viewIndex(b []byte) (indexView, error) {
	v, ok := viewIndexChecked(b)
	if !ok {
		return indexView{}, errCorruptIndex
	}
	prev := uint32(0)
	for i := 0; i <= v.k*v.n; i++ {
		o := binary.LittleEndian.Uint32(b[v.offsAt+4*i:])
		if o < prev || int(o) > v.offsAt || (i == 0 && o != 0) {
			return indexView{}, errCorruptIndex
		}
		prev = o
	}
	if int(prev) != v.offsAt {
		return indexView{}, errCorruptIndex
	}
	if v.contig {
		end := uint32(0)
		for i := range v.n {
			e := binary.LittleEndian.Uint32(b[v.hAt+8+4*i:])
			if e < end+trailerLen {
				return indexView{}, errCorruptIndex
			}
			end = e
		}
	}
	return v, nil
}

// viewIndexChecked is viewIndex on a slab whose offsets were checked when
// it was read: the block cache's copy. It checks only the lengths.
func viewIndexChecked(b []byte) (indexView, bool) {
	if len(b) < slabTrailerLen+4 {
		return indexView{}, false
	}
	flags := b[len(b)-1]
	n := int(binary.LittleEndian.Uint32(b[len(b)-slabTrailerLen:]))
	if n == 0 || flags&^(slabFirstKeys|slabContiguous) != 0 || n > len(b) {
		return indexView{}, false
	}
	v := indexView{b: b, n: n, k: 1, contig: flags&slabContiguous != 0}
	if flags&slabFirstKeys != 0 {
		v.k = 2
	}
	handles := 16 * n
	if v.contig {
		handles = 8 + 4*n
	}
	tail := 4*(v.k*n+1) + handles + slabTrailerLen
	if tail > len(b) {
		return indexView{}, false
	}
	v.offsAt = len(b) - tail
	v.hAt = v.offsAt + 4*(v.k*n+1)
	return v, true
}

func (v indexView) len() int { return v.n }

func (v indexView) off(i int) int { return int(binary.LittleEndian.Uint32(v.b[v.offsAt+4*i:])) }

// last is entry i's last internal key, encoded.
func (v indexView) last(i int) []byte {
	s, e := v.off(v.k*i), v.off(v.k*i+1)
	return v.b[s:e:e]
}

// hasFirst reports whether the slab holds its blocks' first keys.
func (v indexView) hasFirst() bool { return v.k == 2 }

// first is entry i's first internal key, encoded; hasFirst must hold.
func (v indexView) first(i int) []byte {
	s, e := v.off(2*i+1), v.off(2*i+2)
	return v.b[s:e:e]
}

// lastUser is entry i's last user key.
func (v indexView) lastUser(i int) []byte { return kv.UserKey(v.last(i)) }

func (v indexView) handle(i int) Handle {
	if v.contig {
		base := binary.LittleEndian.Uint64(v.b[v.hAt:])
		var start uint64
		if i > 0 {
			start = uint64(binary.LittleEndian.Uint32(v.b[v.hAt+8+4*(i-1):]))
		}
		end := uint64(binary.LittleEndian.Uint32(v.b[v.hAt+8+4*i:]))
		return Handle{Offset: base + start, Length: end - start - trailerLen}
	}
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
