package sstable

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/bits-and-blooms/bloom/v3"
	"github.com/klauspost/compress/s2"

	"github.com/bellows-kv/bellows/storage-engine/kv"
)

// WriterOptions configure an SST writer.
type WriterOptions struct {
	// BlockSize is the target uncompressed size of a data block.
	BlockSize int
	// Compression of data blocks; the other blocks are stored uncompressed.
	Compression Compression
	// BloomFalsePositive is the filter's target false-positive rate.
	BloomFalsePositive float64
	// ExpectedKeys sizes the bloom filter; an estimate is fine.
	ExpectedKeys uint
	// OnDataBlock, when set, is called after each data block is written
	// with its offset in the file, its contents as a block cache holds them
	// (uncompressed) and its last user key: how a write-through cache
	// takes each block as it is written. Both slices are the writer's
	// buffers, valid only during the call.
	OnDataBlock func(offset uint64, block, lastUserKey []byte)
	// OnStoredDataBlock, when set, is called after each data block is
	// written with its handle and its bytes as the file stores them
	// (compressed, then the trailer) and its last user key: how a
	// compaction worker keeps its output's blocks without holding the
	// whole file. The slices are the writer's buffers, valid only during
	// the call.
	OnStoredDataBlock func(h Handle, stored, trailer, lastUserKey []byte)
	// FormatVersion is the format written: FormatVersion by default, or
	// FormatVersion1 for a reader that predates partitions (a downgrade).
	FormatVersion uint32
	// PartitionBytes is the target size of a format 2 index partition and
	// of its filter: a partition is cut after the data block that takes
	// either past it.
	PartitionBytes int
}

func (o WriterOptions) withDefaults() WriterOptions {
	if o.BlockSize <= 0 {
		o.BlockSize = 32 << 10
	}
	if o.BloomFalsePositive <= 0 {
		o.BloomFalsePositive = 0.01
	}
	if o.ExpectedKeys == 0 {
		o.ExpectedKeys = 100_000
	}
	if o.FormatVersion == 0 {
		o.FormatVersion = FormatVersion
	}
	if o.PartitionBytes <= 0 {
		o.PartitionBytes = 4 << 10
	}
	return o
}

// Writer builds an SST from internal keys added in strictly increasing order.
type Writer struct {
	w      io.Writer
	opts   WriterOptions
	offset uint64
	block  blockBuilder
	index  blockBuilder       // format 1: the index; format 2: its top level
	filter *bloom.BloomFilter // format 1
	props  Properties
	// Format 2: the pending partition's index entries and its keys'
	// hashes, and whether its filter holds lastUK yet (a user key whose
	// versions straddle two partitions is in both filters).
	part       indexBuilder
	partHashes []uint64
	partHasUK  bool
	partBlock  int    // the number of the partition's first data block
	partFirst  []byte // its first internal key
	bitsPerKey int
	first      []byte // first key of the pending block
	lastKey    []byte
	lastUK     []byte
	scratch    []byte
	meta       []byte // a partition block as written
	cbuf       []byte
	err        error
}

// NewWriter returns a writer that streams the file to w.
func NewWriter(w io.Writer, opts WriterOptions) *Writer {
	opts = opts.withDefaults()
	w2 := &Writer{w: w, opts: opts, props: Properties{MinTS: ^uint64(0)}, bitsPerKey: bitsPerKey(opts.BloomFalsePositive)}
	switch opts.FormatVersion {
	case FormatVersion1:
		w2.filter = bloom.NewWithEstimates(opts.ExpectedKeys, opts.BloomFalsePositive)
	case FormatVersion:
	default:
		w2.err = fmt.Errorf("sstable: cannot write format version %d (this build writes %d and %d)", opts.FormatVersion, FormatVersion1, FormatVersion)
	}
	return w2
}

// Add appends one version. Keys must arrive in strictly increasing
// kv.Compare order.
func (w *Writer) Add(key kv.InternalKey, value []byte) error {
	if w.err != nil {
		return w.err
	}
	w.scratch = key.Append(w.scratch[:0])
	if w.lastKey != nil && kv.CompareEncoded(w.lastKey, w.scratch) >= 0 {
		w.err = fmt.Errorf("sstable: keys out of order: %v after %x", key, w.lastKey)
		return w.err
	}
	if w.block.entries == 0 {
		w.first = append(w.first[:0], w.scratch...)
	}
	w.block.add(w.scratch, value)
	w.lastKey = append(w.lastKey[:0], w.scratch...)
	if !w.partHasUK || !bytes.Equal(w.lastUK, key.UserKey) {
		if w.filter != nil {
			w.filter.Add(key.UserKey)
		} else {
			w.partHashes = append(w.partHashes, keyHash(key.UserKey))
		}
		w.lastUK = append(w.lastUK[:0], key.UserKey...)
		w.partHasUK = true
	}
	p := &w.props
	if p.Entries == 0 {
		p.Smallest = bytes.Clone(key.UserKey)
	}
	p.Largest = append(p.Largest[:0], key.UserKey...)
	p.Entries++
	if key.Kind == kv.KindDelete {
		p.Deletions++
	}
	p.RawKeyBytes += uint64(len(key.UserKey))
	p.RawValBytes += uint64(len(value))
	p.MinTS = min(p.MinTS, key.TS)
	p.MaxTS = max(p.MaxTS, key.TS)
	if w.block.size() >= w.opts.BlockSize {
		return w.flushBlock()
	}
	return nil
}

