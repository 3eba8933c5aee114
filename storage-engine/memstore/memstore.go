// Package memstore holds a region's recent writes in memory until they are
// flushed to an SST: Accordion's compacting memstore (Bortnikov et al.,
// VLDB 2018) as HBase ships it (CompactingMemStore, MemStoreCompactor).
//
// A small mutable active segment (a Skiplist) absorbs writes. When it holds
// more than A × the flush size, an in-memory flush pushes it into a
// pipeline of immutable segments; the pipeline flattens it into a flat
// segment (a sorted array over pointer-free chunks) and, by the policy,
// merges the pipeline's indexes into one or compacts the pipeline into one
// segment without the versions retention does not need. A disk flush
// freezes the whole memstore (active and pipeline) and writes it to one
// SST. Policy None is one skiplist flushed whole.
//
// Invariants:
//   - Segments' timestamp ranges are disjoint and ascending from the oldest
//     pipeline segment to the active one: the region assigns timestamps and
//     chooses the active segment (Skiplist.BeginWrite) under its commit
//     lock, and pushes the active segment under that lock too. So a point
//     read stops at the first segment, newest first, holding a version.
//   - A View never changes once published. Readers load one and never
//     block; pipeline changes publish a new View by compare-and-swap
//     (§3.3's versioned copy-on-write pipeline).
//   - A segment leaves the pipeline only replaced by one holding the same
//     versions (flatten, merge) or the same minus versions the retention
//     rules allow dropping (compaction), or with the whole memstore when
//     it is frozen for a disk flush. A frozen memstore's View changes only
//     once, to its merged equal (MergeFrozen, as the disk flush begins):
//     an in-memory compaction that finds it frozen aborts and publishes
//     nothing.
//   - A compaction drops a version only if a newer version of its key at
//     or below its horizon exists and no snapshot reads it (retention.Mark),
//     and the View it publishes carries that horizon: a reader reads at a
//     timestamp ≥ its View's horizon (the region loads the visible
//     timestamp again if not) or at a snapshot the compaction honoured.
//
// Concurrency: PushActive and Freeze are called under the region's commit
// lock; FlushInMemory by one background goroutine at a time, and
// MergeFrozen by the disk flush, each under compactMu;
// readers and writers at any time. NeedsInMemoryFlush is false from a push
// until the in-memory flush after it has finished, so writers push one
// segment at a time whatever their speed (HBase's inMemoryFlushInProgress).
// A disk flush, which freezes, is never held back by it.
package memstore

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/bits-and-blooms/bloom/v3"

	"github.com/bellows-kv/bellows/storage-engine/iterator"
	"github.com/bellows-kv/bellows/storage-engine/kv"
)

// segment is one piece of the memstore: the active Skiplist, a pushed but
// not yet flattened Skiplist, or a flat segment.
type segment interface {
	GetVersion(userKey []byte, readTS uint64) ([]byte, kv.Kind, uint64, bool)
	NewIterator() iterator.Iterator
	ApproximateBytes() int64
	Len() int64
	tsRange() (minTS, maxTS uint64)
}

// Config configures a memstore.
type Config struct {
	Policy Policy
	// FlushBytes is the size at which the region flushes the memstore to
	// disk; the active segment's bound is ActiveFraction of it.
	FlushBytes int64
	// ActiveFraction is A: an in-memory flush happens when the active
	// segment holds more than A × FlushBytes.
	ActiveFraction float64
	// PipelineSegments is S: Basic (and Adaptive when it does not
	// compact) merges the pipeline when it holds more segments.
	PipelineSegments int
	// RedundancyThreshold is Adaptive's R: it compacts only when more
	// than this share of the versions are redundant.
	RedundancyThreshold float64
	// Stats, if set, counts what the memstore does (shared by a region's
	// successive memstores).
	Stats *Stats
	// Rand draws Adaptive's coin; nil uses math/rand/v2.
	Rand func() float64
}

