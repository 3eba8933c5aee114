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
	return o
}

// Writer builds an SST from internal keys added in strictly increasing order.
type Writer struct {
	w       io.Writer
	opts    WriterOptions
	offset  uint64
	block   blockBuilder
	index   blockBuilder
	filter  *bloom.BloomFilter
	props   Properties
	first   []byte // first key of the pending block
	lastKey []byte
	lastUK  []byte
	scratch []byte
	cbuf    []byte
	err     error
}

// NewWriter returns a writer that streams the file to w.
func NewWriter(w io.Writer, opts WriterOptions) *Writer {
	opts = opts.withDefaults()
	return &Writer{
		w:      w,
		opts:   opts,
		filter: bloom.NewWithEstimates(opts.ExpectedKeys, opts.BloomFalsePositive),
		props:  Properties{MinTS: ^uint64(0)},
	}
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
	if !bytes.Equal(w.lastUK, key.UserKey) {
		w.filter.Add(key.UserKey)
		w.lastUK = append(w.lastUK[:0], key.UserKey...)
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
	// Index entry: key = last key of the block; value = handle + first key.
	v := h.append(nil)
	v = binary.AppendUvarint(v, uint64(len(w.first)))
	v = append(v, w.first...)
	w.index.add(w.lastKey, v)
	w.props.DataBlocks++
	w.block.reset()
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
	fb, err := w.filter.MarshalBinary()
	if err != nil {
		return Properties{}, 0, err
	}
	var f footer
	f.version = FormatVersion
	if f.filter, _, _, err = w.writeBlock(fb, NoCompression); err != nil {
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
