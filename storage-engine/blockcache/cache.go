// Package blockcache is a sharded, byte-bounded LRU cache of decoded SST
// blocks keyed by (file, block offset).
//
// Besides get and insert it supports what incremental warmup needs: blocks
// that arrived from a compaction worker are inserted like any other, and all
// cached blocks of a file whose last user key is ≤ a threshold can be evicted
// as the threshold advances.
//
// Invariants:
//   - A block lives in exactly one shard, chosen by its Key, and each shard's
//     entries, LRU list and per-file index hold the same set of blocks.
//   - A shard's used bytes are the sum of its entries' charges and at most
//     its capacity (capacity/16) after every insert: a block larger than a
//     shard is not cached at all.
//   - Cached blocks are immutable: Get returns the cached slice itself, and
//     callers must not modify it.
package blockcache

import (
	"bytes"
	"sync"
	"sync/atomic"
)

const numShards = 16

// Key names one block: the cache-wide ID of its file (see NewFileID) and the
// block's offset in that file.
type Key struct {
	File   uint64
	Offset uint64
}

var fileIDs atomic.Uint64

// NewFileID returns an ID unique within this process, so tables of different
// regions sharing one cache never collide.
func NewFileID() uint64 { return fileIDs.Add(1) }

type entry struct {
	key      Key
	block    []byte
	lastUser []byte
	meta     bool // an index or filter partition, not a data block
	// referenced is set by a hit on a meta entry and spent when the entry
	// reaches the LRU's tail: it goes round once more (second chance).
	// A partition serves every read of its many blocks, so a scan's
	// stream of data blocks must not push it out before them.
	referenced bool
	prev, next *entry
}

func (e *entry) charge() int64 { return int64(len(e.block) + len(e.lastUser) + 96) }

type shard struct {
	mu       sync.Mutex
	capacity int64
	used     int64
	metaUsed int64 // the part of used that meta entries charge
	entries  map[Key]*entry
	byFile   map[uint64]map[uint64]*entry
	// head is a sentinel: head.next is the most recently used entry.
	head entry
}

// Cache is safe for concurrent use. A nil *Cache or one of capacity 0 caches
// nothing.
type Cache struct {
	capacity  int64
	shards    [numShards]shard
	hits      atomic.Uint64
	misses    atomic.Uint64
	evictions atomic.Uint64
	// Lookups of index and filter partitions (GetMeta), counted apart so
	// that the data blocks' hits and misses keep their meaning.
	metaHits, metaMisses atomic.Uint64
	// Where a reader found the blocks it missed: the file in the bucket or
	// a compaction worker's memory (RemoteCache). Counted here, beside the
	// misses, so a benchmark reads the paper's causal chain from one place.
	bucketReads, workerReads atomic.Uint64
}

// New returns a cache that holds at most capacity bytes of blocks.
func New(capacity int64) *Cache {
	c := &Cache{capacity: capacity}
	for i := range c.shards {
		s := &c.shards[i]
		s.capacity = capacity / numShards
		s.entries = make(map[Key]*entry)
		s.byFile = make(map[uint64]map[uint64]*entry)
		s.head.next, s.head.prev = &s.head, &s.head
	}
	return c
}

func (c *Cache) shard(k Key) *shard {
	h := k.File*0x9e3779b97f4a7c15 ^ k.Offset*0xc2b2ae3d27d4eb4f
	return &c.shards[(h>>32)%numShards]
}

// Get returns the cached data block and marks it recently used.
func (c *Cache) Get(k Key) ([]byte, bool) {
	if c == nil {
		return nil, false
	}
	return c.lookup(k, &c.hits, &c.misses)
}

// GetMeta is Get for an index or filter partition (InsertMeta).
func (c *Cache) GetMeta(k Key) ([]byte, bool) {
	if c == nil {
		return nil, false
	}
	return c.lookup(k, &c.metaHits, &c.metaMisses)
}

// lookup finds k, marks it recently used and counts a hit or a miss.
func (c *Cache) lookup(k Key, hits, misses *atomic.Uint64) ([]byte, bool) {
	if c.capacity <= 0 {
		return nil, false
	}
	s := c.shard(k)
	s.mu.Lock()
	e, ok := s.entries[k]
	if ok {
		s.unlink(e)
		s.pushFront(e)
		e.referenced = e.meta
	}
	s.mu.Unlock()
	if !ok {
		misses.Add(1)
		return nil, false
	}
	hits.Add(1)
	return e.block, true
}

// CountMissRead records where a reader read a block it missed: a
// compaction worker's memory (fromWorker) or the file in the bucket.
func (c *Cache) CountMissRead(fromWorker bool) {
	if c == nil {
		return
	}
	if fromWorker {
		c.workerReads.Add(1)
	} else {
		c.bucketReads.Add(1)
	}
}

// Contains reports whether k is cached without touching recency or stats.
func (c *Cache) Contains(k Key) bool {
	if c == nil || c.capacity <= 0 {
		return false
	}
	s := c.shard(k)
	s.mu.Lock()
	_, ok := s.entries[k]
	s.mu.Unlock()
	return ok
}

// FileBlocks is how many data blocks of file the cache holds (its index and
// filter partitions not counted), from the cache's own per-file index: no
// block of the file is looked up.
func (c *Cache) FileBlocks(file uint64) int {
	if c == nil || c.capacity <= 0 {
		return 0
	}
	n := 0
	for i := range c.shards {
		s := &c.shards[i]
		s.mu.Lock()
		for _, e := range s.byFile[file] {
			if !e.meta {
				n++
			}
		}
		s.mu.Unlock()
	}
	return n
}

