package server

import (
	"testing"
	"time"

	"github.com/bellows-kv/bellows/storage-engine/regionmap"
)

// A new cluster's pre-split regions are small from the first reading. The
// balancer brings small neighbours onto one store only once they have
// stayed small for the merge wait: moving them at once undid the spread the
// user asked for and moved regions under the first clients (e2e scenario 3
// met "this store serves no region" that way). A reading that is not small
// restarts the wait.
func TestSmallNeighboursWaitTheMergeWaitBeforeMoving(t *testing.T) {
	m, err := regionmap.Initial([][]byte{[]byte("k1"), []byte("k2"), []byte("k3")})
	if err != nil {
		t.Fatal(err)
	}
	clock := time.Unix(1_000_000, 0)
	b := &Balancer{MergeBytes: 8 << 20, MergeAfter: 10 * time.Minute, MinBytes: 64 << 20, MinQPS: 1000,
		now: func() time.Time { return clock }}
	// Slots alternate over two stores; every region holds a little.
	rd := Readings{Load: map[string]regionmap.RegionLoad{}, OpenAt: map[string]int{}, Answered: map[int]bool{0: true, 1: true}}
	for _, r := range m.Region {
		rd.Load[r.Name] = regionmap.RegionLoad{Bytes: 1 << 20, QPS: 50}
		rd.OpenAt[r.Name] = r.OwnerOf(2)
	}
	if moves, _ := b.Plan(m, rd, 2); len(moves) != 0 {
		t.Fatalf("first reading of 4 small pre-split regions: plan %v, want none", moves)
	}
	clock = clock.Add(9 * time.Minute)
	if moves, _ := b.Plan(m, rd, 2); len(moves) != 0 {
		t.Fatalf("small for 9 of the 10 minutes' wait: plan %v, want none", moves)
	}
	// region-001 grows past the merge size and shrinks again: its wait
	// starts over.
	big := rd.Load[m.Region[1].Name]
	rd.Load[m.Region[1].Name] = regionmap.RegionLoad{Bytes: 9 << 20}
	if moves, _ := b.Plan(m, rd, 2); len(moves) != 0 {
		t.Fatalf("plan %v with region-001 over the merge size, want none", moves)
	}
	rd.Load[m.Region[1].Name] = big
	clock = clock.Add(time.Minute)
	moves, _ := b.Plan(m, rd, 2)
	if len(moves) != 1 {
		t.Fatalf("after the wait: plan %v, want one move (region-002 and region-003 together; region-001 waits again)", moves)
	}
	if mv := moves[0]; mv.Region != m.Region[2].Name && mv.Region != m.Region[3].Name {
		t.Fatalf("after the wait: plan %v, want region-002 or region-003 moved to the other's store", moves)
	}
}

// The stores from Serving up to Stores are leaving: the balancer's plan
// moves their regions off, to the stores that stay, although the cluster
// is balanced and under the floors.
func TestBalancerDrainsTheOrdinalsPastServing(t *testing.T) {
	m, err := regionmap.Initial([][]byte{[]byte("k1"), []byte("k2"), []byte("k3"), []byte("k4"), []byte("k5")})
	if err != nil {
		t.Fatal(err)
	}
	serving := 3
	b := &Balancer{MinBytes: 64 << 20, MinQPS: 1000, MaxMovesInFlight: 4, Serving: func() (int, bool) { return serving, true }}
	rd := Readings{Load: map[string]regionmap.RegionLoad{}, OpenAt: map[string]int{}, Answered: map[int]bool{}}
	for o := range 5 {
		rd.Answered[o] = true
	}
	for _, r := range m.Region {
		rd.Load[r.Name] = regionmap.RegionLoad{Bytes: 10 << 20}
		rd.OpenAt[r.Name] = r.OwnerOf(5)
	}
	moves, inFlight := b.Plan(m, rd, 5)
	if len(inFlight) != 0 {
		t.Fatalf("in flight %v, want none (every region open at its owner)", inFlight)
	}
	from := map[int]bool{}
	for _, mv := range moves {
		if mv.To >= 3 {
			t.Fatalf("plan %v moves a region to a leaving store", moves)
		}
		from[mv.From] = true
	}
	if len(moves) != 2 || !from[3] || !from[4] {
		t.Fatalf("plan %v, want the one region of store 3 and the one of store 4 moved off", moves)
	}
	serving = 5
	if moves, _ := b.Plan(m, rd, 5); len(moves) != 0 {
		t.Fatalf("nothing leaving, balanced: plan %v, want none", moves)
	}
}