// Validate reports the first setting out of range, naming it.
func (c Config) Validate() error {
	switch c.Policy {
	case None, Basic, Eager, Adaptive:
	default:
		return fmt.Errorf("memstore: policy %q is not one of None, Basic, Eager, Adaptive", c.Policy)
	}
	if c.FlushBytes <= 0 {
		return fmt.Errorf("memstore: flush bytes %d must be positive", c.FlushBytes)
	}
	if c.Policy == None {
		return nil
	}
	if !(c.ActiveFraction > 0 && c.ActiveFraction <= 1) {
		return fmt.Errorf("memstore: active fraction (A) %v must be in (0, 1]", c.ActiveFraction)
	}
	if c.PipelineSegments < 1 {
		return fmt.Errorf("memstore: pipeline segments (S) %d must be at least 1", c.PipelineSegments)
	}
	if !(c.RedundancyThreshold >= 0 && c.RedundancyThreshold < 1) {
		return fmt.Errorf("memstore: redundancy threshold (R) %v must be in [0, 1)", c.RedundancyThreshold)
	}
	return nil
}

// Stats counts in-memory work. All fields are cumulative.
type Stats struct {
	// Pushes counts active segments pushed into the pipeline (the start of
	// an in-memory flush, synchronous with the write that crossed A).
	Pushes          atomic.Uint64
	InMemoryFlushes atomic.Uint64 // segments pushed and flattened
	Merges          atomic.Uint64
	Compactions     atomic.Uint64
	VersionsDropped atomic.Uint64
	// Aborted counts merges and compactions a disk flush overtook.
	Aborted atomic.Uint64
}

// View is one immutable state of a memstore: what a reader reads.
type View struct {
	active        *Skiplist
	pipeline      []segment // newest first
	pipelineBytes int64
	pipelineLen   int64
	frozen        bool
	horizon       uint64
}

func (v *View) clone() *View {
	c := *v
	c.pipeline = slices.Clone(v.pipeline)
	return &c
}

func (v *View) recount() {
	v.pipelineBytes, v.pipelineLen = 0, 0
	for _, s := range v.pipeline {
		v.pipelineBytes += s.ApproximateBytes()
		v.pipelineLen += s.Len()
	}
}

// Get returns the newest version of userKey with timestamp ≤ readTS.
func (v *View) Get(userKey []byte, readTS uint64) ([]byte, kv.Kind, bool) {
	val, k, _, ok := v.GetVersion(userKey, readTS)
	return val, k, ok
}

// GetVersion is Get that also returns the version's timestamp.
func (v *View) GetVersion(userKey []byte, readTS uint64) ([]byte, kv.Kind, uint64, bool) {
	if val, k, ts, ok := v.active.GetVersion(userKey, readTS); ok {
		return val, k, ts, true
	}
	for _, s := range v.pipeline {
		if lo, _ := s.tsRange(); lo > readTS {
			continue
		}
		if val, k, ts, ok := s.GetVersion(userKey, readTS); ok {
			return val, k, ts, true
		}
	}
	return nil, 0, 0, false
}

// AppendIterators appends an iterator per segment to dst.
func (v *View) AppendIterators(dst []iterator.Iterator) []iterator.Iterator {
	dst = append(dst, v.active.NewIterator())
	for _, s := range v.pipeline {
		dst = append(dst, s.NewIterator())
	}
	return dst
}

// IterBuf holds the segment iterators of View.AppendIteratorsBuf for reuse:
// a reader that scans often (region.Iterator pools one) allocates none per
// scan. The iterators it hands out are valid until its next use or Reset.
type IterBuf struct {
	skip []skiplistIter
	flat []flatIter
}

// Reset drops the buffer's references to segments, so that a pooled buffer
// does not keep a flushed memstore alive.
func (b *IterBuf) Reset() {
	clear(b.skip[:cap(b.skip)])
	clear(b.flat[:cap(b.flat)])
	b.skip, b.flat = b.skip[:0], b.flat[:0]
}

// AppendIteratorsBuf is AppendIterators with the iterators taken from buf.
func (v *View) AppendIteratorsBuf(dst []iterator.Iterator, buf *IterBuf) []iterator.Iterator {
	// Grow first: the iterators handed out point into the slices.
	if n := len(buf.skip) + 1 + len(v.pipeline); cap(buf.skip) < n {
		buf.skip = slices.Grow(buf.skip, n-len(buf.skip))
	}
	if n := len(buf.flat) + len(v.pipeline); cap(buf.flat) < n {
		buf.flat = slices.Grow(buf.flat, n-len(buf.flat))
	}
	dst = append(dst, buf.skiplistIter(v.active))
	for _, s := range v.pipeline {
		switch s := s.(type) {
		case *Skiplist:
			dst = append(dst, buf.skiplistIter(s))
		case *flat:
			buf.flat = append(buf.flat, flatIter{f: s, i: -1})
			dst = append(dst, &buf.flat[len(buf.flat)-1])
		default:
			dst = append(dst, s.NewIterator())
		}
	}
	return dst
}

