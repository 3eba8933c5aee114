package sstable

import (
	"context"

	"github.com/bellows-kv/bellows/storage-engine/iterator"
	"github.com/bellows-kv/bellows/storage-engine/kv"
)

// Iter walks every version in an SST: a position in the index plus an
// iterator over the current data block.
type Iter struct {
	ctx   context.Context // the request's, for remote block reads
	r     *Reader
	blk   int
	bi    blockIter
	valid bool
	err   error
	sk    []byte
	// stream: blocks are read past the cache, their stored bytes into
	// raw and decoded into buf, which every block read reuses
	// (NewStreamingIter).
	stream   bool
	raw, buf []byte
	// view lists blocks [base, base+view.len()): the index partition of
	// the current block (a format 1 file's whole index).
	view indexView
	base int
}

// NewIter returns an unpositioned iterator.
func (r *Reader) NewIter() iterator.Iterator { return r.NewIterContext(context.Background()) }

// NewIterContext returns an unpositioned iterator whose block reads belong
// to the request of ctx.
func (r *Reader) NewIterContext(ctx context.Context) iterator.Iterator {
	return &Iter{ctx: ctx, r: r, blk: -1}
}

// NewStreamingIter returns an unpositioned iterator that reads each block
// from the file into one buffer of its own, past the cache: a compaction
// reads every block of its inputs once, and would otherwise allocate each.
// A key or value it returns is valid only until it moves to another block
// (at the latest, the next call that moves it): copy what you keep.
func (r *Reader) NewStreamingIter() iterator.Iterator {
	return &Iter{ctx: context.Background(), r: r, blk: -1, stream: true}
}

// viewBlock makes view list block i, reading its partition when it is in
// another (a format 1 file's whole index is one view, taken once).
func (it *Iter) viewBlock(i int) bool {
	if i >= it.base && i < it.base+it.view.len() {
		return true
	}
	v, base, err := it.r.entries(i)
	if err != nil {
		it.err, it.valid = err, false
		return false
	}
	it.view, it.base = v, base
	return true
}

// handle is block i's handle; view lists it.
func (it *Iter) handle(i int) Handle { return it.view.handle(i - it.base) }

// InitIter makes it an unpositioned iterator over the file, as
// NewIterContext returns, reusing it's buffers: a reader that scans often
// (region.Iterator pools them) allocates nothing per scan.
func (r *Reader) InitIter(ctx context.Context, it *Iter) {
	*it = Iter{ctx: ctx, r: r, blk: -1, sk: it.sk[:0], bi: blockIter{key: it.bi.key[:0], back: it.bi.back[:0], backKeys: it.bi.backKeys[:0]}}
}

// Reset drops the iterator's references to its file and block, keeping its
// buffers: a pooled Iter does not keep a closed file or an evicted block
// alive. InitIter makes it usable again.
func (it *Iter) Reset() {
	*it = Iter{sk: it.sk[:0], bi: blockIter{key: it.bi.key[:0], back: it.bi.back[:0], backKeys: it.bi.backKeys[:0]}}
}

func (it *Iter) loadBlock(i int) bool {
	it.blk = i
	if i >= it.r.numBlocks || i < 0 {
		it.valid = false
		return false
	}
	if !it.viewBlock(i) {
		return false
	}
	var b []byte
	var err error
	if it.stream {
		b, err = it.r.readStoredWith(it.handle(i), blockID(i), &it.raw, &it.buf)
	} else {
		b, err = it.r.block(it.ctx, i, it.view, it.base)
	}
	if err != nil {
		it.err, it.valid = err, false
		return false
	}
	if err := it.bi.init(b); err != nil {
		it.err = &CorruptionError{File: it.r.name, Block: blockName(i), Offset: it.handle(i).Offset, Reason: err.Error()}
		it.valid = false
		return false
	}
	return true
}

