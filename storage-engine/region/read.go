package region

import (
	"bytes"
	"context"
	"slices"
	"sync"

	"github.com/bellows-kv/bellows/storage-engine/hlc"
	"github.com/bellows-kv/bellows/storage-engine/iterator"
	"github.com/bellows-kv/bellows/storage-engine/kv"
	"github.com/bellows-kv/bellows/storage-engine/memstore"
	"github.com/bellows-kv/bellows/storage-engine/sstable"
)

// readState is a consistent view of every source of the region.
type readState struct {
	// mems are the memstores' views, newest first: the active memstore's,
	// then the frozen ones waiting for flush.
	mems []*memstore.View
	v    *version
	// old and warm are set during an incremental warmup: requests whose key
	// is above the threshold read old instead of v.
	old  *version
	warm *warming
	ts   uint64
	// exactFrom is the region's when the state was taken; pinned says
	// whether a snapshot at ts was pinned then (region.exactFrom).
	exactFrom uint64
	pinned    bool
	// asOf is the timestamp the read asked for (kv.MaxTimestamp: the
	// latest), which judges expiry (expiryAt); now caches the clock's
	// reading that judges it for a read of the latest.
	asOf  uint64
	clock *hlc.Clock
	now   uint64
}

// expiryAt is the timestamp a read judges expiring versions at
// (docs/expiry.md): the timestamp it asked for, or for a read of the
// latest the store's clock as the read began (at least the newest
// visible timestamp): an expired key stays expired though no write has
// come since.
func (rs *readState) expiryAt() uint64 {
	if rs.asOf != kv.MaxTimestamp {
		return rs.asOf
	}
	if rs.now == 0 {
		rs.now = rs.ts
		if rs.clock != nil {
			rs.now = max(rs.ts, uint64(rs.clock.Physical().UnixNano()))
		}
	}
	return rs.now
}

// read is what a version of a key reads as (kv.Read) at rs.expiryAt. The
// common kinds are answered here, so that only an expiring version reads
// the clock (expiryAt) on the scan's per-key path.
func (rs *readState) read(kind kv.Kind, ts uint64, v []byte) ([]byte, bool) {
	if kind == kv.KindSet {
		return v, true
	}
	if kind == kv.KindDelete {
		return nil, false
	}
	return kv.Read(kind, ts, v, rs.expiryAt())
}

func (r *Region) acquire(readTS uint64) (*readState, error) {
	rs := new(readState)
	if err := r.acquireInto(rs, readTS); err != nil {
		return nil, err
	}
	return rs, nil
}

// acquireInto is acquire into rs, whose mems slice it reuses.
func (r *Region) acquireInto(rs *readState, readTS uint64) error {
	r.mu.RLock()
	if r.closed {
		r.mu.RUnlock()
		return ErrClosed
	}
	// Under mu the memstores and files cannot change, except the active
	// memstore's view (in-memory flushes publish without mu). Everything
	// visible at vis is in the view loaded after it. A view made by an
	// in-memory compaction that started later than vis was loaded may have
	// dropped versions a read at vis needs: its horizon says so, and vis
	// is loaded again, which is then past that horizon.
	var vis uint64
	var active *memstore.View
	for {
		vis = r.vis.load()
		active = r.mem.ms.View()
		if active.Horizon() <= vis {
			break
		}
	}
	*rs = readState{mems: rs.mems[:0], v: r.current, ts: min(readTS, vis), exactFrom: r.exactFrom, asOf: readTS, clock: r.opts.Clock}
	if rs.ts < rs.exactFrom {
		rs.pinned = r.snaps[rs.ts] > 0
	}
	rs.mems = append(rs.mems, active)
	for i := len(r.imm) - 1; i >= 0; i-- {
		rs.mems = append(rs.mems, r.imm[i].frozen)
	}
	rs.v.ref()
	if r.warm != nil {
		rs.warm, rs.old = r.warm, r.warm.old
		rs.old.ref()
	}
	r.mu.RUnlock()
	return nil
}

func (rs *readState) release() {
	rs.v.unref()
	if rs.old != nil {
		rs.old.unref()
	}
}

// tablesFor picks the files a request starting at key reads: the whole
// request is served from one side of the warmup threshold, decided now.
func (rs *readState) tablesFor(key []byte) []*table {
	if rs.warm != nil && !rs.warm.below(key) {
		return rs.old.tables
	}
	return rs.v.tables
}

