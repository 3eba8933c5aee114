package memstore

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/bellows-kv/bellows/storage-engine/kv"
)

// commitLog stands for the region's commit path: timestamps are assigned,
// the active segment chosen and pushed under one mutex (commitMu), and the
// visible timestamp is the newest below which every commit has finished.
type commitLog struct {
	m        *Memstore
	mu       sync.Mutex // commitMu
	lastTS   uint64
	inflight []uint64
	vis      atomic.Uint64
	newest   map[string]uint64 // per key, of finished commits
	written  int
	kick     chan struct{}
	// flushed, if set, is signalled by the in-memory flush goroutine after
	// each flush: a writer that pushed waits for it once its commit is
	// done, so flushes happen however the scheduler favours the writers
	// (the others go on committing meanwhile; a push waits for the flush
	// before it, NeedsInMemoryFlush).
	flushed chan struct{}
}

// commit writes keys at a new timestamp as the region does: push if the
// active segment is full, take a timestamp and BeginWrite under the lock,
// Add and EndWrite outside it.
func (c *commitLog) commit(keys []string, pad int) uint64 {
	c.mu.Lock()
	pushed := c.m.NeedsInMemoryFlush() && c.m.PushActive()
	if pushed {
		select {
		case c.kick <- struct{}{}:
		default:
		}
	}
	c.lastTS++
	ts := c.lastTS
	seg := c.m.Active()
	seg.BeginWrite()
	c.inflight = append(c.inflight, ts)
	c.mu.Unlock()

	for _, k := range keys {
		seg.Add(kv.InternalKey{UserKey: []byte(k), TS: ts, Kind: kv.KindSet}, tsValue(k, ts, pad))
	}
	seg.EndWrite()

	c.mu.Lock()
	c.inflight = slices.DeleteFunc(c.inflight, func(x uint64) bool { return x == ts })
	vis := c.lastTS
	if len(c.inflight) > 0 {
		vis = slices.Min(c.inflight) - 1
	}
	c.vis.Store(vis)
	for _, k := range keys {
		c.newest[k] = max(c.newest[k], ts)
	}
	c.written += len(keys)
	c.mu.Unlock()
	if pushed && c.flushed != nil {
		<-c.flushed
	}
	return ts
}

// tsValue encodes ts first, then the key and padding.
func tsValue(key string, ts uint64, pad int) []byte {
	v := binary.BigEndian.AppendUint64(nil, ts)
	v = append(v, key...)
	return append(v, make([]byte, pad)...)
}

// valueTS decodes a tsValue of key; it reports an error (and returns 0) for
// any other value. Safe to call from any goroutine.
func valueTS(t *testing.T, key string, v []byte) uint64 {
	t.Helper()
	if len(v) < 8+len(key) || string(v[8:8+len(key)]) != key {
		t.Errorf("value %q is not one written for key %q", v, key)
		return 0
	}
	return binary.BigEndian.Uint64(v)
}

// acquire loads a view and a read timestamp at or above its horizon, as the
// region's readers do.
func (c *commitLog) acquire() (*View, uint64) {
	for {
		vis := c.vis.Load()
		v := c.m.View()
		if v.Horizon() <= vis {
			return v, vis
		}
	}
}

// TestConcurrentCommitsReadsAndInMemoryFlushes runs writers through the
// region's commit protocol, a background in-memory flusher, and readers,
// under -race. Readers check each view's invariants (segments' timestamp
// ranges disjoint and ascending, flat segments sorted), that iteration is
// sorted and every version's value is its own, that the newest version of a
// key they see (at the newest timestamp, and at the visible one) never goes
// backwards, and that a snapshot's reads never change. At the end every
// key's newest version is readable, and under Basic every version written.
func TestConcurrentCommitsReadsAndInMemoryFlushes(t *testing.T) {
	for _, p := range []Policy{Basic, Eager, Adaptive} {
		t.Run(string(p), func(t *testing.T) { testConcurrent(t, p) })
	}
}

