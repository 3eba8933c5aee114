package memstore

import (
	"bytes"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/bellows-kv/bellows/storage-engine/kv"
)

// modelVersion is one version the model holds.
type modelVersion struct {
	ts    uint64
	kind  kv.Kind
	value []byte
}

// memModel is what one memstore must hold: every version written to it,
// per key, oldest first.
type memModel struct {
	versions map[string][]modelVersion
	written  int
	dropped  int // by the memstore's compactions, per their FlushResults
}

func newMemModel() *memModel { return &memModel{versions: map[string][]modelVersion{}} }

// get is the newest version of key at or below ts.
func (m *memModel) get(key string, ts uint64) (modelVersion, bool) {
	vs := m.versions[key]
	for i := len(vs) - 1; i >= 0; i-- {
		if vs[i].ts <= ts {
			return vs[i], true
		}
	}
	return modelVersion{}, false
}

// modelRun drives one memstore of a policy with random operations and checks
// it against the model after each one.
type modelRun struct {
	t           *testing.T
	rng         *rand.Rand
	policy      Policy
	maxVersions int
	// window, with maxVersions 0, is a GC window: the horizon is the
	// visible timestamp less window (the region's now − gcTTL); 0 keeps
	// every version (horizon 0).
	window  uint64
	stats   *Stats
	m       *Memstore
	model   *memModel
	keys    []string
	maxTS   uint64 // newest timestamp written
	vis     uint64 // the visible timestamp: horizons and snapshots use it
	snaps   map[uint64]int
	pushes  int
	freezes int
	large   int
	dropped int // over every memstore of the run
}

// TestModelPerPolicy runs random writes (puts and tombstones over a few
// keys, so there is redundancy), in-memory flushes with random snapshots and
// horizons, and disk-flush freezes against a map model, for each policy and
// a few retentions: every version, a GC window (horizon = visible − window,
// as the region's now − gcTTL), and one or two versions. After every step it
// checks, besides CheckInvariants:
//   - reads at the newest timestamp, at every open snapshot, and at and
//     above the view's horizon match the model exactly; under a GC window
//     every version above the horizon is held;
//   - a full iteration is sorted, holds only versions written, with their
//     values, holds every version the retention rules require (the newest
//     MaxVersions of each key and what each snapshot reads), and with what
//     compactions dropped adds up to what was written;
//   - point reads at any timestamp agree with the iteration;
//   - with a retention that keeps every version, or a policy that never
//     drops (None, Basic), the iteration is exactly the model and so is
//     every read at every timestamp.
func TestModelPerPolicy(t *testing.T) {
	steps := 1500
	if testing.Short() {
		steps = 300
	}
	type ret struct {
		name        string
		maxVersions int
		window      uint64
	}
	for pi, p := range []Policy{None, Basic, Eager, Adaptive} {
		for ri, rt := range []ret{{"all", 0, 0}, {"window=40", 0, 40}, {"versions=1", 1, 0}, {"versions=2", 2, 0}} {
			maxVersions := rt.maxVersions
			keepsAll := maxVersions == 0 && rt.window == 0
			t.Run(fmt.Sprintf("%s/%s", p, rt.name), func(t *testing.T) {
				seed := uint64(pi*10 + ri + 1)
				r := &modelRun{
					t:           t,
					rng:         rand.New(rand.NewPCG(seed, 0x5eed)),
					policy:      p,
					maxVersions: maxVersions,
					window:      rt.window,
					stats:       new(Stats),
					snaps:       map[uint64]int{},
				}
				for i := range 6 {
					r.keys = append(r.keys, fmt.Sprintf("key-%02d", i))
				}
				r.keys = append(r.keys, "", "key-0") // the empty key, and a prefix of others
				r.newMemstore()
				for step := 0; step < steps; step++ {
					r.step()
					r.check(step)
					if t.Failed() {
						t.Fatalf("seed %d: failed at step %d", seed, step)
					}
				}
				t.Logf("pushes=%d freezes=%d large values=%d in-memory flushes=%d merges=%d compactions=%d dropped=%d",
					r.pushes, r.freezes, r.large, r.stats.InMemoryFlushes.Load(), r.stats.Merges.Load(), r.stats.Compactions.Load(), r.stats.VersionsDropped.Load())
				if got := r.stats.VersionsDropped.Load(); got != uint64(r.dropped) {
					t.Errorf("Stats.VersionsDropped = %d, FlushResults dropped %d", got, r.dropped)
				}
				if r.stats.Aborted.Load() != 0 {
					t.Errorf("Stats.Aborted = %d with no disk flush racing", r.stats.Aborted.Load())
				}
				switch p {
				case None:
					if r.pushes != 0 || r.stats.InMemoryFlushes.Load() != 0 {
						t.Errorf("None pushed %d segments, flushed %d in memory", r.pushes, r.stats.InMemoryFlushes.Load())
					}
				case Basic:
					if r.stats.Merges.Load() == 0 || r.stats.Compactions.Load() != 0 || r.dropped != 0 {
						t.Errorf("Basic: merges %d compactions %d dropped %d; want merges, no compaction, nothing dropped", r.stats.Merges.Load(), r.stats.Compactions.Load(), r.dropped)
					}
				case Eager, Adaptive:
					// Under a retention that keeps every version a
					// compaction could only copy: they act as Basic.
					if keepsAll && (r.stats.Compactions.Load() != 0 || r.stats.Merges.Load() == 0) {
						t.Errorf("%s under a retention that keeps every version: %d compactions, %d merges; want Basic's merges and no compaction",
							p, r.stats.Compactions.Load(), r.stats.Merges.Load())
					}
					if !keepsAll && r.stats.Compactions.Load() == 0 {
						t.Errorf("%s never compacted", p)
					}
					if !keepsAll && r.dropped == 0 {
						t.Errorf("%s dropped nothing in a workload full of superseded versions", p)
					}
				}
				if r.large == 0 {
					t.Errorf("no value over chunkSize/4 was written")
				}
			})
		}
	}
}

