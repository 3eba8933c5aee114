package sstable

import (
	"encoding/binary"
	"errors"
	"sort"

	"github.com/bellows-kv/bellows/storage-engine/blockcache"
	"github.com/bellows-kv/bellows/storage-engine/kv"
)

// partMeta is what the pinned top level knows of a format 2 partition
// besides its keys and its index handle (kept in the top-level slab).
type partMeta struct {
	filter     Handle
	firstBlock int
}

// meta block numbers in errors: partition p's index and filter.
func partIndexID(p int) blockID  { return blockID(-1000 - 2*p) }
func partFilterID(p int) blockID { return blockID(-1001 - 2*p) }

// decodeTopLevel reads a format 2 top-level index block into the pinned
// slab and partition list, checking that the partitions number the data
// blocks in order from 0.
func (r *Reader) decodeTopLevel(b []byte) error {
	var it blockIter
	if err := it.init(b); err != nil {
		return err
	}
	var top indexBuilder
	for ok := it.first(); ok; ok = it.nextEntry() {
		ih, n, err := decodeHandle(it.val)
		if err != nil {
			return err
		}
		fh, m, err := decodeHandle(it.val[n:])
		if err != nil {
			return err
		}
		n += m
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
		top.add(it.key, it.val[n:n+int(fl)], ih)
		r.parts = append(r.parts, partMeta{filter: fh, firstBlock: int(fb)})
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
// block cache (a compaction's input, a tool) would otherwise read two
// partitions from the file for every lookup.
func (r *Reader) pinPartitions() error {
	r.pinnedIndex = make([]indexView, len(r.parts))
	r.pinnedFilter = make([][]byte, len(r.parts))
	for p := range r.parts {
		ib, err := r.readMeta(r.index.handle(p), partIndexID(p))
		if err != nil {
			return err
		}
		if r.pinnedIndex[p], err = r.checkPartition(p, ib); err != nil {
			return err
		}
		if r.pinnedFilter[p], err = r.readMeta(r.parts[p].filter, partFilterID(p)); err != nil {
			return err
		}
	}
	return nil
}

// readMeta reads a partition's block into a buffer of its own.
func (r *Reader) readMeta(h Handle, id blockID) ([]byte, error) {
	var raw []byte
	return r.readStoredWith(h, id, &raw, nil)
}

// checkPartition checks partition p's slab: its structure, and that it
// lists the data blocks the top level says it does.
func (r *Reader) checkPartition(p int, b []byte) (indexView, error) {
	v, err := viewIndex(b)
	if err == nil && v.len() != r.partEnd(p)-r.parts[p].firstBlock {
		err = errors.New("partition lists a different number of blocks than the top level")
	}
	if err != nil {
		return indexView{}, &CorruptionError{File: r.name, Block: partIndexID(p).String(), Offset: r.index.handle(p).Offset, Reason: err.Error()}
	}
	return v, nil
}

// partEnd is the number of the data block after partition p's last.
func (r *Reader) partEnd(p int) int {
	if p+1 < len(r.parts) {
		return r.parts[p+1].firstBlock
	}
	return r.numBlocks
}

// partition returns partition p's index, from the cache when it holds it.
func (r *Reader) partition(p int) (indexView, error) {
	if r.pinnedIndex != nil {
		return r.pinnedIndex[p], nil
	}
	h := r.index.handle(p)
	k := blockcache.Key{File: r.fileID, Offset: h.Offset}
	if b, ok := r.cache.GetMeta(k); ok {
		if v, ok := viewIndexChecked(b); ok {
			return v, nil
		}
	}
	b, err := r.readMeta(h, partIndexID(p))
	if err != nil {
		return indexView{}, err
	}
	v, err := r.checkPartition(p, b)
	if err != nil {
		return indexView{}, err
	}
	r.cache.InsertMeta(k, b, r.index.lastUser(p))
	return v, nil
}

// partitionMayContain tests partition p's filter, from the cache when it
// holds it.
func (r *Reader) partitionMayContain(p int, hash uint64) (bool, error) {
	if r.pinnedFilter != nil {
		return filterMayContain(r.pinnedFilter[p], hash), nil
	}
	h := r.parts[p].filter
	k := blockcache.Key{File: r.fileID, Offset: h.Offset}
	if b, ok := r.cache.GetMeta(k); ok {
		return filterMayContain(b, hash), nil
	}
	b, err := r.readMeta(h, partFilterID(p))
	if err != nil {
		return true, err
	}
	r.cache.InsertMeta(k, b, r.index.lastUser(p))
	return filterMayContain(b, hash), nil
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
	v, err = r.partition(p)
	return v, r.parts[p].firstBlock, err
}

// seekEntries finds the first data block whose last key is ≥ target: the
// view listing it, its number and the view's first block's number. When
// every block's last key is below target, i is NumBlocks().
func (r *Reader) seekEntries(target []byte) (v indexView, i, base int, err error) {
	if r.parts == nil {
		i = r.index.search(target)
		return r.index, i, 0, nil
	}
	p := r.index.search(target)
	if p == len(r.parts) {
		return indexView{}, r.numBlocks, r.numBlocks, nil
	}
	v, err = r.partition(p)
	if err != nil {
		return indexView{}, 0, 0, err
	}
	// The partition's last key is ≥ target, so the search lands in it.
	base = r.parts[p].firstBlock
	return v, base + v.search(target), base, nil
}

// mayContain tests the filter that answers for userKey read at readTS: a
// format 1 file's one filter, or the filter of the partition where a seek
// for it lands. ok is false when no block can hold it.
func (r *Reader) mayContain(userKey []byte, target []byte) (bool, error) {
	if r.parts == nil {
		return r.filter.Test(userKey), nil
	}
	p := r.index.search(target)
	if p == len(r.parts) {
		return false, nil
	}
	return r.partitionMayContain(p, keyHash(userKey))
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
			v, err := r.index, error(nil)
			if r.parts != nil {
				if v, err = r.partition(p); err != nil {
					return err
				}
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
		f(Span{LastUserKey: r.index.lastUser(p), Bytes: int64(r.parts[p].filter.Offset - dataStart - n*trailerLen)})
		ih := r.index.handle(p)
		dataStart = ih.Offset + ih.Length + trailerLen
	}
	return nil
}