func (it *Iter) checkBlockErr() bool {
	if it.bi.err != nil {
		it.err = &CorruptionError{File: it.r.name, Block: blockName(it.blk), Offset: it.handle(it.blk).Offset, Reason: it.bi.err.Error()}
		it.valid = false
		return true
	}
	return false
}

func (it *Iter) SeekGE(key kv.InternalKey) bool {
	if it.err != nil {
		return false
	}
	it.sk = key.Append(it.sk[:0])
	if !it.seekView(it.sk) {
		return false
	}
	if !it.loadBlock(it.blk) {
		return false
	}
	it.valid = it.bi.seekGE(it.sk)
	if it.checkBlockErr() {
		return false
	}
	if !it.valid {
		return it.nextBlock()
	}
	return true
}

// seekView sets blk to the first block whose last key is ≥ target
// (numBlocks when none is) and view to the entries that list it.
func (it *Iter) seekView(target []byte) bool {
	v, i, base, err := it.r.seekEntries(target, nil)
	if err != nil {
		it.err, it.valid = err, false
		return false
	}
	it.blk = i
	if i < it.r.numBlocks {
		it.view, it.base = v, base
	}
	return true
}

func (it *Iter) First() bool {
	if it.err != nil || !it.loadBlock(0) {
		return false
	}
	it.valid = it.bi.first()
	if it.checkBlockErr() {
		return false
	}
	return it.valid
}

func (it *Iter) nextBlock() bool {
	for {
		if !it.loadBlock(it.blk + 1) {
			return false
		}
		it.valid = it.bi.first()
		if it.checkBlockErr() {
			return false
		}
		if it.valid {
			return true
		}
	}
}

func (it *Iter) Next() bool {
	if !it.valid {
		return false
	}
	if it.bi.nextEntry() {
		return true
	}
	if it.checkBlockErr() {
		return false
	}
	return it.nextBlock()
}

// SeekLT positions at the last key < key: in the first block whose last
// key is ≥ key, or in the block before when every key of that block is
// ≥ key too (which a format 1 index tells from its first keys).
func (it *Iter) SeekLT(key kv.InternalKey) bool {
	if it.err != nil {
		return false
	}
	it.sk = key.Append(it.sk[:0])
	if !it.seekView(it.sk) {
		return false
	}
	i := it.blk
	// A slab with first keys says when every key of block i is ≥ key, and
	// the answer is in block i-1; without them, block i is read to see.
	if i == it.r.numBlocks || (it.view.hasFirst() && kv.CompareEncoded(it.view.first(i-it.base), it.sk) >= 0) {
		// Every key of block i-1 is below key.
		return it.lastFrom(i - 1)
	}
	if !it.loadBlock(i) {
		return false
	}
	it.valid = it.bi.seekLT(it.sk)
	if it.checkBlockErr() {
		return false
	}
	if !it.valid {
		return it.lastFrom(i - 1)
	}
	return true
}

func (it *Iter) Last() bool {
	if it.err != nil {
		return false
	}
	return it.lastFrom(it.r.numBlocks - 1)
}

// lastFrom positions at the last entry of block i, or of the nearest
// non-empty block before it.
func (it *Iter) lastFrom(i int) bool {
	for ; i >= 0; i-- {
		if !it.loadBlock(i) {
			return false
		}
		it.valid = it.bi.last()
		if it.checkBlockErr() {
			return false
		}
		if it.valid {
			return true
		}
	}
	it.valid = false
	return false
}

func (it *Iter) Prev() bool {
	if !it.valid {
		return false
	}
	if it.bi.prevEntry() {
		return true
	}
	if it.checkBlockErr() {
		return false
	}
	return it.lastFrom(it.blk - 1)
}

func (it *Iter) Valid() bool         { return it.valid }
func (it *Iter) Key() kv.InternalKey { return it.bi.ikey }
func (it *Iter) Value() []byte       { return it.bi.val }
func (it *Iter) Err() error          { return it.err }
func (it *Iter) Close() error        { it.valid = false; return nil }