func (b *IterBuf) skiplistIter(s *Skiplist) iterator.Iterator {
	b.skip = append(b.skip, skiplistIter{s: s})
	return &b.skip[len(b.skip)-1]
}

// AppendIteratorsAfter is AppendIterators without the pipeline segments
// whose versions are all at or below ts: what a search for a version newer
// than ts needs (a transaction's validation). The active segment, still
// written, is always included.
func (v *View) AppendIteratorsAfter(dst []iterator.Iterator, ts uint64) []iterator.Iterator {
	dst = append(dst, v.active.NewIterator())
	for _, s := range v.pipeline {
		if _, hi := s.tsRange(); hi > ts {
			dst = append(dst, s.NewIterator())
		}
	}
	return dst
}

// NewIterator returns one iterator over every version, in key order.
func (v *View) NewIterator() iterator.Iterator {
	if len(v.pipeline) == 0 {
		return v.active.NewIterator()
	}
	return iterator.NewMerging(v.AppendIterators(nil)...)
}

// Horizon is the newest horizon of the compactions that made this View's
// segments: a read below it may miss versions they dropped.
func (v *View) Horizon() uint64 { return v.horizon }

// ApproximateBytes is the memory the View's segments account for.
func (v *View) ApproximateBytes() int64 { return v.active.ApproximateBytes() + v.pipelineBytes }

// Len is the number of versions held.
func (v *View) Len() int64 { return v.active.Len() + v.pipelineLen }

// Segments is the number of pipeline segments.
func (v *View) Segments() int { return len(v.pipeline) }

// SegmentKinds counts what a read of v searches: skiplists (the active
// segment and pushed ones not yet flattened) and flat segments, and the
// versions the skiplists hold (a skiplist's search grows with them, a
// flat segment's far less).
func (v *View) SegmentKinds() (skiplists, flats int, skiplistVersions int64) {
	skiplists, skiplistVersions = 1, v.active.Len()
	for _, s := range v.pipeline {
		if _, ok := s.(*flat); ok {
			flats++
		} else {
			skiplists++
			skiplistVersions += s.Len()
		}
	}
	return skiplists, flats, skiplistVersions
}

// MinTS is the oldest timestamp of any version held, ^0 when empty: WAL
// records below it are all in SSTs or dropped by in-memory compaction.
func (v *View) MinTS() uint64 {
	m := v.active.minTS.Load()
	for _, s := range v.pipeline {
		if s.Len() > 0 {
			lo, _ := s.tsRange()
			m = min(m, lo)
		}
	}
	return m
}

// WaitWriters waits for every commit registered with a skiplist of v.
func (v *View) WaitWriters() {
	v.active.WaitWriters()
	for _, s := range v.pipeline {
		if sl, ok := s.(*Skiplist); ok {
			sl.WaitWriters()
		}
	}
}

// Memstore is a region's memstore under one policy; a disk flush freezes
// it and the region starts a new one.
type Memstore struct {
	cfg       Config
	threshold int64 // A × FlushBytes
	view      atomic.Pointer[View]
	stats     *Stats

	// compactMu: one FlushInMemory at a time; it guards adaptive and keys.
	compactMu sync.Mutex
	adaptive  adaptiveState
	// keys holds every user key of every flat segment this memstore made:
	// a merge or compaction copies it as its output's filter instead of
	// hashing every key again (mergeFlat). Nil until the first flatten,
	// which sizes it; it is never shared, only copied.
	keys *bloom.BloomFilter
	// flushing is set by a push and cleared when an in-memory flush has
	// finished: while it is set the active segment grows past A instead of
	// being pushed (HBase's inMemoryFlushInProgress). Without it, writers
	// faster than the flush goroutine push segments it cannot flatten or
	// merge in time, and every read searches the pile: with two writers on
	// one CPU the pipeline held about 15 segments, several of them
	// unflattened skiplists, and a Basic read cost 7× None's.
	flushing atomic.Bool
}

