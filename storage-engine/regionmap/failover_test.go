package regionmap

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

func ownerPtr(o int) *int { return &o }

// Random maps of 1–200 regions over 2–20 stores, one or two of them dead,
// some leaving; regions placed by the balancer (Owner), by their slot
// (no Owner), and placed on a store that has since gone (Owner ≥ stores:
// the slot fallback). After Failover:
//   - the map is valid and the input map is unchanged;
//   - no region is served by a dead store;
//   - the moves are exactly the regions a dead store served, each from
//     that store to a live, staying one, and each moved region has an
//     explicit Owner;
//   - every region no dead store served keeps its Owner field as it was;
//   - spread: every store that received a region ends at most one region
//     above the live, staying store with the fewest (the regions go one at
//     a time to the store with the fewest, so none receives while another
//     has fewer).
func TestFailoverPropertiesOverRandomMaps(t *testing.T) {
	for seed := range uint64(500) {
		rng := rand.New(rand.NewPCG(seed, 51))
		stores := 2 + rng.IntN(19)
		m := mapOf(t, 1+rng.IntN(200))
		for i := range m.Region {
			m.Region[i].Slot = rng.IntN(2 * stores)
			switch rng.IntN(3) {
			case 0: // the slot rule
			case 1:
				m.Region[i].Owner = ownerPtr(rng.IntN(stores))
			case 2:
				m.Region[i].Owner = ownerPtr(stores + rng.IntN(3)) // placed on a store that left
			}
		}
		dead := []int{rng.IntN(stores)}
		if rng.IntN(2) == 0 {
			if d := rng.IntN(stores); d != dead[0] {
				dead = append(dead, d)
			}
		}
		var leavingSet []int
		if rng.IntN(4) == 0 {
			leavingSet = append(leavingSet, rng.IntN(stores))
		}
		leaving := func(o int) bool { return slices.Contains(leavingSet, o) }
		isDead := func(o int) bool { return slices.Contains(dead, o) }
		load := map[string]RegionLoad{}
		for _, r := range m.Region {
			load[r.Name] = RegionLoad{Bytes: int64(rng.IntN(1000)) << 20}
		}
		before, _ := json.Marshal(m)
		name := fmt.Sprintf("seed %d: %d regions, %d stores, dead %v, leaving %v", seed, len(m.Region), stores, dead, leavingSet)

		next, moves := Failover(m, dead, stores, leaving, load)

		if after, _ := json.Marshal(m); string(after) != string(before) {
			t.Fatalf("%s: Failover changed its input map", name)
		}
		if err := next.Validate(); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		var live []int
		for o := range stores {
			if !isDead(o) && !leaving(o) {
				live = append(live, o)
			}
		}
		if len(live) == 0 {
			if len(moves) != 0 {
				t.Fatalf("%s: no live store, but moves %v", name, moves)
			}
			continue
		}
		moved := map[string]Move{}
		for _, mv := range moves {
			if _, twice := moved[mv.Region]; twice {
				t.Fatalf("%s: %s moved twice", name, mv.Region)
			}
			moved[mv.Region] = mv
		}
		received := map[int]bool{}
		for i, r := range m.Region {
			n := next.Region[i]
			was := r.OwnerOf(stores)
			mv, ok := moved[r.Name]
			switch {
			case isDead(was) && !ok:
				t.Fatalf("%s: %s on the dead store %d was not moved", name, r.Name, was)
			case isDead(was):
				if mv.From != was || mv.To != n.OwnerOf(stores) || n.Owner == nil || *n.Owner != mv.To {
					t.Fatalf("%s: move %v, region now %+v (owner %d)", name, mv, n, n.OwnerOf(stores))
				}
				if isDead(mv.To) || leaving(mv.To) {
					t.Fatalf("%s: %v moves to a dead or leaving store", name, mv)
				}
				received[mv.To] = true
			case ok:
				t.Fatalf("%s: %v moves a region of the live store %d", name, mv, was)
			case (r.Owner == nil) != (n.Owner == nil) || (r.Owner != nil && *r.Owner != *n.Owner):
				t.Fatalf("%s: %s on the live store %d had its owner changed", name, r.Name, was)
			}
		}
		counts := Loads(next, load, stores)
		least := counts[live[0]].Regions
		for _, o := range live {
			least = min(least, counts[o].Regions)
		}
		for o := range received {
			if counts[o].Regions > least+1 {
				t.Fatalf("%s: store %d received regions and holds %d, the least-loaded live store %d", name, o, counts[o].Regions, least)
			}
		}
		for _, o := range dead {
			if counts[o].Regions != 0 {
				t.Fatalf("%s: the dead store %d still serves %d regions", name, o, counts[o].Regions)
			}
		}
	}
}

// A region served by its slot's fallback (no owner, or an owner that has
// left) on the dead store moves, and gets an explicit owner: the fallback
// would otherwise land on the dead store again. Of two stores with equal
// counts the one with fewer bytes takes the larger region first.
func TestFailoverMovesSlotFallbacksAndBreaksTiesByBytes(t *testing.T) {
	m := mapOf(t, 5)
	m.Region[0].Slot = 1            // no owner: slot 1 → store 1
	m.Region[1].Owner = ownerPtr(7) // placed on a store that left: the slot decides
	m.Region[1].Slot = 4            // 4 mod 3 → store 1
	m.Region[2].Owner = ownerPtr(0) // store 0
	m.Region[3].Owner = ownerPtr(2) // store 2
	m.Region[4].Owner = ownerPtr(1) // store 1
	load := map[string]RegionLoad{
		"region-000": {Bytes: 10}, "region-001": {Bytes: 30}, "region-002": {Bytes: 500},
		"region-003": {Bytes: 100}, "region-004": {Bytes: 20},
	}
	next, moves := Failover(m, []int{1}, 3, nil, load)
	// Store 1 served region-001 (30), region-004 (20), region-000 (10), in
	// that order by size. Stores 0 and 2 hold one region each, 500 and 100
	// bytes: region-001 to store 2 (fewer bytes), then region-004 to store
	// 0 (now fewer regions), then region-000 to store 2 (both hold two;
	// store 2 has 130 bytes against 520).
	want := []Move{{"region-001", 1, 2}, {"region-004", 1, 0}, {"region-000", 1, 2}}
	if fmt.Sprint(moves) != fmt.Sprint(want) {
		t.Fatalf("moves %v, want %v", moves, want)
	}
	for _, r := range next.Region {
		if r.OwnerOf(3) == 1 {
			t.Errorf("%s still on the dead store 1", r.Name)
		}
	}
	if next.Region[0].Owner == nil || *next.Region[0].Owner != 2 {
		t.Errorf("region-000 (slot fallback) has owner %v, want an explicit 2", next.Region[0].Owner)
	}
	// Every survivor dead or leaving: nothing to move to.
	same, none := Failover(m, []int{1}, 3, func(o int) bool { return o != 1 }, load)
	if len(none) != 0 || fmt.Sprint(same) != fmt.Sprint(m) {
		t.Fatalf("no live store: moves %v", none)
	}
	if _, none := Failover(m, []int{0, 1, 2}, 3, nil, load); len(none) != 0 {
		t.Fatalf("every store dead: moves %v", none)
	}
	// No dead store serves anything: no moves.
	if _, none := Failover(m, []int{5}, 3, nil, load); len(none) != 0 {
		t.Fatalf("a dead ordinal outside the cluster: moves %v", none)
	}
}
