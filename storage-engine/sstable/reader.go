package sstable

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync/atomic"

	"github.com/bits-and-blooms/bloom/v3"
	"github.com/klauspost/compress/s2"

	"github.com/bellows-kv/bellows/storage-engine/blockcache"
	"github.com/bellows-kv/bellows/storage-engine/kv"
)

// CorruptionError names the file and block whose bytes failed verification.
type CorruptionError struct {
	File   string
	Block  string // "data block 3", "index block", ...
	Offset uint64
	Reason string
}

func (e *CorruptionError) Error() string {
	return fmt.Sprintf("sstable %s: %s at offset %d: %s", e.File, e.Block, e.Offset, e.Reason)
}

// ErrCorruption matches every *CorruptionError with errors.Is.
var ErrCorruption = errors.New("sstable corruption")

func (e *CorruptionError) Is(target error) bool { return target == ErrCorruption }

// Reader serves point lookups and iteration over one SST. It is safe for
// concurrent use.
type Reader struct {
	// remote, when set, serves cache misses before the file is read: the
	// compaction worker's memory acting as a remote block cache.
	remote    atomic.Pointer[RemoteBlocks]
	name      string
	fileID    uint64
	r         io.ReaderAt
	size      int64
	cache     *blockcache.Cache
	version   uint32
	numBlocks int
	// index is pinned: format 1's entry per data block, or format 2's top
	// level, an entry per partition (whose handle is the partition's index).
	index  indexView
	parts  []partMeta         // format 2
	filter *bloom.BloomFilter // format 1
	// Format 2 without a block cache: every partition, pinned.
	pinned []partition
	props  Properties
}

// Open reads the footer, index, filter and properties of the SST in r. name
// is used in errors; cache may be nil.
func Open(r io.ReaderAt, size int64, name string, cache *blockcache.Cache) (*Reader, error) {
	return OpenWithFileID(r, size, name, cache, blockcache.NewFileID())
}

// OpenWithFileID is Open with the file's cache ID chosen by the caller
// (blockcache.NewFileID): the ID under which the file's blocks were cached
// as they were written (WriterOptions.OnDataBlock), so the reader finds them.
func OpenWithFileID(r io.ReaderAt, size int64, name string, cache *blockcache.Cache, fileID uint64) (*Reader, error) {
	rd := &Reader{name: name, fileID: fileID, r: r, size: size, cache: cache}
	if size < footerLen {
		return nil, &CorruptionError{File: name, Block: "footer", Reason: fmt.Sprintf("file is %d bytes, shorter than a footer", size)}
	}
	fb := make([]byte, footerLen)
	if _, err := r.ReadAt(fb, size-footerLen); err != nil {
		return nil, fmt.Errorf("sstable %s: reading footer: %w", name, err)
	}
	f, err := decodeFooter(fb)
	if err != nil {
		return nil, &CorruptionError{File: name, Block: "footer", Offset: uint64(size - footerLen), Reason: err.Error()}
	}
	rd.version = f.version
	pb, err := rd.readStored(f.props, propsBlock)
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(pb, &rd.props); err != nil {
		return nil, &CorruptionError{File: name, Block: "properties block", Offset: f.props.Offset, Reason: err.Error()}
	}
	ib, err := rd.readStored(f.index, indexBlock)
	if err != nil {
		return nil, err
	}
	if f.version == FormatVersion1 {
		err = rd.decodeIndex(ib)
	} else {
		rd.numBlocks = int(rd.props.DataBlocks)
		err = rd.decodeTopLevel(ib)
	}
	if err != nil {
		return nil, &CorruptionError{File: name, Block: "index block", Offset: f.index.Offset, Reason: err.Error()}
	}
	if f.version == FormatVersion1 {
		filt, err := rd.readStored(f.filter, filterBlock)
		if err != nil {
			return nil, err
		}
		rd.filter = &bloom.BloomFilter{}
		if err := rd.filter.UnmarshalBinary(filt); err != nil {
			return nil, &CorruptionError{File: name, Block: "filter block", Offset: f.filter.Offset, Reason: err.Error()}
		}
	} else if cache == nil || cache.Capacity() <= 0 {
		if err := rd.pinPartitions(); err != nil {
			return nil, err
		}
	}
	return rd, nil
}