// New returns an empty memstore.
func New(cfg Config) (*Memstore, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	m := &Memstore{cfg: cfg, stats: cfg.Stats, adaptive: newAdaptiveState()}
	if m.stats == nil {
		m.stats = new(Stats)
	}
	if cfg.Policy != None {
		m.threshold = max(1, int64(cfg.ActiveFraction*float64(cfg.FlushBytes)))
	}
	if m.cfg.Rand == nil {
		m.cfg.Rand = rand.Float64
	}
	m.view.Store(&View{active: NewSkiplist()})
	return m, nil
}

// Policy is the memstore's policy.
func (m *Memstore) Policy() Policy { return m.cfg.Policy }

// View returns the current state.
func (m *Memstore) View() *View { return m.view.Load() }

// Active is the segment a commit chosen now writes to.
func (m *Memstore) Active() *Skiplist { return m.view.Load().active }

// NeedsInMemoryFlush reports whether the active segment is over its bound
// and no in-memory flush is in progress (one pushed segment at a time).
func (m *Memstore) NeedsInMemoryFlush() bool {
	v := m.view.Load()
	return m.threshold > 0 && !v.frozen && !m.flushing.Load() && v.active.ApproximateBytes() >= m.threshold
}

// InMemoryFlushInProgress reports whether a pushed segment's in-memory
// flush (its flatten and the merge or compaction after it) has not
// finished yet.
func (m *Memstore) InMemoryFlushInProgress() bool { return m.flushing.Load() }

// replayFlushFactor: a WAL replay pushes the active segment at this many
// times the in-memory flush threshold. Every in-memory flush under Eager
// merges the whole pipeline, so replaying a WAL of overwrites pays that
// copy once per threshold of records; no reader searches the active
// segment during a replay, so it may grow larger (8 × A = 16% of the
// memstore at the defaults) and the merges become 8 times rarer.
const replayFlushFactor = 8

// NeedsReplayFlush is NeedsInMemoryFlush during a WAL replay.
func (m *Memstore) NeedsReplayFlush() bool {
	v := m.view.Load()
	return m.threshold > 0 && !v.frozen && v.active.ApproximateBytes() >= replayFlushFactor*m.threshold
}

// PushActive makes the active segment immutable, pushes it into the
// pipeline and starts a new active segment; FlushInMemory flattens it. The
// region calls it under its commit lock. It reports false (and does
// nothing) under policy None or once frozen.
func (m *Memstore) PushActive() bool {
	if m.cfg.Policy == None {
		return false
	}
	for {
		v := m.view.Load()
		if v.frozen || v.active.Len() == 0 {
			return false
		}
		nv := v.clone()
		nv.active = NewSkiplist()
		nv.pipeline = append([]segment{v.active}, v.pipeline...)
		nv.recount()
		if m.view.CompareAndSwap(v, nv) {
			m.flushing.Store(true)
			m.stats.Pushes.Add(1)
			return true
		}
	}
}

// Freeze ends every change for a disk flush and returns the final View.
// The region calls it under its commit lock.
func (m *Memstore) Freeze() *View {
	for {
		v := m.view.Load()
		if v.frozen {
			return v
		}
		nv := v.clone()
		nv.frozen = true
		if m.view.CompareAndSwap(v, nv) {
			return nv
		}
	}
}

