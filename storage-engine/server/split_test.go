package server

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/bellows-kv/bellows/internal/contract"
	kvpb "github.com/bellows-kv/bellows/proto/bellows/kv/v1"
	"github.com/bellows-kv/bellows/storage-engine/blob"
	"github.com/bellows-kv/bellows/storage-engine/blockcache"
	"github.com/bellows-kv/bellows/storage-engine/manifest"
	"github.com/bellows-kv/bellows/storage-engine/region"
	"github.com/bellows-kv/bellows/storage-engine/regionmap"
	"github.com/bellows-kv/bellows/storage-engine/sstable"
	"github.com/bellows-kv/bellows/storage-engine/wal"
)

// mapCluster is a bucket whose region map starts with one region, and how
// to open a store over it (the same WAL root each time: a restart).
type mapCluster struct {
	dir    string
	bucket *blob.Bucket
	// splitKeys, if set, are the initial regions' bounds (--split-keys);
	// else the map starts with one region.
	splitKeys []string
	// mergeBytes and mergeAfter, if set, make the store merge by itself.
	mergeBytes int64
	mergeAfter time.Duration
	// only, if set, opens only the map's first only regions: the rest are
	// another store's.
	only int
	// pick, if set, opens only the regions of these names.
	pick []string
	// walRoot, if set, is the store's WAL root (another store's disk);
	// else dir/wal.
	walRoot string
}

func newMapCluster(t *testing.T) *mapCluster {
	t.Helper()
	dir := t.TempDir()
	b, err := blob.Open(context.Background(), "file://"+filepath.Join(dir, "bucket"))
	if err != nil {
		t.Fatal(err)
	}
	return &mapCluster{dir: dir, bucket: b}
}