// decodeIndex reads a format 1 index block into the pinned slab.
func (r *Reader) decodeIndex(b []byte) error {
	var it blockIter
	if err := it.init(b); err != nil {
		return err
	}
	x := indexBuilder{flags: slabFirstKeys}
	for ok := it.first(); ok; ok = it.nextEntry() {
		h, n, err := decodeHandle(it.val)
		if err != nil {
			return err
		}
		fl, m := binary.Uvarint(it.val[n:])
		if m <= 0 || uint64(len(it.val)-n-m) < fl {
			return errCorruptBlock
		}
		x.add(it.key, it.val[n+m:n+m+int(fl)], h)
	}
	if it.err != nil {
		return it.err
	}
	if x.len() == 0 {
		return errors.New("index has no entries")
	}
	v, err := viewIndex(x.appendSlab(nil))
	r.index, r.numBlocks = v, x.len()
	return err
}

// blockID names a block in errors: a data block's index, or one of the
// named blocks. Data reads pass it instead of a formatted name, which cost
// a fmt.Sprintf per cache miss.
type blockID int

const (
	indexBlock blockID = -1 - iota
	filterBlock
	propsBlock
)

func (id blockID) String() string {
	switch id {
	case indexBlock:
		return "index block"
	case filterBlock:
		return "filter block"
	case propsBlock:
		return "properties block"
	}
	if id <= -1000 {
		return fmt.Sprintf("partition %d", -1000-int(id))
	}
	return blockName(int(id))
}

// readBufs holds buffers for stored blocks read from the file: a
// compressed block's stored bytes are garbage once decompressed, so a
// cache miss reuses one instead of allocating it. A bounded free list,
// not a sync.Pool: the GC empties a pool, so the first misses of every
// cycle, in its mark phase, allocated again, and an allocation then can
// make the reading goroutine assist the GC and queue behind the end of
// its mark phase (docs/memstore.md). At most readBufCount
// buffers of at most readBufMaxBytes stay allocated: 2 MiB.
var readBufs = make(chan *[]byte, readBufCount)

const (
	// readBufCount is about the misses in flight at once on a busy
	// store; more allocate.
	readBufCount = 16
	// readBufMaxBytes keeps a block of large values from pinning its
	// buffer: four default 32 KiB blocks.
	readBufMaxBytes = 128 << 10
)

func getReadBuf() *[]byte {
	select {
	case bp := <-readBufs:
		return bp
	default:
		return new([]byte)
	}
}

func putReadBuf(bp *[]byte) {
	if cap(*bp) > readBufMaxBytes {
		return
	}
	select {
	case readBufs <- bp:
	default:
	}
}

// readStored reads and verifies one stored block, returning it decompressed.
func (r *Reader) readStored(h Handle, id blockID) ([]byte, error) {
	bp := getReadBuf()
	out, err := r.readStoredWith(h, id, bp, nil)
	if err != nil || !aliases(out, *bp) {
		// out is a new buffer (or nothing): the stored bytes can be reused.
		putReadBuf(bp)
	}
	return out, err
}

// readStoredWith reads stored block h into *raw, which it grows as needed,
// and decodes it into *dst when dst is set (growing it too), else into a
// new buffer, or in place for an uncompressed block: the block returned is
// then *raw's.
func (r *Reader) readStoredWith(h Handle, id blockID, raw, dst *[]byte) ([]byte, error) {
	if h.Offset+h.Length+trailerLen > uint64(r.size) {
		return nil, &CorruptionError{File: r.name, Block: id.String(), Offset: h.Offset, Reason: "block extends past the end of the file"}
	}
	n := int(h.Length + trailerLen)
	if cap(*raw) < n {
		*raw = make([]byte, n)
	}
	buf := (*raw)[:n]
	if _, err := r.r.ReadAt(buf, int64(h.Offset)); err != nil {
		return nil, fmt.Errorf("sstable %s: reading %s at offset %d: %w", r.name, id, h.Offset, err)
	}
	var into []byte
	if dst != nil {
		into = (*dst)[:cap(*dst)]
	}
	out, err := r.decodeStoredInto(buf, h, id, into)
	if err == nil && dst != nil && !aliases(out, buf) {
		*dst = out
	}
	return out, err
}

