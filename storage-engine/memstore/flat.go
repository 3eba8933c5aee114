package memstore

// Invariants of a flat segment:
//   - entries is sorted by kv.Compare of the keys it names and never
//     changes; neither do the chunk bytes an entry names.
//   - Every user key of the segment starts with shared, and an entry's
//     prefix is keyPrefix of its user key after shared: so two entries of
//     one segment, or of two segments with the same shared, order by
//     prefix whenever their prefixes differ.
//   - entries holds no pointers (keys and values are named by loc into
//     chunks), so the garbage collector scans a flat segment's index in
//     no time however many versions it holds: a few chunk pointers remain.

import (
	"bytes"
	"sort"

	"github.com/bits-and-blooms/bloom/v3"

	"github.com/bellows-kv/bellows/storage-engine/iterator"
	"github.com/bellows-kv/bellows/storage-engine/kv"
)

// flatEntryBytes is the index cost of one version in a flat segment
// (unsafe.Sizeof(flatEntry{})), against a skiplist node's nodeOverhead.
const flatEntryBytes = 32

// keyFilterFalsePositive is the false-positive rate of a flat segment's
// key filter: about 10 bits a key, under 1% of a segment's memory.
const keyFilterFalsePositive = 0.01

// flatEntry.klen holds the key's length (keys are < 64 KiB) and, from
// kindShift up, the version's kind.
const (
	kindShift = 28
	lenMask   = 1<<kindShift - 1
)

type flatEntry struct {
	// prefix is as node.prefix, but of the user key after the segment's
	// shared bytes: keys that share their first 8 bytes (a table or tenant
	// prefix, "user0000…") still differ here, so a binary search compares
	// these words in the index and reads one key from the chunks at most.
	prefix uint64
	ts     uint64
	at     loc    // key then value
	klen   uint32 // | kind << kindShift
	vlen   uint32
}

func (e *flatEntry) kind() kv.Kind { return kv.Kind(e.klen >> kindShift) }

func (e *flatEntry) keyLen() int { return int(e.klen & lenMask) }

// flat is an immutable segment: a sorted array over pointer-free chunks,
// searched by binary search (Accordion's flat index; HBase's CellChunkMap).
type flat struct {
	entries []flatEntry
	chunks  [][]byte
	// shared is the longest prefix of every user key in the segment (of
	// the first and the last, which are sorted), not part of prefix.
	shared    []byte
	dataBytes int64 // key and value bytes of the entries
	uniques   int   // distinct user keys
	minTS     uint64
	maxTS     uint64
	// filter (always set: newFilter) holds every user key of the segment: a get of a key the
	// segment does not hold (on a pipeline of several segments, most of
	// them) answers without a binary search. filterBytes is its size.
	filter      *bloom.BloomFilter
	filterBytes int64
	// merged: built by a merge or compaction of segments, so uniques
	// measures the redundancy across them (Adaptive's u).
	merged bool
}

var _ segment = (*flat)(nil)

func (f *flat) userKey(e *flatEntry) []byte {
	c := f.chunks[e.at.chunk()]
	o := e.at.off()
	n := e.keyLen()
	return c[o : o+n : o+n]
}

func (f *flat) value(e *flatEntry) []byte {
	c := f.chunks[e.at.chunk()]
	o := e.at.off() + e.keyLen()
	n := int(e.vlen)
	return c[o : o+n : o+n]
}

func (f *flat) key(e *flatEntry) kv.InternalKey {
	return kv.InternalKey{UserKey: f.userKey(e), TS: e.ts, Kind: e.kind()}
}

// compare orders entry e against key, whose user key starts with f.shared
// and whose prefix after it is kp, like kv.Compare.
func (f *flat) compare(e *flatEntry, key kv.InternalKey, kp uint64) int {
	if e.prefix != kp {
		if e.prefix < kp {
			return -1
		}
		return 1
	}
	return kv.Compare(f.key(e), key)
}

// seekGE is the index of the first entry ≥ key, or len(entries).
func (f *flat) seekGE(key kv.InternalKey) int {
	if !bytes.HasPrefix(key.UserKey, f.shared) {
		// Every key of f starts with shared, so key is below them all or
		// above them all.
		if bytes.Compare(key.UserKey, f.shared) < 0 {
			return 0
		}
		return len(f.entries)
	}
	kp := keyPrefix(key.UserKey[len(f.shared):])
	return sort.Search(len(f.entries), func(i int) bool { return f.compare(&f.entries[i], key, kp) >= 0 })
}

func (f *flat) Get(userKey []byte, readTS uint64) ([]byte, kv.Kind, bool) {
	val, k, _, ok := f.GetVersion(userKey, readTS)
	return val, k, ok
}

