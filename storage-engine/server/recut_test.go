package server

import (
	"context"
	"math"
	"path/filepath"
	"testing"
	"time"

	kvpb "github.com/bellows-kv/bellows/proto/bellows/kv/v1"
	"github.com/bellows-kv/bellows/storage-engine/regionmap"
)

// ownReadings are the store's regions as the balancer reads them, all
// open at ordinal 0.
func ownReadings(s *Store) Readings {
	rd := Readings{Load: map[string]regionmap.RegionLoad{}, OpenAt: map[string]int{}, Answered: map[int]bool{0: true}}
	for _, a := range s.Assignments() {
		if e := a.eng.Load(); e != nil {
			rd.Load[a.Name()] = regionmap.RegionLoad{Bytes: e.DataBytes()}
			rd.OpenAt[a.Name()] = 0
		}
	}
	return rd
}

// The balancer's store re-cuts two uneven neighbours once their sizes, and
// the cluster's, held still for the merge wait, and not before (nor while
// another region grows): merged and split again at
// their byte median, both halves end within the tolerance of the mean,
// and every acknowledged write reads back. The halves, equal, are not
// re-cut again.
func TestBalancerRecutsUnevenNeighboursThatStoppedGrowing(t *testing.T) {
	ctx := context.Background()
	c := newMapCluster(t)
	c.splitKeys = []string{"user000200"} // 200 keys on the left, 800 on the right
	s := c.open(t, 0)
	kv := NewKV(s, nil, nil)
	acked := putKeys(t, kv, 0, 1000, "v")
	for _, a := range s.Assignments() {
		e, err := a.Engine()
		if err != nil {
			t.Fatal(err)
		}
		if err := e.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	clock := time.Unix(1_000_000, 0)
	b := &Balancer{KV: kv, Ordinal: 0, MergeBytes: 1, MergeAfter: time.Minute, RecutTolerance: 0.2,
		now: func() time.Time { return clock }}
	m, _ := s.RegionMap()
	rd := ownReadings(s)
	if ready := b.recutReady(rd); ready[m.Region[0].Name] || ready[m.Region[1].Name] {
		t.Fatalf("ready %v at the first reading, want neither", ready)
	}
	b.maybeRecut(ctx, m, rd)
	if b.recutting.Load() || s.Recuts() != 0 {
		t.Fatal("re-cut before the regions held still for the merge wait")
	}
	// A cluster still growing re-cuts nothing, however still the pair:
	// another region grew by a tenth meanwhile.
	grown := Readings{Load: map[string]regionmap.RegionLoad{}, OpenAt: rd.OpenAt, Answered: rd.Answered}
	for name, l := range rd.Load {
		grown.Load[name] = l
	}
	grown.Load["region-elsewhere"] = regionmap.RegionLoad{Bytes: (rd.Load[m.Region[0].Name].Bytes + rd.Load[m.Region[1].Name].Bytes) / 10}
	clock = clock.Add(time.Minute)
	if ready := b.recutReady(grown); ready[m.Region[0].Name] || ready[m.Region[1].Name] {
		t.Fatalf("ready %v while the cluster's data grew, want neither", ready)
	}
	b.maybeRecut(ctx, m, grown)
	if b.recutting.Load() || s.Recuts() != 0 {
		t.Fatal("re-cut while the cluster's data grew")
	}
	clock = clock.Add(time.Minute)
	b.recutReady(grown)
	b.maybeRecut(ctx, m, grown)
	waitUntil(t, "the re-cut", func() bool { return s.Recuts() == 1 && !b.recutting.Load() })
	if s.Merges() != 1 || s.Splits() != 1 {
		t.Fatalf("%d merges and %d splits, want one of each", s.Merges(), s.Splits())
	}
	after := ownReadings(s)
	if len(after.Load) != 2 {
		t.Fatalf("%d regions after the re-cut, want 2", len(after.Load))
	}
	m, _ = s.RegionMap()
	mean := float64(regionmap.MeanRegionBytes(m, after.Load))
	for name, l := range after.Load {
		if d := math.Abs(float64(l.Bytes)-mean) / mean; d > 0.2 {
			t.Errorf("%s holds %d bytes, %.0f%% off the mean %.0f", name, l.Bytes, 100*d, mean)
		}
	}
	checkKeys(t, kv, acked)
	// Even, the halves are no candidate, however long they hold still.
	if l, r, ok := recutCandidate(m, after, map[string]bool{m.Region[0].Name: true, m.Region[1].Name: true}, 0, 0.2, 1); ok {
		t.Fatalf("the re-cut's halves are a candidate again: %s, %s", l, r)
	}
}

// A store killed after the balancer committed a move of one of its regions
// and before it released it (found by the elastic model test): restarted,
// the region is no longer assigned to it, but its WAL still holds the
// region. The store opens it anyway, replaying the WAL, so that the
// assignment's next step releases it; the new owner then claims it with
// every acknowledged write. Before, nobody opened it and the new owner
// waited for its release forever.
func TestAStoreKilledMidMoveReleasesTheRegionAfterItsRestart(t *testing.T) {
	ctx := context.Background()
	c := newMapCluster(t)
	c.splitKeys = []string{"user000500"}
	a := c.open(t, 0)
	acked := putKeys(t, NewKV(a, nil, nil), 0, 1000, "v") // in the WALs only: no flush
	if err := a.Close(); err != nil {                     // the kill
		t.Fatal(err)
	}
	m, err := regionmap.Load(ctx, c.bucket)
	if err != nil {
		t.Fatal(err)
	}
	moved := m.Region[1].Name
	next, err := m.Moved([]regionmap.Move{{Region: moved, From: 0, To: 1}})
	if err != nil {
		t.Fatal(err)
	}
	if err := regionmap.Commit(ctx, c.bucket, m, &next); err != nil {
		t.Fatal(err)
	}
	// Restarted with only what the map assigns it now.
	c.pick = []string{m.Region[0].Name}
	a = c.open(t, 0)
	if got := regionNames(a); len(got) != 2 {
		t.Fatalf("after the restart the store opened %v, want both: %s still holds its WAL", got, moved)
	}
	// The Assigner's step: back to the target, releasing the moved region.
	if _, _, err := a.Reassign(ctx, SpansOf(next)[:1]); err != nil {
		t.Fatal(err)
	}
	c.pick, c.walRoot = []string{moved}, filepath.Join(c.dir, "wal-b")
	b := c.open(t, 0)
	if _, err := b.Assignments()[0].Engine(); err != nil {
		t.Fatalf("the new owner could not claim %s: %v", moved, err)
	}
	kvB := NewKV(b, nil, nil)
	for k, v := range acked {
		if k < "user000500" {
			continue
		}
		res, err := kvB.Get(ctx, &kvpb.GetRequest{Key: []byte(k)})
		if err != nil || string(res.GetValue()) != v {
			t.Fatalf("%s at the new owner: %q, %v; want the acknowledged %q", k, res.GetValue(), err, v)
		}
	}
}