// Get is GetContext without a request context.
func (r *Region) Get(key []byte, readTS uint64) ([]byte, bool, error) {
	return r.GetContext(context.Background(), key, readTS)
}

// GetContext returns the value of key at readTS (kv.MaxTimestamp for the
// latest). The returned slice is the caller's. ctx is the request's: a
// block read from a compaction worker (WarmupRemoteCache) ends with it.
func (r *Region) GetContext(ctx context.Context, key []byte, readTS uint64) ([]byte, bool, error) {
	v, ok, err := r.GetUncertain(ctx, key, readTS, Uncertainty{})
	return v.Value, ok, err
}

// Version is a version of a key as a read returns it.
type Version struct {
	Value []byte
	// TS is its commit timestamp.
	TS uint64
	// Expiry is when it stops being read (0: never; kv.Expiry).
	Expiry uint64
}

// GetUncertain is GetContext with clock uncertainty (docs/clock.md): a
// version of key in (readTS, limit] fails the read with an
// *UncertainError, and so does a lock whose transaction may commit there
// until it is resolved (*LockedError); limit is u's, narrowed by its
// observation of this store's clock (Region.uncertaintyLimit). A limit ≤
// readTS: no window. A value that does not stay live through
// u.LiveThrough fails it with an *ExpiredError.
func (r *Region) GetUncertain(ctx context.Context, key []byte, readTS uint64, u Uncertainty) (Version, bool, error) {
	if err := validateKey(key); err != nil {
		return Version{}, false, err
	}
	if err := r.checkKey(key); err != nil {
		return Version{}, false, err
	}
	var limit uint64
	rs, err := r.acquireUnlocked(readTS, func(ts uint64) error {
		limit = r.uncertaintyLimit(u)
		return r.checkReadLock(key, max(ts, limit), u.Own)
	})
	if err != nil {
		return Version{}, false, err
	}
	defer rs.release()
	if limit > rs.ts {
		if u, ok, err := rs.newestTS(ctx, key, rs.ts, limit); err != nil {
			return Version{}, false, err
		} else if ok {
			return Version{}, false, &UncertainError{Key: bytes.Clone(key), ReadTS: rs.ts, TS: u}
		}
	}
	stored, kind, ts, ok, err := rs.get(ctx, key)
	if err != nil || !ok {
		return Version{}, false, err
	}
	val, ok := rs.read(kind, ts, stored)
	if !ok {
		return Version{}, false, nil
	}
	if err := expiredBy(key, kind, ts, stored, u.LiveThrough); err != nil {
		return Version{}, false, err
	}
	r.stats.recordGet()
	exp, _ := kv.Expiry(kind, ts, stored)
	return Version{Value: bytes.Clone(val), TS: ts, Expiry: exp}, true, nil
}

// get returns key's newest version at or below rs.ts: its value, kind and
// timestamp.
func (rs *readState) get(ctx context.Context, key []byte) ([]byte, kv.Kind, uint64, bool, error) {
	for _, m := range rs.mems {
		if v, k, ts, ok := m.GetVersion(key, rs.ts); ok {
			return v, k, ts, true, nil
		}
	}
	// Files are oldest first with ascending timestamp ranges: the newest
	// file holding a version ≤ ts answers.
	tables := rs.tablesFor(key)
	for i := len(tables) - 1; i >= 0; i-- {
		t := tables[i]
		if t.meta.MinTS > rs.ts || bytes.Compare(key, t.meta.Smallest) < 0 || bytes.Compare(key, t.meta.Largest) > 0 {
			continue
		}
		v, k, ts, ok, err := t.reader.GetVersionContext(ctx, key, rs.ts)
		if err != nil || ok {
			return v, k, ts, ok, err
		}
	}
	return nil, 0, 0, false, nil
}

// KV is one key and its value as of a read.
type KV struct {
	Key   []byte
	Value []byte
}

// Scan returns up to limit (0: no limit) live keys in [start, end) at
// readTS, in key order. A nil end means the end of the region.
func (r *Region) Scan(start, end []byte, limit int, readTS uint64) ([]KV, error) {
	return r.scan(start, end, limit, readTS, false)
}

// ScanReverse is Scan in descending key order: the limit counts from the
// top of [start, end), as etcd's and TiKV's reverse scans do.
func (r *Region) ScanReverse(start, end []byte, limit int, readTS uint64) ([]KV, error) {
	return r.scan(start, end, limit, readTS, true)
}