// aliases reports whether a block returned by readStoredWith is in the
// stored bytes' buffer (an uncompressed block, decoded in place).
func aliases(out, raw []byte) bool {
	return len(out) > 0 && cap(raw) > 0 && &out[0] == &raw[:1][0]
}

// decodeStored verifies the trailer of a stored block (block bytes followed by
// the trailer) and decompresses it. An uncompressed block is returned in
// place.
func (r *Reader) decodeStored(buf []byte, h Handle, id blockID) ([]byte, error) {
	return r.decodeStoredInto(buf, h, id, nil)
}

// decodeStoredInto is decodeStored decompressing into dst when it is long
// enough (s2.Decode's rule), into a new buffer otherwise.
func (r *Reader) decodeStoredInto(buf []byte, h Handle, id blockID, dst []byte) ([]byte, error) {
	if uint64(len(buf)) != h.Length+trailerLen {
		return nil, &CorruptionError{File: r.name, Block: id.String(), Offset: h.Offset, Reason: fmt.Sprintf("stored block is %d bytes, want %d", len(buf), h.Length+trailerLen)}
	}
	stored, tr := buf[:h.Length], buf[h.Length:]
	want := binary.LittleEndian.Uint32(tr[1:])
	if got := checksum(stored, tr[0]); got != want {
		return nil, &CorruptionError{File: r.name, Block: id.String(), Offset: h.Offset, Reason: fmt.Sprintf("checksum mismatch (stored %08x, computed %08x)", want, got)}
	}
	switch Compression(tr[0]) {
	case NoCompression:
		return stored, nil
	case S2Compression:
		out, err := s2.Decode(dst, stored)
		if err != nil {
			return nil, &CorruptionError{File: r.name, Block: id.String(), Offset: h.Offset, Reason: "decompress: " + err.Error()}
		}
		return out, nil
	}
	return nil, &CorruptionError{File: r.name, Block: id.String(), Offset: h.Offset, Reason: fmt.Sprintf("unknown compression %d", tr[0])}
}

func blockName(i int) string { return fmt.Sprintf("data block %d", i) }

// block returns data block i, which v lists at entry i-base, decoded, from
// the cache when possible. ctx is the reading request's: it bounds only the
// remote read, which may wait on the network; the file read is the
// fallback that must answer.
func (r *Reader) block(ctx context.Context, i int, v indexView, base int) ([]byte, error) {
	h, lastUser := v.handle(i-base), v.lastUser(i-base)
	k := blockcache.Key{File: r.fileID, Offset: h.Offset}
	if b, ok := r.cache.Get(k); ok {
		return b, nil
	}
	if src := r.remote.Load(); src != nil {
		stored, err := (*src)(ctx, i)
		if err == nil {
			if b, err := r.decodeStored(stored, h, blockID(i)); err == nil {
				if Compression(stored[len(stored)-trailerLen]) == NoCompression {
					b = bytes.Clone(b)
				}
				r.cache.Insert(k, b, lastUser)
				r.cache.CountMissRead(true)
				return b, nil
			}
		} else if ctx.Err() != nil {
			// The client gave up: no one waits for the file read either.
			return nil, ctx.Err()
		}
		// The worker is slow, gone or sent a bad block: the file is the
		// truth. The source decides when to try the worker again, so one
		// failure does not give up the remote cache for the file's life.
	}
	b, err := r.readStored(h, blockID(i))
	if err != nil {
		return nil, err
	}
	r.cache.Insert(k, b, lastUser)
	r.cache.CountMissRead(false)
	return b, nil
}