func testConcurrent(t *testing.T, p Policy) {
	const (
		writers   = 4
		readers   = 2
		keyCount  = 16
		preload   = 200
		perWriter = 1200
	)
	stats := new(Stats)
	m, err := New(Config{Policy: p, FlushBytes: 64 << 10, ActiveFraction: 0.125, PipelineSegments: 2, RedundancyThreshold: 0.2, Stats: stats})
	if err != nil {
		t.Fatal(err)
	}
	keys := make([]string, keyCount)
	for i := range keys {
		keys[i] = fmt.Sprintf("user%012d", i*7919) // 16 bytes, shared 8-byte prefixes
	}
	c := &commitLog{m: m, newest: map[string]uint64{}, kick: make(chan struct{}, 1)}
	ret := func() Retention {
		// One open snapshot; the horizon is the visible timestamp.
		return Retention{MaxVersions: 1, SnapshotsDesc: []uint64{preload}, Horizon: c.vis.Load()}
	}

	// Before the race: preload and take a snapshot at timestamp preload.
	for i := 0; i < preload; i++ {
		c.commit([]string{keys[i%keyCount]}, 20)
	}
	if c.vis.Load() != preload {
		t.Fatalf("visible timestamp %d after %d commits", c.vis.Load(), preload)
	}
	atSnap := map[string]uint64{}
	for _, k := range keys {
		atSnap[k] = c.newest[k]
	}
	// The preload's push, flushed here: writers that push during the race
	// wait for their flush (c.flushed), and none could push behind this one.
	select {
	case <-c.kick:
		m.FlushInMemory(ret())
	default:
	}

	stop := make(chan struct{})
	var bg sync.WaitGroup
	bg.Add(1)
	c.flushed = make(chan struct{}, 1)
	go func() { // the in-memory flush goroutine
		defer bg.Done()
		for {
			// The retention is taken before waiting, so its horizon lags
			// the visible timestamp (any horizon at or below it is one a
			// region may pass), and the segments compacted hold versions
			// above it.
			r := ret()
			select {
			case <-stop:
				return
			case <-c.kick:
			}
			if res := m.FlushInMemory(r); res.Aborted {
				t.Errorf("in-memory flush aborted with no disk flush")
			}
			c.flushed <- struct{}{}
		}
	}()
	var sawSegments atomic.Int64
	for r := 0; r < readers; r++ {
		bg.Add(1)
		go func() {
			defer bg.Done()
			newest := map[string]uint64{}
			atVis := map[string]uint64{}
			for {
				select {
				case <-stop:
					return
				default:
				}
				v, vis := c.acquire()
				if err := v.CheckInvariants(); err != nil {
					t.Error(err)
					return
				}
				if v.Segments() > 1 {
					sawSegments.Add(1)
				}
				for _, k := range keys {
					val, kind, ok := v.Get([]byte(k), kv.MaxTimestamp)
					if !ok || kind != kv.KindSet {
						t.Errorf("Get(%q) at the newest timestamp found %v kind %v", k, ok, kind)
						return
					}
					ts := valueTS(t, k, val)
					if ts < newest[k] {
						t.Errorf("key %q: the newest version read went back from @%d to @%d", k, newest[k], ts)
						return
					}
					newest[k] = ts
					val, _, ok = v.Get([]byte(k), vis)
					if ts = valueTS(t, k, val); !ok || ts > vis || ts < atVis[k] {
						t.Errorf("key %q at the visible timestamp %d: read @%d (found %v), after @%d", k, vis, ts, ok, atVis[k])
						return
					}
					atVis[k] = ts
					val, _, ok = v.Get([]byte(k), preload)
					if ts = valueTS(t, k, val); !ok || ts != atSnap[k] {
						t.Errorf("key %q at the snapshot %d: read @%d (found %v), want @%d", k, preload, ts, ok, atSnap[k])
						return
					}
				}
				it := v.NewIterator()
				var prev kv.InternalKey
				n := 0
				for ok := it.First(); ok; ok = it.Next() {
					k := it.Key()
					if n > 0 && kv.Compare(prev, k) >= 0 {
						t.Errorf("iteration out of order: %v then %v", prev, k)
						return
					}
					if ts := valueTS(t, string(k.UserKey), it.Value()); ts != k.TS {
						t.Errorf("version %v holds the value of @%d", k, ts)
						return
					}
					prev = k.Clone()
					n++
				}
			}
		}()
	}

	var wg sync.WaitGroup
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			for i := 0; i < perWriter; i++ {
				ks := []string{keys[rng.IntN(keyCount)]}
				if rng.IntN(3) == 0 {
					if k := keys[rng.IntN(keyCount)]; k != ks[0] {
						ks = append(ks, k)
					}
				}
				c.commit(ks, 20+rng.IntN(80))
			}
		}(w)
	}
	wg.Wait()
	close(stop)
	bg.Wait()
	if t.Failed() {
		return
	}

	// Every commit has finished: flush what is pushed, and check the end.
	res := m.FlushInMemory(ret())
	if res.Aborted {
		t.Fatalf("final in-memory flush aborted")
	}
	v := m.View()
	if err := v.CheckInvariants(); err != nil {
		t.Fatal(err)
	}
	// The active segment holds the last commits and the pipeline the rest:
	// CheckInvariants compared at least two segments' ranges.
	if v.active.Len() == 0 || v.Segments() == 0 {
		t.Fatalf("final view: %d versions active, %d pipeline segments", v.active.Len(), v.Segments())
	}
	for _, k := range keys {
		val, _, ok := v.Get([]byte(k), kv.MaxTimestamp)
		if !ok || valueTS(t, k, val) != c.newest[k] {
			t.Errorf("key %q: newest readable is %q (found %v), want @%d", k, val, ok, c.newest[k])
		}
		val, _, ok = v.Get([]byte(k), preload)
		if !ok || valueTS(t, k, val) != atSnap[k] {
			t.Errorf("key %q: at the snapshot read %q (found %v), want @%d", k, val, ok, atSnap[k])
		}
	}
	held := 0
	it := v.NewIterator()
	for ok := it.First(); ok; ok = it.Next() {
		held++
	}
	if held+int(stats.VersionsDropped.Load()) != c.written {
		t.Errorf("%d versions held + %d dropped != %d written", held, stats.VersionsDropped.Load(), c.written)
	}
	t.Logf("pushes %d; written %d, held %d; in-memory flushes %d, merges %d, compactions %d, dropped %d; readers saw %d views of several segments",
		stats.Pushes.Load(), c.written, held, stats.InMemoryFlushes.Load(), stats.Merges.Load(), stats.Compactions.Load(), stats.VersionsDropped.Load(), sawSegments.Load())
	if stats.InMemoryFlushes.Load() == 0 {
		t.Errorf("no in-memory flush happened")
	}
	switch p {
	case Basic:
		if stats.Merges.Load() == 0 || stats.VersionsDropped.Load() != 0 {
			t.Errorf("Basic: %d merges, %d versions dropped", stats.Merges.Load(), stats.VersionsDropped.Load())
		}
	case Eager:
		if stats.Compactions.Load() == 0 || stats.VersionsDropped.Load() == 0 {
			t.Errorf("Eager: %d compactions, %d versions dropped", stats.Compactions.Load(), stats.VersionsDropped.Load())
		}
	case Adaptive:
		if stats.Merges.Load()+stats.Compactions.Load() == 0 {
			t.Errorf("Adaptive neither merged nor compacted")
		}
	}
	if stats.Aborted.Load() != 0 {
		t.Errorf("%d in-memory flushes aborted", stats.Aborted.Load())
	}
}