func (r *modelRun) newMemstore() {
	cfg := Config{
		Policy:              r.policy,
		FlushBytes:          256 << 10,
		ActiveFraction:      0.1,
		PipelineSegments:    1 + r.rng.IntN(3),
		RedundancyThreshold: 0.2,
		Stats:               r.stats,
		Rand:                r.rng.Float64,
	}
	m, err := New(cfg)
	if err != nil {
		r.t.Fatal(err)
	}
	r.m, r.model = m, newMemModel()
}

// valueSize is mostly small, sometimes a few KiB, and rarely around or over
// chunkSize/4, where the arena gives a value a chunk of its own.
func (r *modelRun) valueSize(key string) int {
	switch x := r.rng.IntN(1000); {
	case x < 900:
		return r.rng.IntN(100)
	case x < 985:
		return r.rng.IntN(8 << 10)
	case x < 990:
		return chunkSize/4 - len(key) // the largest that shares a chunk
	default:
		r.large++
		return chunkSize/4 - len(key) + 1 + r.rng.IntN(64<<10)
	}
}

func (r *modelRun) write() {
	n := 1 + r.rng.IntN(3)
	keys := slices.Clone(r.keys)
	r.rng.Shuffle(len(keys), func(i, j int) { keys[i], keys[j] = keys[j], keys[i] })
	r.maxTS++
	ts := r.maxTS
	// One commit, as the region makes it: one timestamp, the segment chosen
	// with it, the versions added after.
	seg := r.m.Active()
	seg.BeginWrite()
	for _, k := range keys[:n] {
		mv := modelVersion{ts: ts, kind: kv.KindSet}
		if r.rng.IntN(5) == 0 {
			mv.kind = kv.KindDelete
		} else {
			mv.value = fmt.Appendf(nil, "%s@%d:", k, ts)
			mv.value = append(mv.value, bytes.Repeat([]byte{byte(ts)}, r.valueSize(k))...)
		}
		seg.Add(kv.InternalKey{UserKey: []byte(k), TS: ts, Kind: mv.kind}, mv.value)
		r.model.versions[k] = append(r.model.versions[k], mv)
		r.model.written++
	}
	seg.EndWrite()
}

func (r *modelRun) retention() Retention {
	snaps := slices.Sorted(maps.Keys(r.snaps))
	slices.Reverse(snaps)
	return Retention{MaxVersions: r.maxVersions, SnapshotsDesc: snaps, Horizon: r.horizon()}
}

// horizon is what the region passes (retention.Horizon): the visible
// timestamp under a count bound, visible − window under a GC window, 0
// when every version is kept.
func (r *modelRun) horizon() uint64 {
	switch {
	case r.maxVersions > 0:
		return r.vis
	case r.window == 0 || r.vis <= r.window:
		return 0
	}
	return r.vis - r.window
}