func (f *flat) GetVersion(userKey []byte, readTS uint64) ([]byte, kv.Kind, uint64, bool) {
	if !f.filter.Test(userKey) {
		return nil, 0, 0, false
	}
	i := f.seekGE(kv.MakeSearchKey(userKey, readTS))
	if i == len(f.entries) || !bytes.Equal(f.userKey(&f.entries[i]), userKey) {
		return nil, 0, 0, false
	}
	e := &f.entries[i]
	return f.value(e), e.kind(), e.ts, true
}

func (f *flat) ApproximateBytes() int64 {
	if len(f.entries) == 0 {
		return 0
	}
	return f.dataBytes + flatEntryBytes*int64(len(f.entries)) + f.filterBytes
}
func (f *flat) Len() int64                     { return int64(len(f.entries)) }
func (f *flat) tsRange() (uint64, uint64)      { return f.minTS, f.maxTS }
func (f *flat) NewIterator() iterator.Iterator { return &flatIter{f: f, i: -1} }

// flatten builds the flat segment of s, whose writers have all finished.
// The chunks are shared, not copied: the data is unaffected by flattening,
// only the index changes (Accordion §3.1).
func flatten(s *Skiplist) *flat {
	f := &flat{entries: make([]flatEntry, 0, s.Len()), chunks: s.arena.all(), minTS: ^uint64(0)}
	f.newFilter(s.Len())
	if first, last := s.head.next(0).Load(), s.last(); first != nil {
		f.shared = sharedPrefix(first.key.UserKey, last.key.UserKey)
	}
	var prev []byte
	for n := s.head.next(0).Load(); n != nil; n = n.next(0).Load() {
		f.add(n.key, n.loc, len(n.value), &prev, true)
	}
	return f
}

// newFilter gives f a key filter sized for up to n distinct keys.
func (f *flat) newFilter(n int64) {
	f.filter = bloom.NewWithEstimates(uint(max(n, 1)), keyFilterFalsePositive)
	f.filterBytes = int64(f.filter.Cap() / 8)
}

// addKeysTo adds every user key of f to bf.
func (f *flat) addKeysTo(bf *bloom.BloomFilter) {
	for i := range f.entries {
		e := &f.entries[i]
		// Versions of a key are adjacent: add it at its first.
		if i > 0 && f.entries[i-1].prefix == e.prefix && bytes.Equal(f.userKey(&f.entries[i-1]), f.userKey(e)) {
			continue
		}
		bf.Add(f.userKey(e))
	}
}

// sharedPrefix is a copy of the longest common prefix of a and b.
func sharedPrefix(a, b []byte) []byte {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return bytes.Clone(a[:n])
}

// add appends one entry, whose user key starts with f.shared; prev is the
// previous entry's user key. hash adds a new key to f's filter (a filter
// copied from one holding it already does not need it).
func (f *flat) add(key kv.InternalKey, at loc, vlen int, prev *[]byte, hash bool) {
	klen := uint32(len(key.UserKey)) | uint32(key.Kind)<<kindShift
	prefix := keyPrefix(key.UserKey[len(f.shared):])
	f.entries = append(f.entries, flatEntry{prefix: prefix, ts: key.TS, at: at, klen: klen, vlen: uint32(vlen)})
	f.dataBytes += int64(len(key.UserKey) + vlen)
	if *prev == nil || !bytes.Equal(*prev, key.UserKey) {
		f.uniques++
		if hash {
			f.filter.Add(key.UserKey)
		}
	}
	*prev = key.UserKey
	f.minTS = min(f.minTS, key.TS)
	f.maxTS = max(f.maxTS, key.TS)
}

type flatIter struct {
	f *flat
	i int
}

func (it *flatIter) valid() bool { return it.i >= 0 && it.i < len(it.f.entries) }

func (it *flatIter) SeekGE(key kv.InternalKey) bool {
	it.i = it.f.seekGE(key)
	return it.valid()
}

func (it *flatIter) SeekLT(key kv.InternalKey) bool {
	it.i = it.f.seekGE(key) - 1
	return it.valid()
}

func (it *flatIter) First() bool { it.i = 0; return it.valid() }
func (it *flatIter) Last() bool  { it.i = len(it.f.entries) - 1; return it.valid() }

func (it *flatIter) Prev() bool {
	if !it.valid() {
		return false
	}
	it.i--
	return it.valid()
}

func (it *flatIter) Next() bool {
	if !it.valid() {
		return false
	}
	it.i++
	return it.valid()
}

func (it *flatIter) Valid() bool         { return it.valid() }
func (it *flatIter) Key() kv.InternalKey { return it.f.key(&it.f.entries[it.i]) }
func (it *flatIter) Value() []byte       { return it.f.value(&it.f.entries[it.i]) }
func (it *flatIter) Err() error          { return nil }
func (it *flatIter) Close() error        { it.i = len(it.f.entries); return nil }
