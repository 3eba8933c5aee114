package sstable

import (
	"slices"

	"github.com/bellows-kv/bellows/storage-engine/kv"
)

// blockIndex is a file's decoded index, packed: every data block's last and
// first internal keys in one slab, their offsets and the blocks' handles.
// A reader holds it for the file's life, outside the block cache, and the
// engine's memory budget counts it (a budget whose block cache it shrinks):
// a slice of three slices and a handle per block, with two allocations for
// the keys, took about twice the memory.
type blockIndex struct {
	keys []byte // block i's last key, then its first key
	// offs[2i] is where block i's last key starts in keys, offs[2i+1]
	// where its first key starts, offs[2i+2] where both end.
	offs    []uint32
	handles []Handle
}

func (x *blockIndex) add(last, first []byte, h Handle) {
	if len(x.offs) == 0 {
		x.offs = append(x.offs, 0)
	}
	x.keys = append(x.keys, last...)
	x.offs = append(x.offs, uint32(len(x.keys)))
	x.keys = append(x.keys, first...)
	x.offs = append(x.offs, uint32(len(x.keys)))
	x.handles = append(x.handles, h)
}

// trim releases the capacity the appends left.
func (x *blockIndex) trim() {
	x.keys, x.offs, x.handles = slices.Clone(x.keys), slices.Clone(x.offs), slices.Clone(x.handles)
}

func (x *blockIndex) len() int { return len(x.handles) }

// last is block i's last internal key, encoded.
func (x *blockIndex) last(i int) []byte {
	s, e := x.offs[2*i], x.offs[2*i+1]
	return x.keys[s:e:e]
}

// first is block i's first internal key, encoded.
func (x *blockIndex) first(i int) []byte {
	s, e := x.offs[2*i+1], x.offs[2*i+2]
	return x.keys[s:e:e]
}

// lastUser is block i's last user key.
func (x *blockIndex) lastUser(i int) []byte { return kv.UserKey(x.last(i)) }

// memoryBytes is what the index holds.
func (x *blockIndex) memoryBytes() int64 {
	return int64(cap(x.keys) + 4*cap(x.offs) + 16*cap(x.handles))
}