// MergeFrozen returns a View holding the same versions as the frozen view
// v of m in one flat segment: its skiplists (the active segment, and
// pushed ones an in-memory flush did not reach before the freeze)
// flattened, and every flat segment's index merged with theirs, as an
// in-memory merge does (the chunks are shared, nothing is copied or
// dropped). It is what reads search while the disk flush writes the
// memstore out, and what the flush reads: under full-speed writes a
// frozen memstore waits for its flush most of the time, and a read
// searching its five or so segments, a skiplist among them (a cache miss
// per level), cost more than one merge per flush does. The active
// segment's place is taken by an empty skiplist. Under None, or with
// nothing to merge, it returns v. The caller waits for v's writers first
// (View.WaitWriters), and then may read either view: they hold the same
// versions.
func (m *Memstore) MergeFrozen(v *View) *View {
	if m.cfg.Policy == None || !v.frozen {
		return v
	}
	if v.active.Len() == 0 && len(v.pipeline) <= 1 {
		if _, fl, _ := v.SegmentKinds(); fl == len(v.pipeline) {
			return v
		}
	}
	// An in-memory flush that began before the freeze is abandoning its
	// work; after it, nothing changes v's segments but this.
	m.compactMu.Lock()
	defer m.compactMu.Unlock()
	var flats []*flat // newest first, as the pipeline
	for _, s := range append([]segment{v.active}, v.pipeline...) {
		switch s := s.(type) {
		case *Skiplist:
			if s.Len() > 0 {
				f := flatten(s)
				m.addKeys(f)
				flats = append(flats, f)
			}
		case *flat:
			if s.Len() > 0 {
				flats = append(flats, s)
			}
		}
	}
	nv := v.clone()
	nv.active = NewSkiplist()
	nv.pipeline = nil
	switch len(flats) {
	case 0:
	case 1:
		nv.pipeline = []segment{flats[0]}
	default:
		merged, _ := mergeFlat(flats, nil, m.keys)
		nv.pipeline = []segment{merged}
	}
	nv.recount()
	// Freeze and View return the new one from now on.
	m.view.CompareAndSwap(v, nv)
	return nv
}

// testHookBeforePublish, if set (by tests only), runs in FlushInMemory
// after a merge or compaction is built and before it is published: a test
// freezes the memstore there to race a disk flush deterministically.
var testHookBeforePublish func(*Memstore)

// errFrozen: a disk flush froze the memstore under an in-memory flush.
var errFrozen = errors.New("memstore: frozen for a disk flush")

// replace swaps the run of pipeline segments old (newest first, adjacent)
// for repl, raising the View's horizon to horizon.
func (m *Memstore) replace(old []segment, repl segment, horizon uint64) error {
	for {
		v := m.view.Load()
		if v.frozen {
			return errFrozen
		}
		i := slices.Index(v.pipeline, old[0])
		if i < 0 || i+len(old) > len(v.pipeline) || !slices.Equal(v.pipeline[i:i+len(old)], old) {
			// Only this goroutine removes pipeline segments.
			panic("memstore: pipeline segments replaced behind the in-memory flush")
		}
		nv := v.clone()
		nv.pipeline = slices.Concat(v.pipeline[:i], []segment{repl}, v.pipeline[i+len(old):])
		nv.horizon = max(v.horizon, horizon)
		nv.recount()
		if m.view.CompareAndSwap(v, nv) {
			return nil
		}
	}
}

// FlushResult says what one FlushInMemory did.
type FlushResult struct {
	Flattened int
	Action    Action
	// Dropped versions (a compaction's).
	Dropped int
	// Aborted: a disk flush froze the memstore first; nothing more was
	// published (what was published before stays: it is equivalent).
	Aborted bool
}