// RemoteBlocks returns stored data block i from a remote cache. It should
// fail fast (a deadline, a circuit breaker) rather than wait on a worker
// that does not answer: every miss on the file waits for it.
type RemoteBlocks func(ctx context.Context, i int) ([]byte, error)

// SetRemote makes cache misses read from src first (nil: stop); a miss src
// fails is read from the file.
func (r *Reader) SetRemote(src RemoteBlocks) {
	if src == nil {
		r.remote.Store(nil)
		return
	}
	r.remote.Store(&src)
}

// LoadBlockFromFile reads data block i from the file into the cache and
// returns its stored size: warmup from the bucket.
func (r *Reader) LoadBlockFromFile(i int) (int, error) {
	h, lastUser, err := r.blockEntry(i)
	if err != nil {
		return 0, err
	}
	b, err := r.readStored(h, blockID(i))
	if err != nil {
		return 0, err
	}
	r.cache.Insert(blockcache.Key{File: r.fileID, Offset: h.Offset}, b, lastUser)
	return int(h.Length) + trailerLen, nil
}

// blockEntry returns data block i's handle and last user key.
func (r *Reader) blockEntry(i int) (Handle, []byte, error) {
	if i < 0 || i >= r.numBlocks {
		return Handle{}, nil, fmt.Errorf("sstable %s: no data block %d (the file has %d)", r.name, i, r.numBlocks)
	}
	v, base, err := r.entries(i)
	if err != nil {
		return Handle{}, nil, err
	}
	return v.handle(i - base), v.lastUser(i - base), nil
}

// MemoryBytes is what the reader holds outside the block cache: the pinned
// index (format 1's whole index and filter, format 2's top level, or every
// partition when there is no cache).
func (r *Reader) MemoryBytes() int64 {
	n := r.index.memoryBytes() + int64(8*cap(r.parts))
	if r.filter != nil {
		n += int64(r.filter.Cap() / 8)
	}
	for _, pt := range r.pinned {
		n += int64(cap(pt.filter))
	}
	return n
}

// FormatVersion is the file's format.
func (r *Reader) FormatVersion() uint32 { return r.version }

// Name is the file's name as used in errors.
func (r *Reader) Name() string { return r.name }

// FileID is the file's block cache ID.
func (r *Reader) FileID() uint64 { return r.fileID }

// Properties returns the file's properties block.
func (r *Reader) Properties() Properties { return r.props }

// Size is the file's length in bytes.
func (r *Reader) Size() int64 { return r.size }

// NumBlocks is the number of data blocks.
func (r *Reader) NumBlocks() int { return r.numBlocks }

// BlockLastUserKey returns the last user key of data block i. It reads the
// block's index partition (through the cache) in a format 2 file.
func (r *Reader) BlockLastUserKey(i int) ([]byte, error) {
	_, last, err := r.blockEntry(i)
	return last, err
}

// BlockHandle returns the location of data block i (without its trailer).
func (r *Reader) BlockHandle(i int) (Handle, error) {
	h, _, err := r.blockEntry(i)
	return h, err
}

// ReadStoredBlock returns data block i exactly as stored (compressed, with
// its trailer): what a compaction worker streams to a storage pod.
func (r *Reader) ReadStoredBlock(i int) ([]byte, error) {
	h, _, err := r.blockEntry(i)
	if err != nil {
		return nil, err
	}
	buf := make([]byte, h.Length+trailerLen)
	if _, err := r.r.ReadAt(buf, int64(h.Offset)); err != nil {
		return nil, fmt.Errorf("sstable %s: reading %s: %w", r.name, blockName(i), err)
	}
	return buf, nil
}

// InsertStoredBlock verifies a stored block of this file that arrived from
// elsewhere (a worker's memory) and inserts it into the cache.
func (r *Reader) InsertStoredBlock(i int, stored []byte) error {
	h, last, err := r.blockEntry(i)
	if err != nil {
		return err
	}
	b, err := r.decodeStored(stored, h, blockID(i))
	if err != nil {
		return err
	}
	if Compression(stored[len(stored)-trailerLen]) == NoCompression {
		b = bytes.Clone(b)
	}
	r.cache.Insert(blockcache.Key{File: r.fileID, Offset: h.Offset}, b, last)
	return nil
}