func (r *Region) scan(start, end []byte, limit int, readTS uint64, reverse bool) ([]KV, error) {
	it, err := r.NewIterator(start, end, readTS)
	if err != nil {
		return nil, err
	}
	defer it.Close()
	first, next := it.First, it.Next
	if reverse {
		first, next = it.Last, it.Prev
	}
	var out []KV
	if limit > 0 {
		out = make([]KV, 0, min(limit, maxScanPrealloc))
	}
	var rows rowBytes
	for ok := first(); ok && (limit <= 0 || len(out) < limit); ok = next() {
		k, v := rows.copy(it.Key(), it.Value())
		out = append(out, KV{Key: k, Value: v})
	}
	r.stats.recordScan()
	return out, it.Err()
}

// maxScanPrealloc bounds the rows a scan reserves room for up front: a
// large limit is an upper bound, not what a scan of a small range returns.
const maxScanPrealloc = 256

// rowBytes copies a scan's rows, key and value adjacent as Batch.copyOf
// does, into shared chunks: a 20-key scan makes one or two allocations
// instead of forty, which matters to a reader beside fast writers (each
// allocation during a GC cycle may make it assist the collector). Each
// key and value is capped at its length, so a caller appending to one
// reallocates instead of overwriting the next.
type rowBytes struct{ buf []byte }

// rowChunk is the least a chunk holds: about twenty 16-byte keys with
// 100-byte values.
const rowChunk = 4 << 10

// copy returns copies of key and value; a nil value stays nil, as
// bytes.Clone leaves it.
func (c *rowBytes) copy(key, value []byte) (k, v []byte) {
	n := len(key) + len(value)
	if cap(c.buf)-len(c.buf) < n {
		c.buf = make([]byte, 0, max(rowChunk, n))
	}
	at, mid := len(c.buf), len(c.buf)+len(key)
	c.buf = append(append(c.buf, key...), value...)
	k = c.buf[at:mid:mid]
	if value != nil {
		v = c.buf[mid:len(c.buf):len(c.buf)]
	}
	return k, v
}

// Iterator walks the live keys of a range at one timestamp, from one
// consistent view of the region, in either direction.
//
// Invariant: moving forward (First, Next), in is on the version of the
// current key the iterator returns; moving backward (Last, Prev), in is on
// the last version of the key before it, having passed every version of
// the current key (a backward walk meets a key's versions oldest first and
// knows which one is visible only past the newest). A turn re-seeks in.
type Iterator struct {
	rs    *readState
	in    *iterator.Merging
	start []byte
	end   []byte
	// limit is the uncertainty limit (0: none): a version above the read's
	// timestamp and at or below it stops the iteration (*UncertainError).
	limit uint64
	// liveThrough is Uncertainty.LiveThrough: a live value expiring at or
	// before it stops the iteration (*ExpiredError).
	liveThrough uint64
	key         []byte
	val         []byte // aliases an immutable memstore value or block
	valid       bool
	back        bool
	err         error
	closed      bool
	// st holds what the iterator reads with (its read state, the merging
	// iterator and every child), taken from iterStates and returned to it
	// by Close: a scan allocates none of it.
	st *iterState
}

// iterState is an Iterator's reusable memory.
type iterState struct {
	rs       readState
	merge    iterator.Merging
	children []iterator.Iterator
	ssts     []sstable.Iter
	mems     memstore.IterBuf
	key      []byte
	seek     []byte // a key settle seeks to
}

var iterStates = sync.Pool{New: func() any { return new(iterState) }}

// iterators are the iterators over st.rs's memstores and the files that
// may hold keys of [start, end) and a version above after (0: any), in
// st's buffers.
func (st *iterState) iterators(ctx context.Context, start, end []byte, after uint64) []iterator.Iterator {
	children := st.children[:0]
	for _, m := range st.rs.mems {
		children = m.AppendIteratorsBuf(children, &st.mems)
	}
	tables := st.rs.tablesFor(start)
	// The iterators handed out point into st.ssts: grow it first.
	st.ssts = slices.Grow(st.ssts[:0], len(tables))
	for _, t := range tables {
		if end != nil && bytes.Compare(t.meta.Smallest, end) >= 0 {
			continue
		}
		if start != nil && bytes.Compare(t.meta.Largest, start) < 0 {
			continue
		}
		if after != 0 && t.meta.MaxTS <= after {
			continue
		}
		// Re-slice rather than append: the element keeps the buffers
		// of the iterator it was in an earlier scan.
		st.ssts = st.ssts[:len(st.ssts)+1]
		si := &st.ssts[len(st.ssts)-1]
		t.reader.InitIter(ctx, si)
		children = append(children, si)
	}
	st.children = children
	return children
}