// TestDiskFlushRacingInMemoryMerge freezes the memstore (a disk flush)
// after a merge or compaction is built and before it is published. The
// in-memory flush must abort, publish nothing, and leave the frozen view
// holding every version written; the frozen view never changes after.
func TestDiskFlushRacingInMemoryMerge(t *testing.T) {
	for _, p := range []Policy{Basic, Eager} {
		t.Run(string(p), func(t *testing.T) {
			stats := new(Stats)
			m, err := New(Config{Policy: p, FlushBytes: 1 << 20, ActiveFraction: 0.5, PipelineSegments: 1, RedundancyThreshold: 0.5, Stats: stats})
			if err != nil {
				t.Fatal(err)
			}
			var ts uint64
			type version struct {
				key string
				ts  uint64
			}
			var written []version
			write := func(keys ...string) {
				ts++
				seg := m.Active()
				seg.BeginWrite()
				for _, k := range keys {
					seg.Add(kv.InternalKey{UserKey: []byte(k), TS: ts, Kind: kv.KindSet}, tsValue(k, ts, 0))
					written = append(written, version{k, ts})
				}
				seg.EndWrite()
			}
			ret := func() Retention { return Retention{MaxVersions: 1, Horizon: ts} }

			// One segment, flattened (and, under Eager, compacted: no key
			// repeats, so nothing is dropped).
			write("a", "b")
			write("c")
			if !m.PushActive() {
				t.Fatal("not pushed")
			}
			if res := m.FlushInMemory(ret()); res.Flattened != 1 || res.Aborted || res.Dropped != 0 {
				t.Fatalf("first in-memory flush: %+v", res)
			}
			merges, compactions := stats.Merges.Load(), stats.Compactions.Load()
			before := m.View()

			// A second segment, redundant with the first: a merge under
			// Basic (2 > S), a compaction dropping a@1 and b@2 under Eager.
			write("a")
			write("b", "d")
			if !m.PushActive() {
				t.Fatal("not pushed")
			}
			var frozen *View
			hooked := 0
			testHookBeforePublish = func(hm *Memstore) {
				if hm != m {
					return
				}
				hooked++
				// Commits land in the active segment, one more segment is
				// pushed, and then the disk flush freezes it all.
				write("e")
				if !m.PushActive() {
					t.Error("push under the in-memory flush failed")
				}
				write("a")
				frozen = m.Freeze()
			}
			defer func() { testHookBeforePublish = nil }()

			res := m.FlushInMemory(ret())
			if hooked != 1 {
				t.Fatalf("the hook ran %d times", hooked)
			}
			want := map[Policy]Action{Basic: Merge, Eager: Compact}[p]
			if !res.Aborted || res.Action != want || res.Dropped != 0 || res.Flattened != 1 {
				t.Fatalf("FlushInMemory = %+v; want the %s aborted, nothing dropped", res, want)
			}
			if got := stats.Aborted.Load(); got != 1 {
				t.Fatalf("Stats.Aborted = %d, want 1", got)
			}
			if stats.Merges.Load() != merges || stats.Compactions.Load() != compactions || stats.VersionsDropped.Load() != 0 {
				t.Fatalf("the aborted %s was counted: merges %d compactions %d dropped %d", want, stats.Merges.Load(), stats.Compactions.Load(), stats.VersionsDropped.Load())
			}
			if m.View() != frozen || !frozen.frozen {
				t.Fatalf("the memstore's view is not the frozen one")
			}
			if frozen.Horizon() != before.Horizon() {
				t.Fatalf("the aborted %s raised the horizon from %d to %d", want, before.Horizon(), frozen.Horizon())
			}
			checkHoldsAll := func(v *View) {
				t.Helper()
				if err := v.CheckInvariants(); err != nil {
					t.Fatal(err)
				}
				var got []version
				it := v.NewIterator()
				for ok := it.First(); ok; ok = it.Next() {
					k := it.Key()
					if valueTS(t, string(k.UserKey), it.Value()) != k.TS {
						t.Fatalf("%v holds another version's value", k)
					}
					got = append(got, version{string(k.UserKey), k.TS})
				}
				exp := slices.Clone(written)
				slices.SortFunc(exp, func(a, b version) int {
					return kv.Compare(kv.InternalKey{UserKey: []byte(a.key), TS: a.ts}, kv.InternalKey{UserKey: []byte(b.key), TS: b.ts})
				})
				if !slices.Equal(got, exp) {
					t.Fatalf("frozen view holds %v, want every version written, %v", got, exp)
				}
			}
			// Nothing lost: every version written, in the segments as
			// they were before the merge (the flat one, the flattened
			// one, the one pushed under it) and the active one.
			checkHoldsAll(frozen)
			if frozen.Segments() != 3 {
				t.Fatalf("frozen view has %d pipeline segments, want 3", frozen.Segments())
			}

			// The frozen view never changes: no push, and an in-memory
			// flush (here of the segment pushed under the race) publishes
			// nothing.
			testHookBeforePublish = nil
			if m.PushActive() {
				t.Fatal("pushed into a frozen memstore")
			}
			if m.NeedsInMemoryFlush() {
				t.Fatal("a frozen memstore needs an in-memory flush")
			}
			res = m.FlushInMemory(ret())
			if res.Flattened != 0 || res.Dropped != 0 || !res.Aborted {
				t.Fatalf("FlushInMemory on a frozen memstore = %+v, want it aborted with nothing flattened", res)
			}
			if m.View() != frozen {
				t.Fatal("FlushInMemory changed a frozen memstore's view")
			}
			if _, ok := frozen.pipeline[0].(*Skiplist); !ok {
				t.Fatal("the segment pushed under the race was flattened after the freeze")
			}
			checkHoldsAll(m.View())
			frozen.WaitWriters() // no writer is left registered
		})
	}
}

