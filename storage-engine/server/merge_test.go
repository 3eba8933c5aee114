package server

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	kvpb "github.com/bellows-kv/bellows/proto/bellows/kv/v1"
	"github.com/bellows-kv/bellows/storage-engine/blockcache"
	"github.com/bellows-kv/bellows/storage-engine/regionmap"
)

// splitOnce splits the store's one region and writes more to both halves:
// the daughters region-001 and region-002, whose files interleave in time
// and still reference the parent's.
func splitOnce(t *testing.T, s *Store, kv *KV, acked map[string]string) SplitResult {
	t.Helper()
	res, err := s.Split(context.Background(), "region-000")
	if err != nil {
		t.Fatal(err)
	}
	for round := range 2 {
		for k, v := range putKeys(t, kv, round*500, 1000, fmt.Sprint("r", round)) {
			acked[k] = v
		}
		for _, a := range s.Assignments() {
			if e, err := a.Engine(); err == nil {
				if err := e.Flush(context.Background()); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	return res
}

// mapRegions are the names of the regions of the bucket's newest map.
func mapRegions(t *testing.T, c *mapCluster) string {
	t.Helper()
	m, err := regionmap.Load(context.Background(), c.bucket)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, r := range m.Region {
		out = append(out, r.Name)
	}
	return fmt.Sprint(out)
}

// A split's daughters merge back into one region that serves every
// acknowledged write and new writes across the old boundary; the map names
// it alone; a keyed write applied before the merge is not applied again
// when retried after it; the merge is counted; after a restart the merged
// region reopens from its own manifest and the parents' WAL directories are
// gone.
func TestStoreMergesTwoRegionsAndServesBoth(t *testing.T) {
	ctx := context.Background()
	c := newMapCluster(t)
	s := c.open(t, 0)
	reg := prometheus.NewRegistry()
	RegisterStoreGauges(reg, s, blockcache.New(1<<20))
	kv := NewKV(s, nil, nil)
	acked := putKeys(t, kv, 0, 1000, "a")
	sp := splitOnce(t, s, kv, acked)
	keyedPut := &kvpb.PutRequest{Key: []byte("user000001"), Value: []byte("keyed")}
	first, err := kv.Put(keyed(ctx, "put-before-merge"), keyedPut)
	if err != nil {
		t.Fatal(err)
	}
	acked["user000001"] = "keyed"
	res, err := s.Merge(ctx, sp.Left, sp.Right)
	if err != nil {
		t.Fatal(err)
	}
	if res.Merged != "region-003" || res.Epoch != 3 {
		t.Fatalf("merge: %+v, want region-003 at epoch 3", res)
	}
	if got := fmt.Sprint(regionNames(s)); got != "[region-003]" {
		t.Fatalf("the store serves %s after the merge", got)
	}
	if got := mapRegions(t, c); got != "[region-003]" {
		t.Fatalf("the bucket's map names %s", got)
	}
	checkKeys(t, kv, acked)
	checkReverse(t, kv, acked)
	again, err := kv.Put(keyed(ctx, "put-before-merge"), keyedPut)
	if err != nil || again.CommitTs != first.CommitTs {
		t.Fatalf("a keyed write retried after the merge: %v %v, want the first answer at %d", again, err, first.CommitTs)
	}
	for k, v := range putKeys(t, kv, 2990, 20, "b") {
		acked[k] = v
	}
	checkKeys(t, kv, acked)
	if s.Merges() != 1 {
		t.Fatalf("Merges() = %d, want 1", s.Merges())
	}
	if got := series(t, reg, "bellows_region_merges_total")[""].GetCounter().GetValue(); got != 1 {
		t.Fatalf("bellows_region_merges_total = %v, want 1", got)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = c.open(t, 0)
	kv = NewKV(s, nil, nil)
	checkKeys(t, kv, acked)
	for _, name := range []string{sp.Left, sp.Right} {
		if _, err := os.Stat(filepath.Join(c.dir, "wal", name)); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("the retired parent %s's WAL directory is still there: %v", name, err)
		}
	}
	// Its next compaction unifies the two parents' files into its own.
	e := engine(t, s)
	if info, err := e.Compact(ctx, false); err != nil || info == nil || !info.Major {
		t.Fatalf("the merged region's first compaction: %+v %v, want a major one", info, err)
	}
	checkKeys(t, kv, acked)
}

// The initial regions (created whole, their manifests with no range) merge
// too.
func TestStoreMergesInitialRegions(t *testing.T) {
	ctx := context.Background()
	c := newMapCluster(t)
	c.splitKeys = []string{"user000500"}
	s := c.open(t, 0)
	kv := NewKV(s, nil, nil)
	acked := putKeys(t, kv, 0, 1000, "a")
	res, err := s.Merge(ctx, "region-000", "region-001")
	if err != nil {
		t.Fatal(err)
	}
	if res.Merged != "region-002" {
		t.Fatalf("merge: %+v", res)
	}
	checkKeys(t, kv, acked)
	for k, v := range putKeys(t, kv, 490, 20, "b") {
		acked[k] = v
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	checkKeys(t, NewKV(c.open(t, 0), nil, nil), acked)
}

// A merge of regions that are not adjacent, not both in the map, not both
// served here, or on a store without a map is refused, naming the regions
// and why; nothing changes.
func TestStoreMergeRefusals(t *testing.T) {
	ctx := context.Background()
	c := newMapCluster(t)
	c.splitKeys = []string{"g", "p"}
	s := c.open(t, 0)
	for _, bad := range []struct {
		left, right string
		want        []string
	}{
		{"region-000", "region-002", []string{"region-000", "region-002", "not adjacent"}},
		{"region-001", "region-000", []string{"region-001", "region-000", "not adjacent"}},
		{"region-000", "region-009", []string{"region-009", "not in the region map"}},
	} {
		_, err := s.Merge(ctx, bad.left, bad.right)
		for _, w := range bad.want {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("Merge(%s, %s): %v, want an error saying %q", bad.left, bad.right, err, w)
			}
		}
	}
	// Released (a store that closed without releasing would still hold
	// region-000's WAL and open it again to hand it over: heldHere).
	if err := s.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// A store serving only the last two regions of the map.
	m, err := regionmap.Load(ctx, c.bucket)
	if err != nil {
		t.Fatal(err)
	}
	o := s.opts
	part, err := OpenStore(ctx, SpansOf(m)[1:], o)
	if err != nil {
		t.Fatal(err)
	}
	defer part.Close()
	if _, err := part.Merge(ctx, "region-000", "region-001"); err == nil || !strings.Contains(err.Error(), "region-000 is not served by this store") {
		t.Fatalf("merging a region served elsewhere: %v", err)
	}
	if got := mapRegions(t, c); got != "[region-000 region-001 region-002]" {
		t.Fatalf("a refused merge changed the map: %s", got)
	}
	if err := part.Close(); err != nil {
		t.Fatal(err)
	}
	o.Map = nil
	fixed, err := OpenStore(ctx, SpansOf(m), o)
	if err != nil {
		t.Fatal(err)
	}
	defer fixed.Close()
	if _, err := fixed.Merge(ctx, "region-000", "region-001"); !errors.Is(err, ErrNoRegionMap) {
		t.Fatalf("merging on a store with fixed regions: %v, want ErrNoRegionMap", err)
	}
}

// A crash between any two persistent steps of a merge loses no
// acknowledged write and leaves the map naming either both parents or the
// merged region, never both: before the map commit both parents reopen
// (and take writes); after it the merged region derives from their final
// manifests, and a keyed write retried then is not applied again.
func TestStoreMergeCrashesLoseNothing(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		step string
		want string
	}{
		{"prepared region-001", "[region-001 region-002]"},
		{"prepared region-002", "[region-001 region-002]"},
		{"saved applied requests", "[region-001 region-002]"},
		{"committed the map", "[region-003]"},
		{"opened the merged region", "[region-003]"},
		{"retired region-001", "[region-003]"},
	} {
		t.Run(c.step, func(t *testing.T) {
			mc := newMapCluster(t)
			s := mc.open(t, 0)
			kv := NewKV(s, nil, nil)
			acked := putKeys(t, kv, 0, 1000, "a")
			splitOnce(t, s, kv, acked)
			keyedPut := &kvpb.PutRequest{Key: []byte("user000999"), Value: []byte("keyed")}
			first, err := kv.Put(keyed(ctx, "put-before-merge"), keyedPut)
			if err != nil {
				t.Fatal(err)
			}
			acked["user000999"] = "keyed"
			crashed := false
			s.mergeCrash = func(step string) bool {
				crashed = crashed || step == c.step
				return step == c.step
			}
			if _, err := s.Merge(ctx, "region-001", "region-002"); !errors.Is(err, errMergeCrashed) || !crashed {
				t.Fatalf("the merge did not reach step %q: %v", c.step, err)
			}
			if err := s.Close(); err != nil { // the crash
				t.Fatal(err)
			}
			if got := mapRegions(t, mc); got != c.want {
				t.Fatalf("after a crash at %q the map names %s, want %s", c.step, got, c.want)
			}
			s = mc.open(t, 0)
			if got := fmt.Sprint(regionNames(s)); got != c.want {
				t.Fatalf("after the restart the store serves %s, want %s", got, c.want)
			}
			kv = NewKV(s, nil, nil)
			checkKeys(t, kv, acked)
			again, err := kv.Put(keyed(ctx, "put-before-merge"), keyedPut)
			if err != nil || again.CommitTs != first.CommitTs {
				t.Fatalf("a keyed write retried after the crash: %v %v, want the first answer at %d", again, err, first.CommitTs)
			}
			for k, v := range putKeys(t, kv, 495, 10, "after") {
				acked[k] = v
			}
			checkKeys(t, kv, acked)
			if c.want != "[region-003]" {
				// The undone merge can be done again.
				if _, err := s.Merge(ctx, "region-001", "region-002"); err != nil {
					t.Fatal(err)
				}
				checkKeys(t, kv, acked)
			}
		})
	}
}