func (r *modelRun) flushInMemory() {
	before := r.m.View()
	res := r.m.FlushInMemory(r.retention())
	if res.Aborted {
		r.t.Errorf("FlushInMemory aborted with no disk flush: %+v", res)
	}
	if res.Flattened == 0 && r.m.View() != before {
		r.t.Errorf("FlushInMemory flattened nothing but published a new view")
	}
	if res.Action != Compact && res.Dropped != 0 {
		r.t.Errorf("a %s dropped %d versions", res.Action, res.Dropped)
	}
	r.model.dropped += res.Dropped
	r.dropped += res.Dropped
}

func (r *modelRun) step() {
	switch x := r.rng.IntN(100); {
	case x < 60:
		r.write()
	case x < 70:
		// The visible timestamp catches up, often all the way.
		if r.rng.IntN(2) == 0 {
			r.vis = r.maxTS
		} else {
			r.vis += uint64(r.rng.IntN(int(r.maxTS-r.vis) + 1))
		}
	case x < 85:
		if r.rng.IntN(3) == 0 || r.m.NeedsInMemoryFlush() {
			had := r.m.Active().Len()
			pushed := r.m.PushActive()
			if pushed {
				r.pushes++
			}
			if want := r.policy != None && had > 0; pushed != want {
				r.t.Errorf("PushActive = %v under %s with %d versions active", pushed, r.policy, had)
			}
			if pushed && r.m.Active().Len() != 0 {
				r.t.Errorf("the active segment after a push holds %d versions", r.m.Active().Len())
			}
		}
		r.flushInMemory()
	case x < 90:
		r.snaps[r.vis]++
	case x < 95:
		if len(r.snaps) > 0 {
			ts := slices.Sorted(maps.Keys(r.snaps))[r.rng.IntN(len(r.snaps))]
			if r.snaps[ts]--; r.snaps[ts] == 0 {
				delete(r.snaps, ts)
			}
		}
	case x < 97:
		r.freeze()
	default:
		// An in-memory flush with nothing pushed publishes nothing.
		r.flushInMemory()
	}
}

// freeze is a disk flush: the frozen view holds exactly what the model
// requires, never changes again, and the region goes on with a new
// memstore.
func (r *modelRun) freeze() {
	r.freezes++
	v := r.m.Freeze()
	if r.m.View() != v || !v.frozen {
		r.t.Fatalf("Freeze returned a view that is not the memstore's, frozen")
	}
	r.checkView(v, -1)
	if r.m.PushActive() {
		r.t.Errorf("PushActive succeeded on a frozen memstore")
	}
	res := r.m.FlushInMemory(r.retention())
	if r.m.View() != v || res.Flattened != 0 || res.Dropped != 0 {
		r.t.Errorf("FlushInMemory on a frozen memstore changed it: %+v", res)
	}
	if r.m.NeedsInMemoryFlush() {
		r.t.Errorf("a frozen memstore needs an in-memory flush")
	}
	r.newMemstore()
}

func (r *modelRun) check(step int) {
	r.checkView(r.m.View(), step)
}

type iterated struct {
	key   kv.InternalKey
	value []byte
}