func (c *mapCluster) open(t *testing.T, splitBytes int64) *Store {
	t.Helper()
	ctx := context.Background()
	one, _ := SplitEvenly(1)
	if c.splitKeys != nil {
		one, _ = SplitAt(c.splitKeys)
	}
	initial, err := InitialMap(one)
	if err != nil {
		t.Fatal(err)
	}
	m, err := regionmap.Bootstrap(ctx, c.bucket, initial)
	if err != nil {
		t.Fatal(err)
	}
	spans := SpansOf(m)
	if c.only > 0 {
		spans = spans[:c.only]
	}
	if c.pick != nil {
		spans = slices.DeleteFunc(spans, func(sp Span) bool { return !slices.Contains(c.pick, sp.Name) })
	}
	walRoot := c.walRoot
	if walRoot == "" {
		walRoot = filepath.Join(c.dir, "wal")
	}
	s, err := OpenStore(ctx, spans, StoreOptions{
		WALRoot: walRoot,
		Region: region.Options{Bucket: c.bucket, DisableAutoCompaction: true, MemstoreBytes: 1 << 20,
			WALMode: wal.ModeAsync, WALSyncInterval: time.Millisecond,
			SST: sstable.WriterOptions{BlockSize: 1 << 10}},
		Map: &m, SplitBytes: splitBytes, SplitCheckInterval: 5 * time.Millisecond, MapPollInterval: 5 * time.Millisecond,
		MergeBytes: c.mergeBytes, MergeAfter: c.mergeAfter,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func putKeys(t *testing.T, kv *KV, from, n int, val string) map[string]string {
	t.Helper()
	acked := map[string]string{}
	for i := from; i < from+n; i++ {
		k, v := fmt.Sprintf("user%06d", i), fmt.Sprintf("%s-%d-%0100d", val, i, i)
		if _, err := kv.Put(context.Background(), &kvpb.PutRequest{Key: []byte(k), Value: []byte(v)}); err != nil {
			t.Fatalf("put %s: %v", k, err)
		}
		acked[k] = v
	}
	return acked
}

func checkKeys(t *testing.T, kv *KV, acked map[string]string) {
	t.Helper()
	for k, v := range acked {
		res, err := kv.Get(context.Background(), &kvpb.GetRequest{Key: []byte(k)})
		if err != nil || !res.Found || string(res.Value) != v {
			t.Fatalf("get %s: %v %v, want %q", k, res, err, v)
		}
	}
}

func regionNames(s *Store) []string {
	var out []string
	for _, a := range s.Assignments() {
		out = append(out, a.Name())
	}
	return out
}

// A store splits its one region into two daughters that serve every
// acknowledged write and new writes to both halves; the map names them;
// after a restart they reopen from their own manifests and the parent's
// WAL directory is gone.
func TestStoreSplitsARegionAndServesBothHalves(t *testing.T) {
	ctx := context.Background()
	c := newMapCluster(t)
	s := c.open(t, 0)
	kv := NewKV(s, nil, nil)
	acked := putKeys(t, kv, 0, 2000, "a")
	parent, err := s.Assignments()[0].Engine()
	if err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	res, err := s.Split(ctx, "region-000")
	if err != nil {
		t.Fatal(err)
	}
	// The refusal counts from when the parent stopped writes (before its
	// final flush) to when the daughters served.
	stopped := parent.WritesStoppedAt()
	if stopped.Before(began) || res.Unavailable <= 0 || res.Unavailable > time.Since(stopped) {
		t.Fatalf("split: writes stopped at %v (split began %v), Unavailable %v: want the time from the stop to the daughters", stopped, began, res.Unavailable)
	}
	if res.Left != "region-001" || res.Right != "region-002" || res.Epoch != 2 {
		t.Fatalf("split: %+v, want region-001 and region-002 at epoch 2", res)
	}
	if got := regionNames(s); fmt.Sprint(got) != "[region-001 region-002]" {
		t.Fatalf("the store serves %v after the split", got)
	}
	checkKeys(t, kv, acked)
	for k, v := range putKeys(t, kv, 1990, 20, "b") { // across the split key
		acked[k] = v
	}
	checkKeys(t, kv, acked)
	checkReverse(t, kv, acked)
	m, err := regionmap.Load(ctx, c.bucket)
	if err != nil || m.Epoch != 2 || len(m.Region) != 2 {
		t.Fatalf("the bucket's map: epoch %d with %d regions, %v", m.Epoch, len(m.Region), err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = c.open(t, 0)
	checkKeys(t, NewKV(s, nil, nil), acked)
	if _, err := os.Stat(filepath.Join(c.dir, "wal", "region-000")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the retired parent's WAL directory is still there: %v", err)
	}
}

// A crash between any two steps of a split loses no acknowledged write:
// before the map commit the parent reopens whole (and writable); after it
// the daughters derive from the parent's final manifest.
func TestStoreSplitCrashesLoseNothing(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		name      string
		commitMap bool
		want      string
	}{
		{"after the final flush, before the map commit", false, "[region-000]"},
		{"after the map commit, before the daughters opened", true, "[region-001 region-002]"},
	} {
		t.Run(c.name, func(t *testing.T) {
			mc := newMapCluster(t)
			s := mc.open(t, 0)
			kv := NewKV(s, nil, nil)
			acked := putKeys(t, kv, 0, 1000, "a")
			e := engine(t, s)
			if err := e.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			key, err := e.SplitKey()
			if err != nil {
				t.Fatal(err)
			}
			final, err := e.PrepareSplit(ctx)
			if err != nil {
				t.Fatal(err)
			}
			// Writes meanwhile are refused, retryably, saying why.
			_, err = kv.Put(ctx, &kvpb.PutRequest{Key: []byte("user000001"), Value: []byte("x")})
			if status.Code(err) != codes.Unavailable || errorReason(err) != contract.RegionSplittingReason {
				t.Fatalf("a write during the split: %v, want UNAVAILABLE with reason %s", err, contract.RegionSplittingReason)
			}
			if c.commitMap {
				m, _ := s.RegionMap()
				next, err := m.Split("region-000", key, final.Number)
				if err != nil {
					t.Fatal(err)
				}
				if err := regionmap.Commit(ctx, mc.bucket, m, &next); err != nil {
					t.Fatal(err)
				}
			}
			if err := s.Close(); err != nil { // the crash
				t.Fatal(err)
			}
			s = mc.open(t, 0)
			if got := fmt.Sprint(regionNames(s)); got != c.want {
				t.Fatalf("after the restart the store serves %s, want %s", got, c.want)
			}
			kv = NewKV(s, nil, nil)
			checkKeys(t, kv, acked)
			for k, v := range putKeys(t, kv, 0, 10, "after") {
				acked[k] = v
			}
			checkKeys(t, kv, acked)
		})
	}
}

// With a split size, a store splits its regions by itself as data grows,
// and every write acknowledged meanwhile (writers never stop) reads back.
func TestStoreSplitsByItselfAsDataGrows(t *testing.T) {
	c := newMapCluster(t)
	s := c.open(t, 256<<10)
	kv := NewKV(s, nil, nil)
	acked := map[string]string{}
	for round := 0; len(s.Assignments()) < 4; round++ {
		// 2000 rounds are 40 MB, 160 times the split size: a machine
		// however loaded has split by then unless splitting is broken.
		if round > 2000 {
			t.Fatalf("still %d regions after %d rounds of writes (%d splits)", len(s.Assignments()), round, s.Splits())
		}
		for k, v := range putRetrying(t, kv, round*200, 200, "r") {
			acked[k] = v
		}
		for _, a := range s.Assignments() {
			if e, err := a.Engine(); err == nil {
				_ = e.Flush(context.Background())
			}
		}
	}
	// Splits go on while this reads: a read that meets one is refused
	// UNAVAILABLE and retried, as a client does.
	for k, v := range acked {
		var res *kvpb.GetResponse
		waitUntil(t, "a read of "+k, func() bool {
			var err error
			res, err = kv.Get(context.Background(), &kvpb.GetRequest{Key: []byte(k)})
			if err != nil && !staleRoute(err) {
				t.Fatalf("get %s: %v", k, err)
			}
			return err == nil
		})
		if !res.Found || string(res.Value) != v {
			t.Fatalf("get %s: %v, want %q", k, res, v)
		}
	}
	// The map and the assignment agree between splits.
	waitUntil(t, "the store to serve every region of the map", func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		m, _ := s.RegionMap()
		return len(m.Region) == len(s.Assignments())
	})
}

// putRetrying puts keys as a client does: a write refused while its region
// splits (UNAVAILABLE) is retried.
func putRetrying(t *testing.T, kv *KV, from, n int, val string) map[string]string {
	t.Helper()
	acked := map[string]string{}
	for i := from; i < from+n; i++ {
		k, v := fmt.Sprintf("user%06d", i), fmt.Sprintf("%s-%d-%0100d", val, i, i)
		deadline := time.Now().Add(10 * time.Second)
		for {
			_, err := kv.Put(context.Background(), &kvpb.PutRequest{Key: []byte(k), Value: []byte(v)})
			if err == nil {
				break
			}
			if !staleRoute(err) || time.Now().After(deadline) {
				t.Fatalf("put %s: %v", k, err)
			}
			time.Sleep(time.Millisecond) // a client's retry back-off
		}
		acked[k] = v
	}
	return acked
}

// The per-region series follow a split: the parent's end, the daughters'
// appear with their bytes and requests, and the split and the map are
// counted.
func TestRegionMetricsFollowASplit(t *testing.T) {
	ctx := context.Background()
	c := newMapCluster(t)
	s := c.open(t, 0)
	reg := prometheus.NewRegistry()
	RegisterStoreGauges(reg, s, blockcache.New(1<<20))
	kv := NewKV(s, nil, nil)
	putKeys(t, kv, 0, 1000, "v")
	if got := series(t, reg, "bellows_region_bytes"); len(got) != 1 || got["region=region-000,"] == nil {
		t.Fatalf("before the split: %v", got)
	}
	if _, err := s.Split(ctx, "region-000"); err != nil {
		t.Fatal(err)
	}
	checkKeys(t, kv, map[string]string{"user000001": fmt.Sprintf("v-1-%0100d", 1)})
	bytes := series(t, reg, "bellows_region_bytes")
	if len(bytes) != 2 || bytes["region=region-001,"].GetGauge().GetValue() <= 0 || bytes["region=region-002,"].GetGauge().GetValue() <= 0 {
		t.Fatalf("after the split, region bytes: %v", bytes)
	}
	if got := series(t, reg, "bellows_region_requests_total")["region=region-001,"].GetCounter().GetValue(); got != 1 {
		t.Fatalf("the left daughter served %v requests, want the one get", got)
	}
	if got := series(t, reg, "bellows_region_splits_total")["reason=size,"].GetCounter().GetValue(); got != 1 {
		t.Fatalf("splits by size: %v, want 1", got)
	}
	if got := series(t, reg, contract.MetricClusterRegions)[""].GetGauge().GetValue(); got != 2 {
		t.Fatalf("cluster regions: %v, want 2", got)
	}
	if got := series(t, reg, "bellows_region_map_epoch")[""].GetGauge().GetValue(); got != 2 {
		t.Fatalf("map epoch: %v, want 2", got)
	}
}

// errorReason is the ErrorInfo reason a status error carries, if any.
func errorReason(err error) string {
	for _, d := range status.Convert(err).Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			return info.Reason
		}
	}
	return ""
}

// A split's parent keeps its files while a daughter references them, and
// loses them once both daughters compacted their references away; a
// daughter not derived yet (a crash right after the map commit) holds the
// janitor back.
func TestRetiredParentsFilesAreCollectedOnceUnreferenced(t *testing.T) {
	ctx := context.Background()
	c := newMapCluster(t)
	s := c.open(t, 0)
	kv := NewKV(s, nil, nil)
	acked := putKeys(t, kv, 0, 1000, "v")
	parentFiles := func() int {
		objs, err := c.bucket.List(ctx, region.BucketPrefix("region-000"))
		if err != nil {
			t.Fatal(err)
		}
		return len(objs)
	}
	res, err := s.Split(ctx, "region-000")
	if err != nil {
		t.Fatal(err)
	}
	before := parentFiles()
	if got, err := s.CollectRetired(ctx); err != nil || len(got) != 0 || parentFiles() != before {
		t.Fatalf("the janitor took %v (%v) while both daughters reference the parent", got, err)
	}
	compact := func(name string) {
		a := s.ByName(name)
		e, err := a.Engine()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.Compact(ctx, true); err != nil {
			t.Fatal(err)
		}
	}
	compact(res.Left)
	if got, _ := s.CollectRetired(ctx); len(got) != 0 {
		t.Fatalf("the janitor took %v while the right daughter references the parent", got)
	}
	compact(res.Right)
	got, err := s.CollectRetired(ctx)
	if err != nil || len(got) != 1 || got[0] != "region-000" || parentFiles() != 0 {
		t.Fatalf("after both daughters compacted: collected %v (%v), %d objects left", got, err, parentFiles())
	}
	checkKeys(t, kv, acked)

	// A daughter yet to derive: nothing is collected.
	e, err := s.ByName(res.Left).Engine()
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	key, err := e.SplitKey()
	if err != nil {
		t.Fatal(err)
	}
	final, err := e.PrepareSplit(ctx)
	if err != nil {
		t.Fatal(err)
	}
	m, _ := s.RegionMap()
	next, err := m.Split(res.Left, key, final.Number)
	if err != nil {
		t.Fatal(err)
	}
	if err := regionmap.Commit(ctx, c.bucket, m, &next); err != nil {
		t.Fatal(err)
	}
	s.learnMap(next)
	if got, err := s.CollectRetired(ctx); err != nil || len(got) != 0 {
		t.Fatalf("the janitor took %v (%v) while a daughter has not derived its manifest", got, err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	checkKeys(t, NewKV(c.open(t, 0), nil, nil), acked)
}

// An admin request naming a region of the map that another store serves is
// OUT_OF_RANGE, which clients answer by looking the region up again (a
// balancer move made Compact fail with NOT_FOUND in e2e scenario 3); a name
// the map does not hold is NOT_FOUND, and says so.
func TestAdminRequestsForRegionsServedElsewhereAreRetryable(t *testing.T) {
	ctx := context.Background()
	c := newMapCluster(t)
	c.splitKeys = []string{"m"}
	c.only = 1
	s := c.open(t, 0)
	m, _ := s.RegionMap()
	elsewhere := m.Region[1].Name
	kv := NewKV(s, nil, nil)
	_, err := kv.Compact(ctx, &kvpb.CompactRequest{Region: elsewhere})
	if status.Code(err) != codes.OutOfRange || !strings.Contains(err.Error(), "served by another store") {
		t.Fatalf("compact of %s, in the map and served by another store: %v, want OUT_OF_RANGE naming another store", elsewhere, err)
	}
	_, err = kv.Flush(ctx, &kvpb.FlushRequest{Region: "region-999"})
	if status.Code(err) != codes.NotFound || !strings.Contains(err.Error(), "no region \"region-999\" in the cluster's region map") {
		t.Fatalf("flush of a region the map does not hold: %v, want NOT_FOUND saying so", err)
	}
}

// A region whose split did not commit is reopened here at once, so that
// giving it up right after (the split was abandoned because the balancer
// moved the region, and the Assigner drops it) releases it: its manifest
// says released and the next owner can claim it. Reopened by a background
// claim, the drop stopped the claim before it opened, nothing was
// released, and the next owner waited forever (e2e scenario 13).
func TestARegionGivenUpRightAfterAnAbandonedSplitIsReleased(t *testing.T) {
	ctx := context.Background()
	c := newMapCluster(t)
	s := c.open(t, 0)
	kv := NewKV(s, nil, nil)
	acked := putKeys(t, kv, 0, 200, "a")
	a := s.Assignments()[0]
	e, err := a.Engine()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.PrepareSplit(ctx); err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	s.reclaimLocked(a, e)
	s.mu.Unlock()
	// Open when reclaimLocked returns: a claim still under way when the
	// Assigner drops the region ends with nothing to release (against
	// S3, whose requests end with the claim's context).
	if _, err := s.Assignments()[0].Engine(); err != nil {
		t.Fatalf("the region is not open once reclaimed: %v", err)
	}
	if _, released, err := s.Reassign(ctx, nil); err != nil || len(released) != 1 {
		t.Fatalf("giving the region up: released %v, %v", released, err)
	}
	m, err := manifest.Load(ctx, c.bucket.Prefixed(region.BucketPrefix(a.Name())))
	if err != nil {
		t.Fatal(err)
	}
	if !m.Released {
		t.Fatalf("the region given up after its abandoned split: manifest %d not released (owner %q): its next owner would wait forever", m.Number, m.Owner)
	}
	// The next owner claims it with every acknowledged write.
	_ = s.Close()
	next := c.open(t, 0)
	checkKeys(t, NewKV(next, nil, nil), acked)
}

// A keyed write retried after its region split is answered with its first
// commit timestamp by the daughter holding its key, not applied again: the
// daughters inherit the parent's idempotency keys.
func TestAKeyedWriteRetriedAcrossASplitIsNotAppliedAgain(t *testing.T) {
	ctx := context.Background()
	c := newMapCluster(t)
	s := c.open(t, 0)
	kv := NewKV(s, nil, nil)
	putKeys(t, kv, 0, 400, "a")
	var firsts []*kvpb.PutResponse
	reqs := []*kvpb.PutRequest{{Key: []byte("user000010"), Value: []byte("low")}, {Key: []byte("user000390"), Value: []byte("high")}}
	for i, req := range reqs {
		p, err := kv.Put(keyed(ctx, fmt.Sprintf("key-%d", i)), req)
		if err != nil {
			t.Fatal(err)
		}
		firsts = append(firsts, p)
	}
	res, err := s.Split(ctx, s.Assignments()[0].Name())
	if err != nil {
		t.Fatal(err)
	}
	for i, req := range reqs {
		again, err := kv.Put(keyed(ctx, fmt.Sprintf("key-%d", i)), req)
		if err != nil {
			t.Fatal(err)
		}
		if again.CommitTs != firsts[i].CommitTs {
			t.Fatalf("%s retried after the split into %s and %s: ts %d in %s, want the first answer %d", req.Key, res.Left, res.Right, again.CommitTs, again.Region, firsts[i].CommitTs)
		}
	}
}
