package sstable

import (
	"encoding/binary"
	"errors"
	"sort"

	"github.com/bellows-kv/bellows/storage-engine/blockcache"
	"github.com/bellows-kv/bellows/storage-engine/kv"
)

// partMeta is what the pinned top level knows of a format 2 partition
// besides its keys and its block's handle (kept in the top-level slab).
type partMeta struct {
	firstBlock int
}

// partition is a decoded partition block:
//
//	partition := filter slab uint32(len(filter))
//
// One block, not two: a read needs both, and each cache lookup costs a
// shard's lock.
type partition struct {
	index  indexView
	filter []byte
}

// partitionID names partition p in errors.
func partitionID(p int) blockID { return blockID(-1000 - p) }

// splitPartition splits a partition block; checked, it also checks the
// slab's structure (a block read from the file, not the cache's copy).
func splitPartition(b []byte, checked bool) (partition, error) {
	if len(b) < 4 {
		return partition{}, errCorruptIndex
	}
	fl := int(binary.LittleEndian.Uint32(b[len(b)-4:]))
	if fl > len(b)-4 {
		return partition{}, errCorruptIndex
	}
	slab := b[fl : len(b)-4]
	var v indexView
	var err error
	if checked {
		var ok bool
		if v, ok = viewIndexChecked(slab); !ok {
			err = errCorruptIndex
		}
	} else {
		v, err = viewIndex(slab)
	}
	return partition{index: v, filter: b[:fl:fl]}, err
}

// decodeTopLevel reads a format 2 top-level index block into the pinned
// slab and partition list, checking that the partitions number the data
// blocks in order from 0.
func (r *Reader) decodeTopLevel(b []byte) error {
	var it blockIter
	if err := it.init(b); err != nil {
		return err
	}
	top := indexBuilder{flags: slabFirstKeys}
	for ok := it.first(); ok; ok = it.nextEntry() {
		ph, n, err := decodeHandle(it.val)
		if err != nil {
			return err
		}
		fb, m := binary.Uvarint(it.val[n:])
		if m <= 0 {
			return errCorruptBlock
		}
		n += m
		fl, m := binary.Uvarint(it.val[n:])
		if m <= 0 || uint64(len(it.val)-n-m) < fl {
			return errCorruptBlock
		}
		n += m
		if want := 0; len(r.parts) > 0 {
			want = r.parts[len(r.parts)-1].firstBlock + 1
			if int(fb) < want {
				return errors.New("partitions out of order")
			}
		} else if fb != 0 {
			return errors.New("first partition does not start at block 0")
		}
		top.add(it.key, it.val[n:n+int(fl)], ph)
		r.parts = append(r.parts, partMeta{firstBlock: int(fb)})
	}
	if it.err != nil {
		return it.err
	}
	if len(r.parts) == 0 {
		return errors.New("index has no partitions")
	}
	if r.parts[len(r.parts)-1].firstBlock >= r.numBlocks {
		return errors.New("a partition starts past the file's last data block")
	}
	v, err := viewIndex(top.appendSlab(nil))
	r.index = v
	return err
}

// pinPartitions reads every partition into memory: a reader without a
// block cache (a compaction's input, a tool) would otherwise read a
// partition from the file for every lookup.
func (r *Reader) pinPartitions() error {
	r.pinned = make([]partition, len(r.parts))
	for p := range r.parts {
		var err error
		if r.pinned[p], _, err = r.readPartition(p); err != nil {
			return err
		}
	}
	return nil
}

// readPartition reads partition p from the file into a buffer of its own
// and checks it: its structure, and that it lists the data blocks the top
// level says it does. It returns the block too.
func (r *Reader) readPartition(p int) (partition, []byte, error) {
	h := r.index.handle(p)
	var raw []byte
	b, err := r.readStoredWith(h, partitionID(p), &raw, nil)
	if err != nil {
		return partition{}, nil, err
	}
	pt, err := splitPartition(b, false)
	if err == nil && pt.index.len() != r.partEnd(p)-r.parts[p].firstBlock {
		err = errors.New("partition lists a different number of blocks than the top level")
	}
	if err != nil {
		return partition{}, nil, &CorruptionError{File: r.name, Block: partitionID(p).String(), Offset: h.Offset, Reason: err.Error()}
	}
	return pt, b, nil
}