func (r *modelRun) checkView(v *View, step int) {
	t := r.t
	t.Helper()
	if err := v.CheckInvariants(); err != nil {
		t.Fatalf("step %d: %v", step, err)
	}
	if v.Horizon() > r.vis {
		t.Fatalf("step %d: view horizon %d above the visible timestamp %d", step, v.Horizon(), r.vis)
	}
	if r.policy == None && v.Segments() != 0 {
		t.Fatalf("step %d: None has %d pipeline segments", step, v.Segments())
	}

	// The full iteration.
	var got []iterated
	it := v.NewIterator()
	for ok := it.First(); ok; ok = it.Next() {
		k := it.Key()
		if n := len(got); n > 0 && kv.Compare(got[n-1].key, k) >= 0 {
			t.Fatalf("step %d: iteration out of order: %v then %v", step, got[n-1].key, k)
		}
		// Segments never change, so neither do the bytes read: no copy.
		got = append(got, iterated{k, it.Value()})
	}
	if err := it.Close(); err != nil {
		t.Fatal(err)
	}
	if int64(len(got)) != v.Len() {
		t.Fatalf("step %d: iterated %d versions, Len %d", step, len(got), v.Len())
	}
	if len(got)+r.model.dropped != r.model.written {
		t.Fatalf("step %d: %d versions held + %d dropped != %d written", step, len(got), r.model.dropped, r.model.written)
	}
	if (len(got) == 0) != (v.ApproximateBytes() == 0) {
		t.Fatalf("step %d: %d versions in %d bytes", step, len(got), v.ApproximateBytes())
	}
	minTS, maxTS := ^uint64(0), uint64(0)
	held := map[string][]modelVersion{} // newest first
	for _, e := range got {
		k := string(e.key.UserKey)
		mv, ok := r.model.get(k, e.key.TS)
		if !ok || mv.ts != e.key.TS || mv.kind != e.key.Kind || !bytes.Equal(mv.value, e.value) {
			t.Fatalf("step %d: iterated %v (%d value bytes), never written so", step, e.key, len(e.value))
		}
		held[k] = append(held[k], mv)
		minTS, maxTS = min(minTS, e.key.TS), max(maxTS, e.key.TS)
	}
	if v.MinTS() != minTS {
		t.Fatalf("step %d: MinTS %d, oldest held %d", step, v.MinTS(), minTS)
	}
	if lo, hi := v.TSRange(); lo != minTS || hi != maxTS {
		t.Fatalf("step %d: TSRange %d..%d, held %d..%d", step, lo, hi, minTS, maxTS)
	}
	exact := (r.maxVersions == 0 && r.window == 0) || r.policy == None || r.policy == Basic
	snaps := slices.Sorted(maps.Keys(r.snaps))
	for k, vs := range r.model.versions {
		h := held[k]
		if exact && len(h) != len(vs) {
			t.Fatalf("step %d: key %q: %d versions held, %d written, under a retention that keeps them all", step, k, len(h), len(vs))
		}
		// Under a GC window every version above the horizon (of every
		// compaction so far: the view's is the newest) is held.
		if r.window > 0 {
			above := 0
			for _, mv := range vs {
				if mv.ts > v.Horizon() {
					above++
				}
			}
			if len(h) < above || (above > 0 && h[above-1].ts <= v.Horizon()) {
				t.Fatalf("step %d: key %q: %d versions above the horizon %d written, not all held (%d held)", step, k, above, v.Horizon(), len(h))
			}
		}
		// The newest MaxVersions are always held.
		for i := 0; i < min(r.maxVersions, len(vs)); i++ {
			want := vs[len(vs)-1-i]
			if i >= len(h) || h[i].ts != want.ts {
				t.Fatalf("step %d: key %q: version @%d, among the newest %d, is missing", step, k, want.ts, r.maxVersions)
			}
		}
	}

	// Point reads. Exact: at the newest timestamp, at every open snapshot,
	// at and above the horizon; with nothing dropped, at every timestamp.
	tss := []uint64{kv.MaxTimestamp, r.maxTS, r.vis, v.Horizon()}
	tss = append(tss, snaps...)
	for range 3 {
		if r.maxTS > v.Horizon() {
			tss = append(tss, v.Horizon()+r.rng.Uint64N(r.maxTS-v.Horizon()+1))
		}
	}
	if exact {
		for range 4 {
			tss = append(tss, r.rng.Uint64N(r.maxTS+2))
		}
	}
	for _, k := range r.keys {
		for _, ts := range tss {
			r.checkGet(v, step, k, ts, "exact")
		}
		// Any timestamp: the read agrees with the iteration.
		for range 3 {
			ts := r.rng.Uint64N(r.maxTS + 2)
			val, kind, ok := v.Get([]byte(k), ts)
			var want *modelVersion
			for i := range held[k] {
				if held[k][i].ts <= ts {
					want = &held[k][i]
					break
				}
			}
			if ok != (want != nil) || (ok && (kind != want.kind || !bytes.Equal(val, want.value))) {
				t.Fatalf("step %d: Get(%q, %d) = %v,%v (%d bytes); the iteration holds %+v", step, k, ts, ok, kind, len(val), want)
			}
		}
	}
}

// checkGet checks that v reads key at ts as the model does.
func (r *modelRun) checkGet(v *View, step int, key string, ts uint64, what string) {
	t := r.t
	t.Helper()
	val, kind, ok := v.Get([]byte(key), ts)
	mv, mok := r.model.get(key, ts)
	if ok != mok || (ok && (kind != mv.kind || !bytes.Equal(val, mv.value))) {
		t.Fatalf("step %d: %s read Get(%q, %d) = found %v kind %v (%d bytes); model: found %v @%d kind %v (%d bytes) [horizon %d, vis %d, snapshots %v, policy %s, versions %d]",
			step, what, key, ts, ok, kind, len(val), mok, mv.ts, mv.kind, len(mv.value), v.Horizon(), r.vis, slices.Sorted(maps.Keys(r.snaps)), r.policy, r.maxVersions)
	}
	if r.window > 0 && v.Horizon() > 0 && v.Horizon()+r.window > r.vis {
		t.Fatalf("step %d: view horizon %d within the GC window %d of the visible timestamp %d", step, v.Horizon(), r.window, r.vis)
	}
}