// reset drops every reference to the region's files, blocks and memstores,
// keeping the buffers, before st goes back to the pool.
func (st *iterState) reset() {
	clear(st.rs.mems)
	st.rs = readState{mems: st.rs.mems[:0]}
	st.merge.Reset()
	clear(st.children)
	st.children = st.children[:0]
	for i := range st.ssts {
		st.ssts[i].Reset()
	}
	st.ssts = st.ssts[:0]
	st.mems.Reset()
	st.key, st.seek = st.key[:0], st.seek[:0]
}

// NewIterator is NewIteratorContext without a request context.
func (r *Region) NewIterator(start, end []byte, readTS uint64) (*Iterator, error) {
	return r.NewIteratorContext(context.Background(), start, end, readTS)
}

// NewIteratorContext returns an iterator over [start, end) at readTS, whose
// block reads belong to the request of ctx. Close it.
//
// It fails with a *LockedError if a key of the range has a lock a read at
// readTS must not pass (locks.go): resolve it and retry.
func (r *Region) NewIteratorContext(ctx context.Context, start, end []byte, readTS uint64) (*Iterator, error) {
	return r.NewIteratorUncertain(ctx, start, end, readTS, Uncertainty{})
}

// NewIteratorUncertain is NewIteratorContext with clock uncertainty, as
// GetUncertain has: the iteration stops with an *UncertainError (Err) at
// the first key with a version in (readTS, limit].
func (r *Region) NewIteratorUncertain(ctx context.Context, start, end []byte, readTS uint64, u Uncertainty) (*Iterator, error) {
	start, end = r.clip(start, end)
	st := iterStates.Get().(*iterState)
	rs := &st.rs
	var limit uint64
	if err := r.acquireUnlockedInto(rs, readTS, func(ts uint64) error {
		limit = r.uncertaintyLimit(u)
		return r.checkReadLocks(start, end, max(ts, limit), u.Own)
	}); err != nil {
		st.reset()
		iterStates.Put(st)
		return nil, err
	}
	st.merge.Init(st.iterators(ctx, start, end, 0))
	it := &Iterator{rs: rs, in: &st.merge, start: start, end: end, key: st.key[:0], st: st, liveThrough: u.LiveThrough}
	if limit > rs.ts {
		it.limit = limit
	}
	return it, nil
}

// visible is the read rule of both directions: a version counts when it
// committed at or before the read timestamp, and the newest version that
// counts decides the key (a tombstone hides it).
func (it *Iterator) visible(k kv.InternalKey) bool { return k.TS <= it.rs.ts }

// First positions at the first live key ≥ start.
func (it *Iterator) First() bool {
	if it.closed {
		return false
	}
	it.back = false
	it.in.SeekGE(kv.MakeSearchKey(it.start, kv.MaxTimestamp))
	return it.settle()
}

// Next moves to the next live key.
func (it *Iterator) Next() bool {
	if !it.valid {
		return false
	}
	if it.back {
		// in is before every version of the current key: go to its
		// oldest possible version, then past the rest below.
		it.back = false
		it.in.SeekGE(kv.InternalKey{UserKey: it.key, TS: 0, Kind: kv.KindDelete})
	}
	it.skipVersions()
	return it.settle()
}

// maxVersionSteps is how many versions of one key a forward move steps
// over before it seeks past the rest: RocksDB's
// max_sequential_skip_in_iterations (8 by default there). A key updated
// thousands of times since the last flush (a Zipf-hot key) has as many
// versions in the memstore.
const maxVersionSteps = 8

// skipVersions moves in past the versions of the current key.
func (it *Iterator) skipVersions() {
	for n := 0; it.in.Valid() && bytes.Equal(it.in.Key().UserKey, it.key); n++ {
		if n == maxVersionSteps {
			// The smallest internal key of the user key: a version
			// there is passed by the steps that follow.
			it.in.SkipTo(kv.InternalKey{UserKey: it.key, TS: 0, Kind: kv.KindDelete})
			continue
		}
		it.in.Next()
	}
}

