package region

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"slices"
	"sort"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bellows-kv/bellows/storage-engine/blob"
	"github.com/bellows-kv/bellows/storage-engine/blockcache"
	"github.com/bellows-kv/bellows/storage-engine/compaction"
	"github.com/bellows-kv/bellows/storage-engine/hlc"
	"github.com/bellows-kv/bellows/storage-engine/kv"
	"github.com/bellows-kv/bellows/storage-engine/memstore"
	"github.com/bellows-kv/bellows/storage-engine/sstable"
	"github.com/bellows-kv/bellows/storage-engine/wal"
)

// refVersion is one version in the reference model.
type refVersion struct {
	ts  uint64
	val []byte // nil: tombstone
}

// reference is the in-memory model the engine is checked against.
type reference struct {
	versions map[string][]refVersion // ascending ts
}

func (m *reference) apply(ts uint64, b *Batch) {
	for _, o := range b.ops {
		var v []byte
		if o.kind == kv.KindSet {
			v = bytes.Clone(o.value)
			if v == nil {
				v = []byte{}
			}
		}
		m.versions[string(o.key)] = append(m.versions[string(o.key)], refVersion{ts: ts, val: v})
	}
}

func (m *reference) get(key string, ts uint64) ([]byte, bool) {
	vs := m.versions[key]
	for i := len(vs) - 1; i >= 0; i-- {
		if vs[i].ts <= ts {
			return vs[i].val, vs[i].val != nil
		}
	}
	return nil, false
}