// FlushInMemory completes the in-memory flushes PushActive began: it waits
// for the writers of each pushed segment, flattens it, and then merges or
// compacts the pipeline as the policy decides. ret says what a compaction
// may drop. It runs outside the region's locks, one call at a time.
func (m *Memstore) FlushInMemory(ret Retention) FlushResult {
	m.compactMu.Lock()
	defer m.compactMu.Unlock()
	// Cleared last, whatever the outcome: a push after this point is
	// flattened by the next call (the region signals it), and a push
	// this call did not see stays in the pipeline for that call too.
	defer m.flushing.Store(false)
	var res FlushResult
	v := m.view.Load()
	for i := len(v.pipeline) - 1; i >= 0; i-- { // oldest first
		sl, ok := v.pipeline[i].(*Skiplist)
		if !ok {
			continue
		}
		sl.WaitWriters()
		f := flatten(sl)
		m.addKeys(f)
		if err := m.replace([]segment{sl}, f, 0); err != nil {
			m.stats.Aborted.Add(1)
			res.Aborted = true
			return res
		}
		res.Flattened++
		m.stats.InMemoryFlushes.Add(1)
	}
	if res.Flattened == 0 {
		return res
	}
	// The inputs: every flat segment, which is the oldest run of the
	// pipeline (segments pushed since are newer and still skiplists).
	v = m.view.Load()
	var inputs []*flat
	var olds []segment
	for _, s := range v.pipeline {
		if f, ok := s.(*flat); ok {
			inputs = append(inputs, f)
			olds = append(olds, s)
		} else if len(inputs) > 0 {
			panic("memstore: a skiplist segment older than a flat one")
		}
	}
	// Adaptive's t grows once per in-memory flush: the decision below
	// counts one, the extra flattened segments the rest.
	for range res.Flattened - 1 {
		m.adaptive.t = min(1, m.adaptive.t*(1+adaptiveStep))
	}
	inMinTS := ^uint64(0)
	for _, f := range inputs {
		if len(f.entries) > 0 {
			inMinTS = min(inMinTS, f.minTS)
		}
	}
	res.Action = decide(m.cfg.Policy, len(v.pipeline), m.cfg.PipelineSegments, m.cfg.RedundancyThreshold, &m.adaptive, m.cfg.Rand(), ret.dropsNothingFrom(inMinTS))
	if res.Action == Flatten || len(inputs) == 0 || (res.Action == Merge && len(inputs) < 2) {
		res.Action = Flatten
		return res
	}
	var out *flat
	var horizon uint64
	in := 0
	for _, f := range inputs {
		in += len(f.entries)
	}
	if res.Action == Compact {
		out, res.Dropped = mergeFlat(inputs, &ret, m.keys)
		horizon = ret.Horizon
	} else {
		out, _ = mergeFlat(inputs, nil, m.keys)
	}
	if testHookBeforePublish != nil {
		testHookBeforePublish(m)
	}
	if err := m.replace(olds, out, horizon); err != nil {
		m.stats.Aborted.Add(1)
		res.Aborted, res.Dropped = true, 0
		return res
	}
	m.adaptive.learn(res.Action, in, len(out.entries), out.uniques, m.cfg.RedundancyThreshold)
	if res.Action == Compact {
		m.stats.Compactions.Add(1)
		m.stats.VersionsDropped.Add(uint64(res.Dropped))
	} else {
		m.stats.Merges.Add(1)
	}
	return res
}

// keysHeadroom: the memstore's key filter is sized for this many times the
// versions its first flat segment's bytes per version would fill the
// memstore with, so that later, smaller versions do not overfill it (an
// overfull filter lets more absent keys through, never loses one).
const keysHeadroom = 1.5

// addKeys adds the keys of f, just flattened, to the memstore's key
// filter, making it at the first flatten. Under compactMu.
func (m *Memstore) addKeys(f *flat) {
	if len(f.entries) == 0 {
		return
	}
	if m.keys == nil {
		n := keysHeadroom * float64(m.cfg.FlushBytes) * float64(len(f.entries)) / float64(max(f.ApproximateBytes(), 1))
		m.keys = bloom.NewWithEstimates(uint(max(n, float64(len(f.entries)))), keyFilterFalsePositive)
	}
	f.addKeysTo(m.keys)
}

// CheckInvariants checks what of the package invariants can be checked
// from v: segments' timestamp ranges disjoint and ascending, oldest
// pipeline segment first, and each flat segment sorted. Tests call it.
func (v *View) CheckInvariants() error {
	segs := append([]segment{v.active}, v.pipeline...) // newest first
	var newerMin uint64 = ^uint64(0)
	for i, s := range segs {
		if s.Len() == 0 {
			continue
		}
		lo, hi := s.tsRange()
		if hi >= newerMin {
			return fmt.Errorf("memstore: segment %d (newest first) holds timestamps %d..%d, overlapping a newer segment's from %d", i, lo, hi, newerMin)
		}
		newerMin = lo
		if f, ok := s.(*flat); ok {
			for j := 1; j < len(f.entries); j++ {
				if !lessEntry(f, &f.entries[j-1], f, &f.entries[j], true) {
					return fmt.Errorf("memstore: flat segment %d out of order at entry %d", i, j)
				}
			}
		}
	}
	return nil
}

// TSRange is the oldest and newest timestamp v holds (^0, 0 when empty).
func (v *View) TSRange() (uint64, uint64) {
	lo, hi := v.active.tsRange()
	for _, s := range v.pipeline {
		if s.Len() > 0 {
			a, b := s.tsRange()
			lo, hi = min(lo, a), max(hi, b)
		}
	}
	return lo, hi
}