// Last positions at the last live key < end.
func (it *Iterator) Last() bool {
	if it.closed {
		return false
	}
	it.back = true
	if it.end == nil {
		it.in.Last()
	} else {
		it.in.SeekLT(kv.MakeSearchKey(it.end, kv.MaxTimestamp))
	}
	return it.settleBack()
}

// Prev moves to the previous live key.
func (it *Iterator) Prev() bool {
	if !it.valid {
		return false
	}
	if !it.back {
		// in is on a version of the current key: go before its newest.
		it.back = true
		it.in.SeekLT(kv.MakeSearchKey(it.key, kv.MaxTimestamp))
	}
	return it.settleBack()
}

// settle advances to the newest visible version of the next user key that
// is not deleted.
func (it *Iterator) settle() bool {
	it.valid = false
	steps := 0
	for it.in.Valid() {
		k := it.in.Key()
		if it.end != nil && bytes.Compare(k.UserKey, it.end) >= 0 {
			break
		}
		if !it.visible(k) {
			if k.TS <= it.limit {
				it.err = &UncertainError{Key: bytes.Clone(k.UserKey), ReadTS: it.rs.ts, TS: k.TS}
				return false
			}
			if steps++; steps > maxVersionSteps {
				// Many versions newer than the read: seek to the
				// newest one it sees, or the newest in its
				// uncertainty window. A copy of the key: the seek
				// moves the child whose buffer k aliases.
				steps = 0
				it.st.seek = append(it.st.seek[:0], k.UserKey...)
				it.in.SkipTo(kv.MakeSearchKey(it.st.seek, max(it.rs.ts, it.limit)))
				continue
			}
			it.in.Next()
			continue
		}
		it.key = append(it.key[:0], k.UserKey...)
		// Memstore values and cached blocks are immutable: alias.
		if v, live := it.rs.read(k.Kind, k.TS, it.in.Value()); live {
			if it.err = expiredBy(k.UserKey, k.Kind, k.TS, it.in.Value(), it.liveThrough); it.err != nil {
				return false
			}
			it.val = v
			it.valid = true
			return true
		}
		// Deleted or expired at ts: skip every older version of this key.
		it.skipVersions()
	}
	it.err = it.in.Err()
	return false
}

// settleBack moves back to the previous user key that is live, reading
// each key's versions oldest first: the last visible one met is the
// newest, and decides.
func (it *Iterator) settleBack() bool {
	it.valid = false
	for it.in.Valid() {
		k := it.in.Key()
		if bytes.Compare(k.UserKey, it.start) < 0 {
			break
		}
		it.key = append(it.key[:0], k.UserKey...)
		live := false
		var expired error // the newest visible version's, under liveThrough
		for {
			if k := it.in.Key(); it.visible(k) {
				// Aliasing is safe past the move: values are immutable.
				it.val, live = it.rs.read(k.Kind, k.TS, it.in.Value())
				expired = nil
				if live {
					expired = expiredBy(k.UserKey, k.Kind, k.TS, it.in.Value(), it.liveThrough)
				}
			} else if k.TS <= it.limit {
				it.err = &UncertainError{Key: bytes.Clone(k.UserKey), ReadTS: it.rs.ts, TS: k.TS}
				return false
			}
			if !it.in.Prev() || !bytes.Equal(it.in.Key().UserKey, it.key) {
				break
			}
		}
		if it.in.Err() != nil {
			// A newer version of the key may be past the failure.
			break
		}
		if expired != nil {
			it.err = expired
			return false
		}
		if live {
			it.valid = true
			return true
		}
	}
	it.err = it.in.Err()
	return false
}

// Key is the current key; valid until the next call.
func (it *Iterator) Key() []byte { return it.key }

// Value is the current value; valid until the next call.
func (it *Iterator) Value() []byte { return it.val }

// Err is the error that stopped the iteration.
func (it *Iterator) Err() error { return it.err }

// Close releases the iterator's view of the region and returns its memory
// for reuse: Key and Value are not valid after it, and the iterator is done
// (First and Last return false).
func (it *Iterator) Close() error {
	if it.closed {
		return nil
	}
	it.closed = true
	err := it.in.Close()
	it.rs.release()
	st := it.st
	st.key = it.key[:0]
	st.reset()
	iterStates.Put(st)
	// The key's buffer went back with st: a Key after Close is nil, never
	// another scan's.
	it.rs, it.in, it.st, it.key, it.val, it.valid = nil, nil, nil, nil, nil, false
	return err
}