// TestDiskFlushRacingFlatten: a freeze between a segment's push and its
// flattening leaves the skiplist in the frozen view, whole.
func TestDiskFlushRacingFlatten(t *testing.T) {
	m, err := New(Config{Policy: Basic, FlushBytes: 1 << 20, ActiveFraction: 0.5, PipelineSegments: 2})
	if err != nil {
		t.Fatal(err)
	}
	seg := m.Active()
	seg.BeginWrite()
	seg.Add(kv.InternalKey{UserKey: []byte("a"), TS: 1, Kind: kv.KindSet}, []byte("x"))
	seg.EndWrite()
	if !m.PushActive() {
		t.Fatal("not pushed")
	}
	v := m.Freeze()
	res := m.FlushInMemory(Retention{Horizon: 1})
	if !res.Aborted || res.Flattened != 0 || m.View() != v {
		t.Fatalf("FlushInMemory after Freeze = %+v, view changed %v", res, m.View() != v)
	}
	if val, _, ok := v.Get([]byte("a"), 1); !ok || !bytes.Equal(val, []byte("x")) {
		t.Fatalf("frozen view lost a@1: %q %v", val, ok)
	}
}

// TestOnePushedSegmentAtATime: while an in-memory flush is in progress (a
// segment was pushed and FlushInMemory has not finished with it), the
// active segment grows past A instead of being pushed, as HBase's
// inMemoryFlushInProgress does. Writers faster than the flush goroutine
// otherwise pile unflattened segments into the pipeline, which every
// read then searches.
func TestOnePushedSegmentAtATime(t *testing.T) {
	m, err := New(Config{Policy: Basic, FlushBytes: 1 << 20, ActiveFraction: 0.01, PipelineSegments: 5})
	if err != nil {
		t.Fatal(err)
	}
	var ts uint64
	fill := func() {
		for !m.View().frozen && m.Active().ApproximateBytes() < m.threshold {
			ts++
			seg := m.Active()
			seg.BeginWrite()
			seg.Add(kv.InternalKey{UserKey: fmt.Appendf(nil, "k%06d", ts), TS: ts, Kind: kv.KindSet}, make([]byte, 100))
			seg.EndWrite()
		}
	}
	fill()
	if !m.NeedsInMemoryFlush() || !m.PushActive() {
		t.Fatal("a full active segment with no flush in progress was not pushed")
	}
	fill()
	if m.NeedsInMemoryFlush() {
		t.Fatal("a second segment is due while the first pushed one is not yet flattened")
	}
	if res := m.FlushInMemory(Retention{Horizon: ts}); res.Flattened != 1 {
		t.Fatalf("FlushInMemory = %+v, want the pushed segment flattened", res)
	}
	if !m.NeedsInMemoryFlush() {
		t.Fatal("after the in-memory flush finished, the full active segment is not due")
	}
	if sl, fl, _ := m.View().SegmentKinds(); sl != 1 || fl != 1 {
		t.Fatalf("view holds %d skiplists and %d flat segments, want the active one and one flat", sl, fl)
	}
}