func (m *reference) scan(start, end string, limit int, ts uint64) []KV {
	var keys []string
	for k := range m.versions {
		if k >= start && (end == "" || k < end) {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	var out []KV
	for _, k := range keys {
		if v, ok := m.get(k, ts); ok {
			out = append(out, KV{Key: []byte(k), Value: v})
			if limit > 0 && len(out) == limit {
				break
			}
		}
	}
	return out
}

// scanReverse is scan in descending order, the limit counting from the top.
func (m *reference) scanReverse(start, end string, limit int, ts uint64) []KV {
	out := m.scan(start, end, 0, ts)
	slices.Reverse(out)
	if limit > 0 && len(out) > limit {
		out = out[:limit]
	}
	return out
}

type modelConfig struct {
	maxVersions int
	// gcTTL > 0 (with maxVersions 0) is a GC window on a test clock that
	// the run advances.
	gcTTL    time.Duration
	walMode  wal.Mode
	memstore memstore.Policy
}

// modelRetentions are the retentions the model runs: every version, a GC
// window, one and two versions.
var modelRetentions = []compaction.Retention{{}, {GCTTL: modelGCTTL}, {MaxVersions: 1}, {MaxVersions: 2}}

// modelGCTTL is the model's GC window: a few dozen operations of its test
// clock, which advances up to 4 ms per operation.
const modelGCTTL = 60 * time.Millisecond

var memstorePolicies = []memstore.Policy{memstore.None, memstore.Basic, memstore.Eager, memstore.Adaptive}

// TestModelRandomized runs seeded random operation sequences against a
// region and the reference. BELLOWS_SEED=n reruns one seed;
// BELLOWS_MODEL_SEEDS=n runs more seeds.
func TestModelRandomized(t *testing.T) {
	seeds := []uint64{}
	if s := os.Getenv("BELLOWS_SEED"); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		seeds = append(seeds, n)
	} else {
		count := 16
		if s := os.Getenv("BELLOWS_MODEL_SEEDS"); s != "" {
			count, _ = strconv.Atoi(s)
		}
		for i := 0; i < count; i++ {
			seeds = append(seeds, uint64(1000+i))
		}
	}
	for _, seed := range seeds {
		// The 16 seeds cover every retention with every memstore policy.
		ret := modelRetentions[seed/4%4]
		cfg := modelConfig{maxVersions: ret.MaxVersions, gcTTL: ret.GCTTL, walMode: wal.Mode(seed / 3 % 2), memstore: memstorePolicies[seed%4]}
		t.Run(fmt.Sprintf("seed=%d/%s", seed, cfg.memstore), func(t *testing.T) {
			t.Parallel()
			runModel(t, seed, cfg, 2500)
		})
	}
}

func runModel(t *testing.T, seed uint64, cfg modelConfig, ops int) {
	rng := rand.New(rand.NewPCG(seed, seed*7919))
	fail := func(format string, args ...any) {
		t.Helper()
		t.Fatalf("seed %d (rerun: BELLOWS_SEED=%d go test ./storage-engine/region -run TestModelRandomized): %s", seed, seed, fmt.Sprintf(format, args...))
	}
	ctx := context.Background()
	dir := t.TempDir()
	bucket, err := blob.Open(ctx, "file://"+dir+"/bucket")
	if err != nil {
		t.Fatal(err)
	}
	cache := blockcache.New(int64(64 << 10 * (1 + rng.IntN(8))))
	// The region's clock: a test clock the run advances, so the GC window
	// moves by the operations, not by the machine's speed.
	var now atomic.Int64
	now.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	clock := hlc.New(func() time.Time { return time.Unix(0, now.Load()) }, 0)
	opts := Options{
		Clock:         clock,
		Name:          "model",
		Bucket:        bucket,
		WALDir:        dir + "/wal",
		WALMode:       cfg.walMode,
		MemstoreBytes: int64(2<<10 + rng.IntN(16<<10)),
		BlockCache:    cache,
		SST:           sstable.WriterOptions{BlockSize: 256 + rng.IntN(2048), Compression: sstable.Compression(rng.IntN(2))},
		Compaction:    compaction.Policy{MinFiles: 2 + rng.IntN(3), MaxFiles: 6, Ratio: 1.2 + rng.Float64(), MaxBytes: 1 << 30},
		Retention:     compaction.Retention{MaxVersions: cfg.maxVersions, GCTTL: cfg.gcTTL},
		// In-memory flushes every few writes; merges and compactions as
		// often as S allows.
		Memstore: MemstoreOptions{
			Policy:              cfg.memstore,
			ActiveFraction:      0.02 + 0.13*rng.Float64(),
			PipelineSegments:    1 + rng.IntN(5),
			RedundancyThreshold: 0.1 + 0.5*rng.Float64(),
		},
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError})),
	}
	// Every warmup mode installs compactions its own way; a block source
	// stands in for the worker.
	opts.Warmup = WarmupMode(seed % 6)
	opts.WarmupRateBytes = 64 << 20
	if opts.Warmup != WarmupNone {
		opts.Executor = &sourceExecutor{bucket: bucket}
	}
	r, err := Open(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { r.Close() }()

	ref := &reference{versions: map[string][]refVersion{}}
	var stamps []uint64
	type snap struct {
		s   *Snapshot
		ref uint64
	}
	var snaps []snap
	keySpace := 50 + rng.IntN(400)
	key := func() []byte { return []byte(fmt.Sprintf("k%05d", rng.IntN(keySpace))) }
	value := func() []byte {
		v := make([]byte, rng.IntN(200))
		for i := range v {
			v[i] = byte('a' + rng.IntN(26))
		}
		return v
	}
	// With versions dropped (maxVersions > 0, or a GC window) a historical
	// read (mayRefuse) is exact or refused as too old, never wrong; a read
	// of the newest data, at a pinned snapshot, or (GC window) at a
	// timestamp within gcTTL of the clock is exact. refused counts the
	// refusals.
	drops := opts.Retention.DropsVersions()
	refused, historical, inWindow := 0, 0, 0
	// pushesBefore counts the in-memory flushes begun by the region's
	// instances closed by a reopen.
	var pushesBefore uint64
	checkGet := func(what string, k []byte, ts uint64, mayRefuse bool) {
		got, ok, err := r.Get(k, ts)
		if mayRefuse && drops && errors.Is(err, ErrSnapshotTooOld) {
			refused++
			return
		}
		if err != nil {
			fail("%s Get(%s@%d): %v", what, k, ts, err)
		}
		want, wok := ref.get(string(k), ts)
		if ok != wok || !bytes.Equal(got, want) {
			fail("%s Get(%s@%d) = %q,%v; want %q,%v", what, k, ts, got, ok, want, wok)
		}
	}
	checkScan := func(what string, ts uint64, mayRefuse bool) {
		start := string(key())
		end := ""
		if rng.IntN(2) == 0 {
			end = string(key())
			if end < start {
				start, end = end, start
			}
		}
		limit := rng.IntN(30)
		var endB []byte
		if end != "" {
			endB = []byte(end)
		}
		scan, refScan := r.Scan, ref.scan
		if rng.IntN(2) == 0 {
			what += " (reverse)"
			scan, refScan = r.ScanReverse, ref.scanReverse
		}
		got, err := scan([]byte(start), endB, limit, ts)
		if mayRefuse && drops && errors.Is(err, ErrSnapshotTooOld) {
			refused++
			return
		}
		if err != nil {
			fail("%s Scan: %v", what, err)
		}
		want := refScan(start, end, limit, ts)
		if len(got) != len(want) {
			fail("%s Scan[%q,%q) limit %d @%d: %d rows, want %d", what, start, end, limit, ts, len(got), len(want))
		}
		for i := range got {
			if !bytes.Equal(got[i].Key, want[i].Key) || !bytes.Equal(got[i].Value, want[i].Value) {
				fail("%s Scan row %d = %q=%q, want %q=%q", what, i, got[i].Key, got[i].Value, want[i].Key, want[i].Value)
			}
		}
	}

	// checkWalk moves an iterator back and forth, turning anywhere: each
	// position is the model's neighbour of the one before.
	checkWalk := func(what string, ts uint64) {
		start, end := key(), key()
		if bytes.Compare(start, end) > 0 {
			start, end = end, start
		}
		want := ref.scan(string(start), string(end), 0, ts)
		it, err := r.NewIterator(start, end, ts)
		if err != nil {
			fail("%s NewIterator: %v", what, err)
		}
		defer it.Close()
		ok, i := it.First(), 0
		if rng.IntN(2) == 0 {
			ok, i = it.Last(), len(want)-1
		}
		for step := 0; step < 30; step++ {
			if err := it.Err(); err != nil {
				fail("%s step %d: %v", what, step, err)
			}
			if i < 0 || i >= len(want) {
				if ok {
					fail("%s [%s,%s) step %d: at %q, want the end", what, start, end, step, it.Key())
				}
				return
			}
			if !ok || !bytes.Equal(it.Key(), want[i].Key) || !bytes.Equal(it.Value(), want[i].Value) {
				fail("%s [%s,%s) step %d: at %q (valid %v), want %q", what, start, end, step, it.Key(), ok, want[i].Key)
			}
			if rng.IntN(2) == 0 {
				ok, i = it.Next(), i+1
			} else {
				ok, i = it.Prev(), i-1
			}
		}
	}

	for i := 0; i < ops; i++ {
		if err := r.checkInvariants(); err != nil {
			fail("before op %d: %v", i, err)
		}
		now.Add(rng.Int64N(int64(4 * time.Millisecond)))
		if cfg.gcTTL > 0 {
			// The GC window: never refused from now − gcTTL on.
			if ef, min := r.ExactFrom(), uint64(now.Load()-int64(cfg.gcTTL)); ef > min {
				fail("op %d: exactFrom %d is above now − gcTTL %d: a read within the window would be refused", i, ef, min)
			}
		}
		switch p := rng.IntN(100); {
		case p < 30:
			k, v := key(), value()
			ts, err := r.Put(k, v)
			if err != nil {
				fail("op %d Put: %v", i, err)
			}
			ref.apply(ts, new(Batch).Put(k, v))
			stamps = append(stamps, ts)
		case p < 38:
			k := key()
			ts, err := r.Delete(k)
			if err != nil {
				fail("op %d Delete: %v", i, err)
			}
			ref.apply(ts, new(Batch).Delete(k))
			stamps = append(stamps, ts)
		case p < 46:
			b := new(Batch)
			for j := 0; j < 1+rng.IntN(8); j++ {
				if rng.IntN(4) == 0 {
					b.Delete(key())
				} else {
					b.Put(key(), value())
				}
			}
			ts, err := r.Apply(b)
			if err != nil {
				fail("op %d Batch: %v", i, err)
			}
			ref.apply(ts, b)
			stamps = append(stamps, ts)
		case p < 66:
			checkGet(fmt.Sprintf("op %d", i), key(), kv.MaxTimestamp, false)
		case p < 74:
			checkScan(fmt.Sprintf("op %d", i), kv.MaxTimestamp, false)
			if rng.IntN(3) == 0 {
				checkWalk(fmt.Sprintf("op %d walk", i), kv.MaxTimestamp)
			}
		case p < 80:
			// Historical reads: exact, or (versions dropped) refused.
			if len(stamps) > 0 {
				from := stamps
				if drops && len(stamps) > 3 && rng.IntN(2) == 0 {
					// Recent ones too: most older reads are refused.
					from = stamps[len(stamps)-3:]
				}
				ts := from[rng.IntN(len(from))] - uint64(rng.IntN(2))
				// Within the GC window a read must be exact: every
				// version it needs was kept.
				mayRefuse := cfg.gcTTL == 0 || int64(ts) < now.Load()-int64(cfg.gcTTL)
				if !mayRefuse {
					inWindow += 2
				}
				checkGet(fmt.Sprintf("op %d (at ts)", i), key(), ts, mayRefuse)
				checkScan(fmt.Sprintf("op %d (at ts)", i), ts, mayRefuse)
				historical += 2
			}
		case p < 84:
			if len(snaps) < 4 {
				s, err := r.Snapshot()
				if err != nil {
					fail("op %d Snapshot: %v", i, err)
				}
				snaps = append(snaps, snap{s: s, ref: s.TS()})
			} else {
				j := rng.IntN(len(snaps))
				snaps[j].s.Close()
				snaps = slices.Delete(snaps, j, j+1)
			}
		case p < 90:
			if len(snaps) > 0 {
				s := snaps[rng.IntN(len(snaps))]
				checkGet(fmt.Sprintf("op %d (snapshot)", i), key(), s.ref, false)
				checkScan(fmt.Sprintf("op %d (snapshot)", i), s.ref, false)
				checkWalk(fmt.Sprintf("op %d (snapshot) walk", i), s.ref)
			}
		case p < 94:
			if err := r.Flush(ctx); err != nil {
				fail("op %d Flush: %v", i, err)
			}
		case p < 97:
			if _, err := r.Compact(ctx, rng.IntN(2) == 0); err != nil {
				fail("op %d Compact: %v", i, err)
			}
		default:
			// Reopen: snapshots do not survive it.
			for _, s := range snaps {
				s.s.Close()
			}
			snaps = nil
			pushesBefore += r.MemstoreStats().Pushes.Load()
			if err := r.Close(); err != nil {
				fail("op %d Close: %v", i, err)
			}
			if r, err = Open(ctx, opts); err != nil {
				fail("op %d reopen: %v", i, err)
			}
		}
	}
	// Final full check after a major compaction.
	for _, s := range snaps {
		s.s.Close()
	}
	if _, err := r.Compact(ctx, true); err != nil {
		fail("final major compaction: %v", err)
	}
	if err := r.checkInvariants(); err != nil {
		fail("after the final major compaction: %v", err)
	}
	for k := 0; k < keySpace; k++ {
		checkGet("final", []byte(fmt.Sprintf("k%05d", k)), kv.MaxTimestamp, false)
	}
	got, err := r.Scan(nil, nil, 0, kv.MaxTimestamp)
	if err != nil {
		fail("final scan: %v", err)
	}
	if want := ref.scan("", "", 0, kv.MaxTimestamp); len(got) != len(want) {
		fail("final scan: %d rows, want %d", len(got), len(want))
	}
	// Reverse is forward reversed.
	back, err := r.ScanReverse(nil, nil, 0, kv.MaxTimestamp)
	if err != nil {
		fail("final reverse scan: %v", err)
	}
	slices.Reverse(back)
	if !slices.EqualFunc(back, got, func(a, b KV) bool { return bytes.Equal(a.Key, b.Key) && bytes.Equal(a.Value, b.Value) }) {
		fail("final reverse scan: %d rows, not the forward scan's %d reversed", len(back), len(got))
	}
	// The in-memory machinery ran: pushes happen in the write path; what
	// follows them is asynchronous, and a disk flush may overtake it.
	st := r.MemstoreStats()
	if cfg.memstore != memstore.None && pushesBefore+st.Pushes.Load() == 0 {
		fail("policy %s: no in-memory flush began in %d ops", cfg.memstore, ops)
	}
	t.Logf("policy %s, retention %+v: pushes %d, in-memory flushes %d, merges %d, compactions %d, versions dropped %d, aborted %d; historical reads %d (within the GC window %d), refused as too old %d",
		cfg.memstore, opts.Retention, st.Pushes.Load(), st.InMemoryFlushes.Load(), st.Merges.Load(), st.Compactions.Load(), st.VersionsDropped.Load(), st.Aborted.Load(), historical, inWindow, refused)
	if cfg.gcTTL > 0 && (inWindow == 0 || refused == 0) {
		fail("GC window: %d historical reads within it, %d refused below it: the run did not exercise both sides", inWindow, refused)
	}
}