// EstimatedSize is the number of bytes written so far plus the pending block.
func (w *Writer) EstimatedSize() uint64 { return w.offset + uint64(w.block.size()) }

func (w *Writer) flushBlock() error {
	if w.block.entries == 0 {
		return nil
	}
	raw := w.block.finish()
	h, stored, tr, err := w.writeBlock(raw, w.opts.Compression)
	if err != nil {
		return err
	}
	if w.opts.OnStoredDataBlock != nil {
		w.opts.OnStoredDataBlock(h, stored, tr[:], kv.UserKey(w.lastKey))
	}
	if w.opts.OnDataBlock != nil {
		w.opts.OnDataBlock(h.Offset, raw, kv.UserKey(w.lastKey))
	}
	if w.part.len() == 0 {
		w.partFirst = append(w.partFirst[:0], w.first...)
	}
	w.props.DataBlocks++
	w.block.reset()
	if w.filter != nil {
		// Format 1 index entry: key = last key of the block; value =
		// handle + first key.
		v := h.append(nil)
		v = binary.AppendUvarint(v, uint64(len(w.first)))
		v = append(v, w.first...)
		w.index.add(w.lastKey, v)
		return nil
	}
	w.part.flags = slabContiguous
	w.part.add(w.lastKey, nil, h)
	// A partition's ends are 32-bit: cut it well before its blocks reach
	// 2 GiB (blocks of huge values).
	if w.part.size() >= w.opts.PartitionBytes || len(w.partHashes)*w.bitsPerKey/8 >= w.opts.PartitionBytes || w.part.span() >= 1<<31 {
		return w.flushPartition()
	}
	return nil
}

// flushPartition writes the pending partition (its filter, its index
// slab and the filter's length) and adds its top-level entry: key = the
// partition's last key; value = its handle + the number of its first data
// block + its first key.
func (w *Writer) flushPartition() error {
	n := w.part.len()
	if n == 0 {
		return nil
	}
	w.meta = appendFilter(w.meta[:0], w.partHashes, w.bitsPerKey)
	fl := len(w.meta)
	w.meta = w.part.appendSlab(w.meta)
	w.meta = binary.LittleEndian.AppendUint32(w.meta, uint32(fl))
	ph, _, _, err := w.writeBlock(w.meta, NoCompression)
	if err != nil {
		return err
	}
	v := ph.append(nil)
	v = binary.AppendUvarint(v, uint64(w.partBlock))
	v = binary.AppendUvarint(v, uint64(len(w.partFirst)))
	v = append(v, w.partFirst...)
	w.index.add(w.part.last(n-1), v)
	w.part.reset()
	w.partHashes, w.partHasUK = w.partHashes[:0], false
	w.partBlock = int(w.props.DataBlocks)
	return nil
}

func (w *Writer) writeBlock(raw []byte, c Compression) (Handle, []byte, [trailerLen]byte, error) {
	stored := raw
	if c == S2Compression {
		w.cbuf = s2.Encode(w.cbuf[:cap(w.cbuf)], raw)
		// Keep the raw block when compression does not pay for itself.
		if len(w.cbuf) < len(raw)-len(raw)/8 {
			stored = w.cbuf
		} else {
			c = NoCompression
		}
	}
	var tr [trailerLen]byte
	tr[0] = byte(c)
	binary.LittleEndian.PutUint32(tr[1:], checksum(stored, tr[0]))
	h := Handle{Offset: w.offset, Length: uint64(len(stored))}
	if _, err := w.w.Write(stored); err != nil {
		w.err = err
		return Handle{}, nil, tr, err
	}
	if _, err := w.w.Write(tr[:]); err != nil {
		w.err = err
		return Handle{}, nil, tr, err
	}
	w.offset += uint64(len(stored)) + trailerLen
	return h, stored, tr, nil
}

// Finish writes the filter, index, properties and footer. The writer must not
// be used afterwards.
func (w *Writer) Finish() (Properties, uint64, error) {
	if w.err != nil {
		return Properties{}, 0, w.err
	}
	if w.props.Entries == 0 {
		return Properties{}, 0, errors.New("sstable: refusing to write an empty table")
	}
	if err := w.flushBlock(); err != nil {
		return Properties{}, 0, err
	}
	f := footer{version: w.opts.FormatVersion}
	var err error
	if w.filter != nil {
		fb, err := w.filter.MarshalBinary()
		if err != nil {
			return Properties{}, 0, err
		}
		if f.filter, _, _, err = w.writeBlock(fb, NoCompression); err != nil {
			return Properties{}, 0, err
		}
	} else if err := w.flushPartition(); err != nil {
		return Properties{}, 0, err
	}
	if f.index, _, _, err = w.writeBlock(w.index.finish(), NoCompression); err != nil {
		return Properties{}, 0, err
	}
	pb, err := json.Marshal(w.props)
	if err != nil {
		return Properties{}, 0, err
	}
	if f.props, _, _, err = w.writeBlock(pb, NoCompression); err != nil {
		return Properties{}, 0, err
	}
	if _, err := w.w.Write(f.encode()); err != nil {
		return Properties{}, 0, err
	}
	w.offset += footerLen
	w.err = errors.New("sstable: writer already finished")
	return w.props, w.offset, nil
}
