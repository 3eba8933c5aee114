// Package sstable reads and writes Bellows' immutable sorted files.
//
// Layout (format 2):
//
//	([data block]* [partition])* [top-level index] [properties block] [footer]
//
// A partition covers the data blocks before it, back to the previous
// partition: a bloom filter over their user keys (filter.go) and an index
// slab (index.go) with one entry per data block, the block's last internal
// key and where it ends. The top-level index has one entry
// per partition: the key is the partition's last internal key, the value
// its handle, the number of its first data block and its first internal
// key. Only the top level stays in
// memory while the file is open; partitions are read through the block
// cache like data blocks, so a file's memory is charged to the cache's
// budget whatever its size (docs/memory.md).
//
// Format 1, still read (and written with WriterOptions.FormatVersion for a
// downgrade), has one index block with an entry per data block and one
// bloom filter, both held in memory while the file is open:
//
//	[data block]* [filter block] [index block] [properties block] [footer]
//
// Every block is followed by a 5-byte trailer: one byte of compression type
// and the CRC32C of the stored (compressed) bytes plus that type byte. Data
// blocks hold encoded internal keys (kv.InternalKey.Append) and values,
// prefix-compressed, with restart points every restartInterval entries. The
// index block has one entry per data block: the key is the block's last
// internal key, the value its handle and first internal key. The filter is a
// bloom filter over user keys. The footer is fixed-size and ends with the
// format version and a magic number, so a truncated or foreign file is
// recognised before anything else is read.
//
// Invariants:
//   - Internal keys in a file are strictly increasing (kv.Compare): the
//     writer refuses anything else. Index entries are in the same order, and
//     block i's last key is below block i+1's first.
//   - Data blocks are numbered in file order across partitions; a
//     partition's filter holds the user key of every entry of its blocks,
//     so the partition a seek for a key lands in answers for that key.
//   - A file is immutable once written. Each Reader gets its own block
//     cache file ID (blockcache.NewFileID), so cached blocks of one file are
//     never served for another.
//   - Any checksum mismatch is an error that names the file and the block
//     (CorruptionError, matching ErrCorruption); a reader never returns bytes
//     it has not verified.
package sstable

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
)

const (
	// FormatVersion is written to every footer by default; readers read it
	// and FormatVersion1 and refuse others.
	FormatVersion uint32 = 2
	// FormatVersion1 has one unpartitioned index and filter.
	FormatVersion1 uint32 = 1
	magic          uint64 = 0xbe11_05b1_0c5e_5510

	footerLen       = 3*16 + 4 + 8
	trailerLen      = 5
	restartInterval = 16
)

// Compression is the codec of one stored block.
type Compression uint8

const (
	NoCompression Compression = 0
	S2Compression Compression = 1
)

var crcTable = crc32.MakeTable(crc32.Castagnoli)

func checksum(stored []byte, typ byte) uint32 {
	c := crc32.Update(0, crcTable, stored)
	return crc32.Update(c, crcTable, byteValues[typ:typ+1])
}

// byteValues holds every byte value at its own index: checksum slices the
// type byte from it, where a []byte{typ} escaped into crc32 and cost every
// block read an allocation.
var byteValues = func() (b [256]byte) {
	for i := range b {
		b[i] = byte(i)
	}
	return b
}()

// Handle locates a stored block (without its trailer) in the file.
type Handle struct {
	Offset uint64
	Length uint64
}

func (h Handle) append(dst []byte) []byte {
	dst = binary.AppendUvarint(dst, h.Offset)
	return binary.AppendUvarint(dst, h.Length)
}

func decodeHandle(b []byte) (Handle, int, error) {
	off, n1 := binary.Uvarint(b)
	if n1 <= 0 {
		return Handle{}, 0, errors.New("bad block handle")
	}
	l, n2 := binary.Uvarint(b[n1:])
	if n2 <= 0 {
		return Handle{}, 0, errors.New("bad block handle")
	}
	return Handle{Offset: off, Length: l}, n1 + n2, nil
}

type footer struct {
	filter, index, props Handle
	version              uint32
}

func (f footer) encode() []byte {
	b := make([]byte, 0, footerLen)
	for _, h := range []Handle{f.filter, f.index, f.props} {
		b = binary.LittleEndian.AppendUint64(b, h.Offset)
		b = binary.LittleEndian.AppendUint64(b, h.Length)
	}
	b = binary.LittleEndian.AppendUint32(b, f.version)
	return binary.LittleEndian.AppendUint64(b, magic)
}

func decodeFooter(b []byte) (footer, error) {
	if len(b) != footerLen {
		return footer{}, fmt.Errorf("footer is %d bytes, want %d", len(b), footerLen)
	}
	if m := binary.LittleEndian.Uint64(b[footerLen-8:]); m != magic {
		return footer{}, fmt.Errorf("bad magic %#x: not a bellows sstable", m)
	}
	var f footer
	hs := []*Handle{&f.filter, &f.index, &f.props}
	for i, h := range hs {
		h.Offset = binary.LittleEndian.Uint64(b[i*16:])
		h.Length = binary.LittleEndian.Uint64(b[i*16+8:])
	}
	f.version = binary.LittleEndian.Uint32(b[48:])
	if f.version != FormatVersion && f.version != FormatVersion1 {
		return footer{}, fmt.Errorf("unsupported format version %d (this build reads %d and %d)", f.version, FormatVersion1, FormatVersion)
	}
	return f, nil
}

// Properties summarise a file; the manifest copies them so that compaction
// selection and routing need not open the file.
type Properties struct {
	Entries     uint64 `json:"entries"`
	Deletions   uint64 `json:"deletions"`
	DataBlocks  uint64 `json:"dataBlocks"`
	RawKeyBytes uint64 `json:"rawKeyBytes"`
	RawValBytes uint64 `json:"rawValueBytes"`
	MinTS       uint64 `json:"minTS"`
	MaxTS       uint64 `json:"maxTS"`
	Smallest    []byte `json:"smallest"`
	Largest     []byte `json:"largest"`
}