// EvictBlocksThrough evicts data blocks in order from block from while
// their last user key is ≤ upTo, and returns the number of the first block
// it kept (NumBlocks when it evicted every one): an incremental warmup's
// threshold passing upTo. It reads each partition once, not once a block;
// one that cannot be read stops it, as eviction only makes room.
func (r *Reader) EvictBlocksThrough(from int, upTo []byte) int {
	i := from
	for i < r.numBlocks {
		v, base, err := r.entries(i)
		if err != nil {
			return i
		}
		for ; i-base < v.len(); i++ {
			if bytes.Compare(v.lastUser(i-base), upTo) > 0 {
				return i
			}
			r.cache.Evict(blockcache.Key{File: r.fileID, Offset: v.handle(i - base).Offset})
		}
	}
	return i
}

// CachedBlocks is how many of the file's data blocks the cache holds,
// counted from the cache's per-file index without reading a partition.
func (r *Reader) CachedBlocks() int { return r.cache.FileBlocks(r.fileID) }

// BlockCached reports whether data block i is in the cache.
func (r *Reader) BlockCached(i int) bool {
	h, _, err := r.blockEntry(i)
	return err == nil && r.cache.Contains(blockcache.Key{File: r.fileID, Offset: h.Offset})
}

// MayContain consults the bloom filter that answers for userKey's newest
// version. A filter that cannot be read answers yes: the read that follows
// reports the error.
func (r *Reader) MayContain(userKey []byte) bool {
	var sk [64]byte
	_, i, _, err := r.seekEntries(searchKey(sk[:0], userKey, kv.MaxTimestamp), userKey)
	return i < r.numBlocks || err != nil
}

// Get is GetContext without a request context.
func (r *Reader) Get(userKey []byte, readTS uint64) (value []byte, kind kv.Kind, found bool, err error) {
	return r.GetContext(context.Background(), userKey, readTS)
}

// GetContext is GetVersionContext without the version's timestamp.
func (r *Reader) GetContext(ctx context.Context, userKey []byte, readTS uint64) (value []byte, kind kv.Kind, found bool, err error) {
	value, kind, _, found, err = r.GetVersionContext(ctx, userKey, readTS)
	return value, kind, found, err
}

// GetVersionContext returns the newest version of userKey with timestamp
// ≤ readTS, and that timestamp. The value aliases a cached block, which is
// immutable. ctx is the request's: ending it abandons a remote block read.
func (r *Reader) GetVersionContext(ctx context.Context, userKey []byte, readTS uint64) (value []byte, kind kv.Kind, ts uint64, found bool, err error) {
	var sk [64]byte
	target := searchKey(sk[:0], userKey, readTS)
	v, i, base, err := r.seekEntries(target, userKey)
	if err != nil || i == r.numBlocks {
		return nil, 0, 0, false, err
	}
	b, err := r.block(ctx, i, v, base)
	if err != nil {
		return nil, 0, 0, false, err
	}
	var it blockIter
	if err := it.init(b); err != nil {
		return nil, 0, 0, false, &CorruptionError{File: r.name, Block: blockName(i), Offset: v.handle(i - base).Offset, Reason: err.Error()}
	}
	// The block's last key is ≥ target, so the seek always lands in it.
	if !it.seekGE(target) {
		if it.err != nil {
			return nil, 0, 0, false, &CorruptionError{File: r.name, Block: blockName(i), Offset: v.handle(i - base).Offset, Reason: it.err.Error()}
		}
		return nil, 0, 0, false, nil
	}
	if !bytes.Equal(it.ikey.UserKey, userKey) {
		return nil, 0, 0, false, nil
	}
	return it.val, it.ikey.Kind, it.ikey.TS, true, nil
}