// Insert caches data block block, whose last user key is lastUserKey. The
// cache keeps both slices; callers must not modify them afterwards.
func (c *Cache) Insert(k Key, block, lastUserKey []byte) { c.insert(k, block, lastUserKey, false) }

// InsertMeta caches an index or filter partition: charged to the same
// budget as data blocks and evicted with them, its bytes and lookups
// counted apart (Stats.MetaBytes).
func (c *Cache) InsertMeta(k Key, block, lastUserKey []byte) { c.insert(k, block, lastUserKey, true) }

func (c *Cache) insert(k Key, block, lastUserKey []byte, meta bool) {
	if c == nil || c.capacity <= 0 {
		return
	}
	s := c.shard(k)
	e := &entry{key: k, block: block, lastUser: lastUserKey, meta: meta}
	if e.charge() > s.capacity {
		return
	}
	s.mu.Lock()
	if old, ok := s.entries[k]; ok {
		s.remove(old)
	}
	s.entries[k] = e
	f := s.byFile[k.File]
	if f == nil {
		f = make(map[uint64]*entry)
		s.byFile[k.File] = f
	}
	f[k.Offset] = e
	s.pushFront(e)
	s.used += e.charge()
	if meta {
		s.metaUsed += e.charge()
	}
	var evicted uint64
	for laps := 0; s.used > s.capacity; {
		tail := s.head.prev
		// A referenced meta entry goes round again, at most once per hit;
		// the bound on laps keeps an insert from circling a shard of
		// nothing but referenced partitions.
		if tail.referenced && tail != e && laps < 64 {
			tail.referenced = false
			s.unlink(tail)
			s.pushFront(tail)
			laps++
			continue
		}
		s.remove(tail)
		evicted++
	}
	s.mu.Unlock()
	c.evictions.Add(evicted)
}

// Evict drops one block if cached and reports whether it was.
func (c *Cache) Evict(k Key) bool {
	if c == nil || c.capacity <= 0 {
		return false
	}
	s := c.shard(k)
	s.mu.Lock()
	e, ok := s.entries[k]
	if ok {
		s.remove(e)
	}
	s.mu.Unlock()
	if ok {
		c.evictions.Add(1)
	}
	return ok
}

// EvictFile drops every cached block of file.
func (c *Cache) EvictFile(file uint64) int {
	return c.evictFileIf(file, func(*entry) bool { return true })
}

// EvictFileUpTo drops every cached block of file whose last user key is ≤
// upTo: after an incremental warmup passes upTo, reads of those keys no
// longer touch the old file. It scans the file's cached blocks; a caller
// that knows the block order (the region's warmup) evicts block by block.
func (c *Cache) EvictFileUpTo(file uint64, upTo []byte) int {
	return c.evictFileIf(file, func(e *entry) bool { return bytes.Compare(e.lastUser, upTo) <= 0 })
}

func (c *Cache) evictFileIf(file uint64, pred func(*entry) bool) int {
	if c == nil || c.capacity <= 0 {
		return 0
	}
	n := 0
	for i := range c.shards {
		s := &c.shards[i]
		s.mu.Lock()
		for _, e := range s.byFile[file] {
			if pred(e) {
				s.remove(e)
				n++
			}
		}
		s.mu.Unlock()
	}
	c.evictions.Add(uint64(n))
	return n
}

func (s *shard) pushFront(e *entry) {
	e.prev, e.next = &s.head, s.head.next
	s.head.next.prev = e
	s.head.next = e
}

func (s *shard) unlink(e *entry) {
	e.prev.next, e.next.prev = e.next, e.prev
}

func (s *shard) remove(e *entry) {
	s.unlink(e)
	delete(s.entries, e.key)
	if f := s.byFile[e.key.File]; f != nil {
		delete(f, e.key.Offset)
		if len(f) == 0 {
			delete(s.byFile, e.key.File)
		}
	}
	s.used -= e.charge()
	if e.meta {
		s.metaUsed -= e.charge()
	}
}

// Stats is a point-in-time view of the cache counters.
type Stats struct {
	Hits, Misses, Evictions uint64
	// Reads of missed blocks, by source (CountMissRead).
	BucketReads, WorkerReads uint64
	// UsedBytes is every entry's charge; MetaBytes the part that index
	// and filter partitions charge.
	UsedBytes, MetaBytes, Capacity int64
	// Lookups of index and filter partitions.
	MetaHits, MetaMisses uint64
}

// Stats returns the cache's counters and current size.
func (c *Cache) Stats() Stats {
	if c == nil {
		return Stats{}
	}
	st := Stats{Hits: c.hits.Load(), Misses: c.misses.Load(), Evictions: c.evictions.Load(), Capacity: c.capacity,
		BucketReads: c.bucketReads.Load(), WorkerReads: c.workerReads.Load(),
		MetaHits: c.metaHits.Load(), MetaMisses: c.metaMisses.Load()}
	for i := range c.shards {
		s := &c.shards[i]
		s.mu.Lock()
		st.UsedBytes += s.used
		st.MetaBytes += s.metaUsed
		s.mu.Unlock()
	}
	return st
}

// Capacity is the most bytes the cache holds; 0 for a nil cache.
func (c *Cache) Capacity() int64 {
	if c == nil {
		return 0
	}
	return c.capacity
}