// TestMergeFrozen: a frozen memstore's segments (a flat one, a pushed
// skiplist no in-memory flush reached, and the active skiplist) are merged
// into one flat segment for the reads made while the disk flush runs. The
// new view holds the same versions in the same order, finds every key as
// the old one does, keeps the package invariants, searches one flat
// segment and an empty skiplist, and is the one View and Freeze return
// from then on. Under None, and for a view not frozen, nothing changes.
func TestMergeFrozen(t *testing.T) {
	for _, p := range []Policy{Basic, None} {
		t.Run(string(p), func(t *testing.T) {
			m, err := New(Config{Policy: p, FlushBytes: 1 << 20, ActiveFraction: 0.1, PipelineSegments: 5})
			if err != nil {
				t.Fatal(err)
			}
			rng := rand.New(rand.NewPCG(3, 4))
			var ts uint64
			write := func(n int) {
				for range n {
					ts++
					seg := m.Active()
					seg.BeginWrite()
					k := fmt.Appendf(nil, "k%04d", rng.IntN(500))
					seg.Add(kv.InternalKey{UserKey: k, TS: ts, Kind: kv.KindSet}, k)
					seg.EndWrite()
				}
			}
			write(1000)
			m.PushActive()
			m.FlushInMemory(Retention{Horizon: ts}) // one flat segment
			write(1000)
			m.PushActive() // pushed, not flattened
			write(1000)
			if got := m.MergeFrozen(m.View()); got != m.View() {
				t.Fatal("a view not frozen was merged")
			}
			old := m.Freeze()
			v := m.MergeFrozen(old)
			if p == None {
				if v != old {
					t.Fatal("None's frozen view was merged")
				}
				return
			}
			if err := v.CheckInvariants(); err != nil {
				t.Fatal(err)
			}
			if sl, fl, n := v.SegmentKinds(); sl != 1 || n != 0 || fl != 1 {
				t.Fatalf("merged view: %d skiplists holding %d versions, %d flat segments; want only the empty active skiplist and one flat", sl, n, fl)
			}
			if m.View() != v || m.Freeze() != v || m.MergeFrozen(v) != v {
				t.Fatal("the memstore still returns the view before merging, or merges it again")
			}
			if !equalPairs(collect(t, v.NewIterator()), collect(t, old.NewIterator())) || v.Len() != old.Len() {
				t.Fatal("the merged view does not iterate the versions the frozen one does")
			}
			for i := range 500 {
				k := fmt.Appendf(nil, "k%04d", i)
				for _, at := range []uint64{ts, ts / 2, 1500} {
					a, ak, aok := old.Get(k, at)
					b, bk, bok := v.Get(k, at)
					if aok != bok || ak != bk || !bytes.Equal(a, b) {
						t.Fatalf("Get(%s, %d): frozen view %q %v %v, merged %q %v %v", k, at, a, ak, aok, b, bk, bok)
					}
				}
			}
		})
	}
}