// partEnd is the number of the data block after partition p's last.
func (r *Reader) partEnd(p int) int {
	if p+1 < len(r.parts) {
		return r.parts[p+1].firstBlock
	}
	return r.numBlocks
}

// partition returns partition p, from the cache when it holds it.
func (r *Reader) partition(p int) (partition, error) {
	if r.pinned != nil {
		return r.pinned[p], nil
	}
	h := r.index.handle(p)
	k := blockcache.Key{File: r.fileID, Offset: h.Offset}
	if b, ok := r.cache.GetMeta(k); ok {
		if pt, err := splitPartition(b, true); err == nil {
			return pt, nil
		}
	}
	pt, b, err := r.readPartition(p)
	if err != nil {
		return partition{}, err
	}
	r.cache.InsertMeta(k, b, r.index.lastUser(p))
	return pt, nil
}

// partOf returns the partition that lists data block i.
func (r *Reader) partOf(i int) int {
	return sort.Search(len(r.parts), func(p int) bool { return r.parts[p].firstBlock > i }) - 1
}

// entries returns the index entries that list data block i: a format 1
// file's whole index, or the partition holding it; base is the number of
// the view's first block.
func (r *Reader) entries(i int) (v indexView, base int, err error) {
	if r.parts == nil {
		return r.index, 0, nil
	}
	p := r.partOf(i)
	pt, err := r.partition(p)
	return pt.index, r.parts[p].firstBlock, err
}

// seekEntries finds the first data block whose last key is ≥ target: the
// view listing it, its number and the view's first block's number. When
// every block's last key is below target, i is NumBlocks(). With a key's
// hash it first tests the filter that answers for the key, and answers
// i = NumBlocks() when the filter rules it out.
func (r *Reader) seekEntries(target []byte, userKey []byte) (v indexView, i, base int, err error) {
	if r.parts == nil {
		if userKey != nil && !r.filter.Test(userKey) {
			return indexView{}, r.numBlocks, r.numBlocks, nil
		}
		i = r.index.search(target)
		return r.index, i, 0, nil
	}
	p := r.index.search(target)
	if p == len(r.parts) {
		return indexView{}, r.numBlocks, r.numBlocks, nil
	}
	pt, err := r.partition(p)
	if err != nil {
		return indexView{}, 0, 0, err
	}
	if userKey != nil && !filterMayContain(pt.filter, keyHash(userKey)) {
		return indexView{}, r.numBlocks, r.numBlocks, nil
	}
	// The partition's last key is ≥ target, so the search lands in it.
	base = r.parts[p].firstBlock
	return pt.index, base + pt.index.search(target), base, nil
}

// searchKey is the encoded search key of userKey at readTS, in buf.
func searchKey(buf []byte, userKey []byte, readTS uint64) []byte {
	return kv.MakeSearchKey(userKey, readTS).Append(buf)
}

// finePartitions is the most partitions a file may have for Spans to list
// its blocks one by one: reading that many partitions costs little, and a
// small file's halves need the finer grain.
const finePartitions = 8

// Span is a run of consecutive data blocks: its last block's last user key
// and the stored bytes of its blocks (without their trailers).
type Span struct {
	LastUserKey []byte
	Bytes       int64
}

// Spans calls f with the file's data blocks in order, grouped into spans
// without reading more than a few partitions: one span per block in a
// format 1 file or a file of at most finePartitions partitions, else one
// per partition, whose bytes the top level gives.
func (r *Reader) Spans(f func(Span)) error {
	if len(r.parts) <= finePartitions {
		for p := 0; p < max(len(r.parts), 1); p++ {
			v := r.index
			if r.parts != nil {
				pt, err := r.partition(p)
				if err != nil {
					return err
				}
				v = pt.index
			}
			for j := range v.len() {
				f(Span{LastUserKey: v.lastUser(j), Bytes: int64(v.handle(j).Length)})
			}
		}
		return nil
	}
	dataStart := uint64(0)
	for p := range r.parts {
		n := uint64(r.partEnd(p) - r.parts[p].firstBlock)
		ih := r.index.handle(p)
		f(Span{LastUserKey: r.index.lastUser(p), Bytes: int64(ih.Offset - dataStart - n*trailerLen)})
		dataStart = ih.Offset + ih.Length + trailerLen
	}
	return nil
}
