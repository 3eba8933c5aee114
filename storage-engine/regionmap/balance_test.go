package regionmap

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// mapOf is a map of n regions, all in slot 0 (one store owns them all, as
// after a one-region cluster split n-1 times).
func mapOf(t *testing.T, n int) Map {
	t.Helper()
	var bounds [][]byte
	for i := 1; i < n; i++ {
		bounds = append(bounds, []byte(fmt.Sprintf("k%04d", i)))
	}
	m, err := Initial(bounds)
	if err != nil {
		t.Fatal(err)
	}
	for i := range m.Region {
		m.Region[i].Slot = 0
	}
	return m
}

// applyPlans runs Plan and commits its moves until it proposes none, as the
// balancer does round after round (moves settle between rounds), and
// returns the final map and the number of moves.
func applyPlans(t *testing.T, m Map, load map[string]RegionLoad, s BalanceSettings) (Map, int) {
	t.Helper()
	total := 0
	for round := 0; ; round++ {
		if round > 1000 {
			t.Fatalf("the plans did not settle in 1000 rounds")
		}
		moves := Plan(m, load, nil, s)
		if len(moves) > s.MaxMovesInFlight {
			t.Fatalf("round %d: %d moves, over the %d in flight allowed", round, len(moves), s.MaxMovesInFlight)
		}
		if len(moves) == 0 {
			return m, total
		}
		seen := map[string]bool{}
		for _, mv := range moves {
			if seen[mv.Region] {
				t.Fatalf("round %d: %s moved twice in one plan: %v", round, mv.Region, moves)
			}
			seen[mv.Region] = true
			if r, _ := m.ByName(mv.Region); r.OwnerOf(s.Stores) != mv.From || mv.From == mv.To {
				t.Fatalf("round %d: move %v, but the region is on %d", round, mv, r.OwnerOf(s.Stores))
			}
		}
		next, err := m.Moved(moves)
		if err != nil {
			t.Fatal(err)
		}
		m, total = next, total+len(moves)
	}
}

// Equal regions on one store spread over three within the tolerance, in
// bytes and in requests, and the plans stop there.
func TestPlanSpreadsEqualRegionsWithinTheTolerance(t *testing.T) {
	m := mapOf(t, 12)
	load := map[string]RegionLoad{}
	for _, r := range m.Region {
		load[r.Name] = RegionLoad{Bytes: 100 << 20, QPS: 50}
	}
	s := BalanceSettings{Stores: 3, Tolerance: 0.15, MaxMovesInFlight: 2}
	final, moves := applyPlans(t, m, load, s)
	stores := Loads(final, load, 3)
	if !Balanced(stores, s.Tolerance) {
		t.Fatalf("not balanced after %d moves: %+v", moves, stores)
	}
	if moves != 8 {
		t.Errorf("%d moves, want the 8 that give each store 4 of the 12 regions", moves)
	}
	for o, st := range stores {
		if st.Regions != 4 {
			t.Errorf("store %d holds %d regions", o, st.Regions)
		}
	}
}

// Random region sizes and loads, random store counts: every plan respects
// its bounds, every round lowers the spread (the plans settle), and the
// result is within the tolerance whenever the regions are fine enough that
// some placement is (each region at most a quarter of a store's mean).
func TestPlanPropertiesOverRandomClusters(t *testing.T) {
	for seed := range uint64(300) {
		rng := rand.New(rand.NewPCG(seed, 7))
		stores := 2 + rng.IntN(5)
		regions := stores * (4 + rng.IntN(6))
		m := mapOf(t, regions)
		for i := range m.Region {
			m.Region[i].Slot = rng.IntN(stores) // some start spread
		}
		load := map[string]RegionLoad{}
		var total int64
		for _, r := range m.Region {
			b := int64(50+rng.IntN(100)) << 20
			load[r.Name] = RegionLoad{Bytes: b, QPS: float64(rng.IntN(40))}
			total += b
		}
		fine := true
		for _, l := range load {
			fine = fine && l.Bytes <= total/int64(stores)/4
		}
		s := BalanceSettings{Stores: stores, Tolerance: 0.15, MaxMovesInFlight: 1 + rng.IntN(3)}
		final, _ := applyPlans(t, m, load, s)
		st := Loads(final, load, stores)
		if fine && !bytesWithin(st, s.Tolerance) {
			t.Errorf("seed %d: %d stores, %d regions: bytes not within ±%.0f%%: %+v", seed, stores, regions, 100*s.Tolerance, st)
		}
	}
}

func bytesWithin(st []StoreLoad, tol float64) bool {
	var total int64
	for _, s := range st {
		total += s.Bytes
	}
	mean := float64(total) / float64(len(st))
	for _, s := range st {
		if d := float64(s.Bytes) - mean; d > tol*mean || -d > tol*mean {
			return false
		}
	}
	return true
}

// Moves in flight count against the bound and are not moved again;
// settling regions stay; an unreachable store neither gives nor takes.
func TestPlanHonoursMovesInFlightAndUnreachableStores(t *testing.T) {
	m := mapOf(t, 6)
	load := map[string]RegionLoad{}
	for _, r := range m.Region {
		load[r.Name] = RegionLoad{Bytes: 10 << 20}
	}
	s := BalanceSettings{Stores: 3, Tolerance: 0.15, MaxMovesInFlight: 2}
	if got := Plan(m, load, map[string]bool{"region-000": true, "region-001": true}, s); len(got) != 0 {
		t.Fatalf("two moves in flight, bound 2: plan %v", got)
	}
	got := Plan(m, load, map[string]bool{"region-000": true}, s)
	if len(got) != 1 || got[0].Region == "region-000" {
		t.Fatalf("one move in flight: plan %v, want one move of another region", got)
	}
	s.Settling = map[string]bool{}
	for _, r := range m.Region[:5] {
		s.Settling[r.Name] = true
	}
	if got := Plan(m, load, nil, s); len(got) != 1 || got[0].Region != "region-005" {
		t.Fatalf("five of six regions settling: plan %v, want only region-005 moved", got)
	}
	s.Settling = nil
	s.Unreachable = []int{1}
	for _, mv := range Plan(m, load, nil, s) {
		if mv.To == 1 || mv.From == 1 {
			t.Fatalf("plan %v moves to or from the unreachable store 1", mv)
		}
	}
}

// When the stores shrink, a region placed on a store that left falls back
// to its slot's store, and the plan balances the rest: no region is left
// without an owner.
func TestARegionOnALeavingStoreFallsBackToItsSlot(t *testing.T) {
	m := mapOf(t, 15)
	load := map[string]RegionLoad{}
	for _, r := range m.Region {
		load[r.Name] = RegionLoad{Bytes: 10 << 20}
	}
	s := BalanceSettings{Stores: 5, Tolerance: 0.15, MaxMovesInFlight: 3}
	m, _ = applyPlans(t, m, load, s)
	on4 := 0
	for _, r := range m.Region {
		if r.OwnerOf(5) == 4 {
			on4++
			if got := r.OwnerOf(3); got != r.Slot%3 {
				t.Errorf("%s on the leaving store 4: owner among 3 is %d, want its slot's %d", r.Name, got, r.Slot%3)
			}
		}
	}
	if on4 == 0 {
		t.Fatal("the balance put nothing on store 4")
	}
	s.Stores = 3
	m, _ = applyPlans(t, m, load, s)
	if st := Loads(m, load, 3); !bytesWithin(st, 0.15) {
		t.Fatalf("after 5 → 3: %+v", st)
	}
}

// A map written before the balancer (no owner fields) loads with every
// region on its slot's store, and an owner survives a split.
func TestOwnersAreOptionalAndSurviveASplit(t *testing.T) {
	var m Map
	old := `{"epoch":3,"nextID":3,"regions":[{"id":1,"name":"region-001","start":"","end":"bQ==","slot":1},{"id":2,"name":"region-002","start":"bQ==","slot":0}]}`
	if err := json.Unmarshal([]byte(old), &m); err != nil {
		t.Fatal(err)
	}
	if err := m.Validate(); err != nil {
		t.Fatal(err)
	}
	if m.Region[0].OwnerOf(2) != 1 || m.Region[1].OwnerOf(2) != 0 {
		t.Fatalf("an old map's owners: %d %d, want the slots' 1 0", m.Region[0].OwnerOf(2), m.Region[1].OwnerOf(2))
	}
	moved, err := m.Moved([]Move{{Region: "region-002", From: 0, To: 1}})
	if err != nil {
		t.Fatal(err)
	}
	split, err := moved.Split("region-002", []byte("t"), 9)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range split.Region[1:] {
		if r.OwnerOf(2) != 1 {
			t.Errorf("daughter %s on %d, want its parent's store 1", r.Name, r.OwnerOf(2))
		}
	}
	if _, err := m.Moved([]Move{{Region: "region-009", To: 1}}); err == nil {
		t.Error("a move of a region not in the map was accepted")
	}
}

// Small neighbours on different stores are brought onto one, the smaller
// moving, once both have been small for the merge wait; small neighbours already together are not parted by a balance
// move.
func TestPlanBringsSmallNeighboursTogether(t *testing.T) {
	m := mapOf(t, 4)
	for i := range m.Region {
		o := i % 2
		m.Region[i].Owner = &o
	}
	load := map[string]RegionLoad{
		"region-000": {Bytes: 100 << 20}, "region-001": {Bytes: 1 << 20},
		"region-002": {Bytes: 2 << 20}, "region-003": {Bytes: 100 << 20},
	}
	s := BalanceSettings{Stores: 2, Tolerance: 0.15, MaxMovesInFlight: 2, MergeBytes: 8 << 20}
	if got := Plan(m, load, nil, s); len(got) != 0 {
		t.Fatalf("plan %v for small neighbours not yet small for the merge wait, want none", got)
	}
	s.MergeReady = map[string]bool{"region-001": true, "region-002": true}
	got := Plan(m, load, nil, s)
	if len(got) != 1 || got[0] != (Move{Region: "region-001", From: 1, To: 0}) {
		t.Fatalf("plan %v, want region-001 (the smaller of the small neighbours) moved to region-002's store 0", got)
	}
	// Once together they stay: store 0 now holds more, but the balance
	// takes nothing of the pair.
	next, _ := m.Moved(got)
	load["region-000"] = RegionLoad{Bytes: 10 << 20}
	for _, mv := range Plan(next, load, nil, s) {
		if mv.Region == "region-001" || mv.Region == "region-002" {
			t.Fatalf("plan %v parts the small neighbours waiting to merge", mv)
		}
	}
}

// A gap under the floor is no imbalance of bytes or requests, whatever the
// tolerance: with the region counts even, nothing moves.
func TestPlanIgnoresGapsUnderTheFloor(t *testing.T) {
	m := mapOf(t, 4)
	for i := range m.Region {
		m.Region[i].Owner = ownerPtr(i / 2) // two regions on each store
	}
	load := map[string]RegionLoad{
		"region-000": {Bytes: 20 << 20, QPS: 80}, "region-001": {Bytes: 20 << 20, QPS: 80},
		"region-002": {Bytes: 1 << 20}, "region-003": {Bytes: 1 << 20},
	}
	s := BalanceSettings{Stores: 2, Tolerance: 0.15, MaxMovesInFlight: 2, MinBytes: 64 << 20, MinQPS: 100}
	if got := Plan(m, load, nil, s); len(got) != 0 {
		t.Fatalf("40 MiB and 160 requests/s against 2 MiB and none, floors 64 MiB and 100/s: plan %v, want none", got)
	}
	s.MinBytes = 8 << 20
	if got := Plan(m, load, nil, s); len(got) == 0 {
		t.Fatal("a 38 MiB gap over an 8 MiB floor: no plan")
	}
}

// Two of five stores leave: successive plans, each waiting for the
// previous plan's moves to land (they are in flight meanwhile), empty
// both, never with more than the budget in flight, never moving a region
// to a leaving store, and leave the three that stay within the tolerance.
// The floors and settling would stop a balance move; a drain goes on.
func TestPlanDrainsLeavingStores(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 26))
	m := mapOf(t, 60)
	load := map[string]RegionLoad{}
	for _, r := range m.Region {
		load[r.Name] = RegionLoad{Bytes: int64(4+rng.IntN(12)) << 20, QPS: float64(rng.IntN(20))}
	}
	s := BalanceSettings{Stores: 5, Tolerance: 0.15, MaxMovesInFlight: 3}
	m, _ = applyPlans(t, m, load, s)
	before := Loads(m, load, 5)
	if before[3].Regions == 0 || before[4].Regions == 0 {
		t.Fatalf("the balance left store 3 or 4 empty: %+v", before)
	}
	if !bytesWithin(before, 0.15) {
		t.Fatalf("not balanced before the drain: %+v", before)
	}

	s.Leaving = []int{3, 4}
	s.MinBytes, s.MinQPS = 1<<40, 1e9 // no balance move would pass these
	s.Settling = map[string]bool{}
	for _, r := range m.Region {
		s.Settling[r.Name] = true
	}
	inFlight := map[string]bool{}
	for round := 0; ; round++ {
		if round > 200 {
			t.Fatal("the drain did not finish in 200 rounds")
		}
		moves := Plan(m, load, inFlight, s)
		if len(moves)+len(inFlight) > s.MaxMovesInFlight {
			t.Fatalf("round %d: %d moves with %d in flight, over the budget %d", round, len(moves), len(inFlight), s.MaxMovesInFlight)
		}
		for _, mv := range moves {
			if mv.To == 3 || mv.To == 4 {
				t.Fatalf("round %d: %v moves a region to a leaving store", round, mv)
			}
			if inFlight[mv.Region] {
				t.Fatalf("round %d: %v moves a region in flight", round, mv)
			}
		}
		if len(moves) == 0 && len(inFlight) == 0 {
			break
		}
		next, err := m.Moved(moves)
		if err != nil {
			t.Fatal(err)
		}
		m = next
		// This round's moves land during the next one.
		inFlight = map[string]bool{}
		for _, mv := range moves {
			inFlight[mv.Region] = true
		}
	}
	after := Loads(m, load, 5)
	if after[3].Regions != 0 || after[4].Regions != 0 {
		t.Fatalf("stores 3 and 4 still hold regions after the drain: %+v", after)
	}
	if !bytesWithin(after[:3], 0.15) {
		t.Fatalf("the three staying stores are not within ±15%% of their mean bytes: %+v", after[:3])
	}
	// With the drain done, the floors hold: nothing more moves.
	if got := Plan(m, load, nil, s); len(got) != 0 {
		t.Fatalf("plan %v after the drain, under the floors", got)
	}
}

// A leaving store's regions move even when the cluster is balanced and
// they are small neighbours waiting to merge there; they go to staying
// stores, fewest bytes first; an unreachable leaving store keeps its
// regions (no store could claim them before it answers).
func TestPlanDrainsSmallNeighboursOffALeavingStore(t *testing.T) {
	m := mapOf(t, 6)
	owners := []int{0, 1, 2, 2, 0, 1}
	for i := range m.Region {
		o := owners[i]
		m.Region[i].Owner = &o
	}
	load := map[string]RegionLoad{
		"region-000": {Bytes: 100 << 20}, "region-001": {Bytes: 100 << 20},
		"region-002": {Bytes: 1 << 20}, "region-003": {Bytes: 2 << 20},
		"region-004": {Bytes: 3 << 20}, "region-005": {Bytes: 1 << 20},
	}
	s := BalanceSettings{Stores: 3, Tolerance: 0.15, MaxMovesInFlight: 4, MergeBytes: 8 << 20,
		MergeReady: map[string]bool{"region-002": true, "region-003": true}}
	// Store 2's pair waits to merge there: the balance leaves it alone.
	for _, mv := range Plan(m, load, nil, s) {
		if mv.Region == "region-002" || mv.Region == "region-003" {
			t.Fatalf("plan %v parts small neighbours on a staying store", mv)
		}
	}
	s.Leaving = []int{2}
	got := Plan(m, load, nil, s)
	// The larger first, to the emptier store 1 (101 MiB against 103), which
	// it brings to 103; then the smaller to the first of the two equal.
	want := map[string]int{"region-003": 1, "region-002": 0}
	for _, mv := range got {
		if mv.To == 2 {
			t.Fatalf("plan %v moves a region to the leaving store", got)
		}
		if to, ok := want[mv.Region]; ok {
			if mv.To != to || mv.From != 2 {
				t.Errorf("move %v, want %s from 2 to %d", mv, mv.Region, to)
			}
			delete(want, mv.Region)
		}
	}
	if len(want) != 0 {
		t.Fatalf("plan %v leaves %v on the leaving store 2", got, want)
	}
	s.Unreachable = []int{2}
	for _, mv := range Plan(m, load, nil, s) {
		if mv.From == 2 || mv.To == 2 {
			t.Fatalf("plan %v moves to or from the unreachable leaving store", mv)
		}
	}
}

// Uneven neighbours that stopped growing (RecutReady) are brought onto one
// store, as small ones are, and kept together there for its re-cut; not
// before they are ready, and not when re-cuts are off.
func TestPlanBringsUnevenNeighboursTogether(t *testing.T) {
	m := mapOf(t, 4)
	for i := range m.Region {
		o := i % 2
		m.Region[i].Owner = &o
	}
	// Mean 120 MiB: region-001 (180) is 50% over it, region-002 (60) 50%
	// under. A floor keeps the balance by bytes out of the way.
	load := map[string]RegionLoad{
		"region-000": {Bytes: 80 << 20}, "region-001": {Bytes: 180 << 20},
		"region-002": {Bytes: 60 << 20}, "region-003": {Bytes: 160 << 20},
	}
	s := BalanceSettings{Stores: 2, Tolerance: 0.15, MaxMovesInFlight: 2, MergeBytes: 8 << 20, MinBytes: 1 << 40, RecutStore: -1}
	ready := map[string]bool{"region-001": true, "region-002": true}
	s.RecutReady = ready
	if got := Plan(m, load, nil, s); len(got) != 0 {
		t.Fatalf("plan %v with re-cuts off, want none", got)
	}
	s.RecutTolerance, s.RecutReady = 0.2, nil
	if got := Plan(m, load, nil, s); len(got) != 0 {
		t.Fatalf("plan %v for neighbours still growing, want none", got)
	}
	s.RecutReady = ready
	got := Plan(m, load, nil, s)
	if len(got) != 1 || got[0] != (Move{Region: "region-002", From: 0, To: 1}) {
		t.Fatalf("plan %v, want region-002 (the smaller of the uneven neighbours) moved to region-001's store 1", got)
	}
	next, _ := m.Moved(got)
	for _, mv := range Plan(next, load, nil, s) {
		if mv.Region == "region-001" || mv.Region == "region-002" {
			t.Fatalf("plan %v parts the uneven neighbours waiting for their re-cut", mv)
		}
	}
}

// With a re-cutting store (the balancer's), uneven neighbours go there,
// both of them, and stay together there; a pair together elsewhere is
// not kept from it.
func TestPlanBringsUnevenNeighboursToTheRecuttingStore(t *testing.T) {
	m := mapOf(t, 4)
	owners := []int{0, 1, 2, 0}
	for i := range m.Region {
		m.Region[i].Owner = &owners[i]
	}
	load := map[string]RegionLoad{
		"region-000": {Bytes: 100 << 20}, "region-001": {Bytes: 180 << 20},
		"region-002": {Bytes: 60 << 20}, "region-003": {Bytes: 140 << 20},
	}
	s := BalanceSettings{Stores: 3, Tolerance: 0.15, MaxMovesInFlight: 4, MergeBytes: 8 << 20, MinBytes: 1 << 40,
		RecutTolerance: 0.2, RecutReady: map[string]bool{"region-001": true, "region-002": true}, RecutStore: 0}
	got := Plan(m, load, nil, s)
	want := []Move{{Region: "region-001", From: 1, To: 0}, {Region: "region-002", From: 2, To: 0}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("plan %v, want %v: both uneven neighbours onto the re-cutting store 0, the larger first", got, want)
	}
	next, _ := m.Moved(got)
	for _, mv := range Plan(next, load, nil, s) {
		if mv.Region == "region-001" || mv.Region == "region-002" {
			t.Fatalf("plan %v parts the uneven neighbours on the re-cutting store", mv)
		}
	}
	s.MaxMovesInFlight = 1
	if got := Plan(m, load, nil, s); len(got) != 1 || got[0] != want[0] {
		t.Fatalf("plan %v with room for one move, want the larger first: %v", got, want[0])
	}
}

// balanceRounds runs the balancer as a store does: each round plans with
// the previous round's moves in flight (their new owners open them during
// the next round) and the regions moved in the last settle rounds
// settling, and commits the plan. It checks every plan against the budget,
// the moves in flight and the settling regions, and returns the final map,
// the rounds until a round planned nothing with nothing in flight, and
// every move made.
func balanceRounds(t *testing.T, m Map, load map[string]RegionLoad, s BalanceSettings, settle, maxRounds int) (Map, int, []Move) {
	t.Helper()
	movedAt := map[string]int{}
	inFlight := map[string]bool{}
	var all []Move
	for round := 0; ; round++ {
		if round > maxRounds {
			t.Fatalf("the balance did not settle in %d rounds: moves %v", maxRounds, all)
		}
		s.Settling = map[string]bool{}
		for name, at := range movedAt {
			if round-at <= settle && !inFlight[name] {
				s.Settling[name] = true
			}
		}
		moves := Plan(m, load, inFlight, s)
		if len(moves)+len(inFlight) > s.MaxMovesInFlight {
			t.Fatalf("round %d: %d moves with %d in flight, over the budget %d", round, len(moves), len(inFlight), s.MaxMovesInFlight)
		}
		for _, mv := range moves {
			if inFlight[mv.Region] || s.Settling[mv.Region] {
				t.Fatalf("round %d: %v moves a region in flight or settling", round, mv)
			}
			if r, _ := m.ByName(mv.Region); r.OwnerOf(s.Stores) != mv.From || mv.From == mv.To {
				t.Fatalf("round %d: move %v, but the region is on %d", round, mv, r.OwnerOf(s.Stores))
			}
			movedAt[mv.Region] = round
		}
		if len(moves) == 0 && len(inFlight) == 0 {
			return m, round, all
		}
		next, err := m.Moved(moves)
		if err != nil {
			t.Fatal(err)
		}
		m, all = next, append(all, moves...)
		inFlight = map[string]bool{}
		for _, mv := range moves {
			inFlight[mv.Region] = true
		}
	}
}

func regionCounts(st []StoreLoad) []int {
	var out []int
	for _, s := range st {
		out = append(out, s.Regions)
	}
	return out
}

// A cluster scaled from two stores to three under a light load (every gap
// under the floors) fills the new store by region count: 8 regions on
// stores 0 and 1 end 3/3/2, in two moves, within a few rounds.
func TestPlanFillsANewStoreByRegionCount(t *testing.T) {
	m := mapOf(t, 8)
	load := map[string]RegionLoad{}
	for i := range m.Region {
		m.Region[i].Slot = i % 2 // placed by the slot rule while there were two stores
		load[m.Region[i].Name] = RegionLoad{Bytes: int64(1+i) << 20, QPS: float64(10 * i)}
	}
	s := BalanceSettings{Stores: 3, Tolerance: 0.15, MaxMovesInFlight: 2, MinBytes: 64 << 20, MinQPS: 1000}
	if got := regionCounts(Loads(m, load, 3)); fmt.Sprint(got) != "[4 4 0]" {
		t.Fatalf("before: counts %v", got)
	}
	final, rounds, moves := balanceRounds(t, m, load, s, 10, 20)
	if got := regionCounts(Loads(final, load, 3)); fmt.Sprint(got) != "[3 3 2]" {
		t.Fatalf("after %d rounds and moves %v: counts %v, want [3 3 2]", rounds, moves, got)
	}
	if len(moves) != 2 || rounds > 3 {
		t.Errorf("%d moves in %d rounds (%v), want 2 moves, within 3 rounds", len(moves), rounds, moves)
	}
	// The smallest region of the fullest store moves first.
	if moves[0] != (Move{Region: "region-000", From: 0, To: 2}) {
		t.Errorf("first move %v, want the smallest, region-000, from 0 to 2", moves[0])
	}
}

// A count move never pushes bytes out of the tolerance (or floor) where
// bytes are above the floor: three regions of 100 MiB against one of 300
// stay as they are; with small regions on the fuller store, one moves.
func TestCountBalanceKeepsBytesWithinTolerance(t *testing.T) {
	m := mapOf(t, 4)
	owners := []int{0, 0, 0, 1}
	for i := range m.Region {
		m.Region[i].Owner = ownerPtr(owners[i])
	}
	s := BalanceSettings{Stores: 2, Tolerance: 0.15, MaxMovesInFlight: 2, MinBytes: 64 << 20, MinQPS: 1000}
	load := map[string]RegionLoad{
		"region-000": {Bytes: 100 << 20}, "region-001": {Bytes: 100 << 20},
		"region-002": {Bytes: 100 << 20}, "region-003": {Bytes: 300 << 20},
	}
	if got := Plan(m, load, nil, s); len(got) != 0 {
		t.Fatalf("3 × 100 MiB against 300 MiB: plan %v; any move puts 100 MiB out of a 64 MiB allowance", got)
	}
	load["region-000"] = RegionLoad{Bytes: 280 << 20}
	load["region-001"] = RegionLoad{Bytes: 10 << 20}
	load["region-002"] = RegionLoad{Bytes: 10 << 20}
	got := Plan(m, load, nil, s)
	if len(got) != 1 || got[0].From != 0 || got[0].To != 1 || got[0].Region == "region-000" {
		t.Fatalf("280+10+10 MiB against 300 MiB: plan %v, want one 10 MiB region from 0 to 1", got)
	}
	// The same under a request rate the move would unbalance.
	load["region-001"] = RegionLoad{Bytes: 10 << 20, QPS: 5000}
	load["region-002"] = RegionLoad{Bytes: 10 << 20, QPS: 5000}
	load["region-003"] = RegionLoad{Bytes: 300 << 20, QPS: 10000}
	if got := Plan(m, load, nil, s); len(got) != 0 {
		t.Fatalf("plan %v moves 5,000 requests/s onto a store already at the mean", got)
	}
}

// While a store is out of balance in bytes, counts wait, even when no byte
// move can help (the one region of the fullest store is larger than the
// gap): a count move then could be followed by byte moves it made
// possible, and the passes could take turns undoing each other. Only from
// a state the byte and request passes accept do count moves start, and
// each keeps it so.
func TestCountBalanceWaitsWhileBytesAreOutOfBalance(t *testing.T) {
	// Store 0: one region of 700 MiB; store 1: 48 of 10 MiB; stores 2-4:
	// one of 430 MiB each. Mean 494 MiB, allowance 74 MiB (15%): store 0
	// is 206 over, and its one region cannot move (it is more than the
	// 270 MiB gap to the emptiest store). Store 1's 48 regions against
	// the others' one would give count moves that keep stores 1-4 within
	// the allowance.
	m := mapOf(t, 52)
	load := map[string]RegionLoad{}
	for i, r := range m.Region {
		switch {
		case i == 0:
			m.Region[i].Owner = ownerPtr(0)
			load[r.Name] = RegionLoad{Bytes: 700 << 20}
		case i <= 48:
			m.Region[i].Owner = ownerPtr(1)
			load[r.Name] = RegionLoad{Bytes: 10 << 20}
		default:
			m.Region[i].Owner = ownerPtr(i - 47) // 49, 50, 51 → stores 2, 3, 4
			load[r.Name] = RegionLoad{Bytes: 430 << 20}
		}
	}
	s := BalanceSettings{Stores: 5, Tolerance: 0.15, MaxMovesInFlight: 2, MinBytes: 64 << 20, MinQPS: 1000}
	if got := regionCounts(Loads(m, load, 5)); fmt.Sprint(got) != "[1 48 1 1 1]" {
		t.Fatalf("counts %v", got)
	}
	if got := Plan(m, load, nil, s); len(got) != 0 {
		t.Fatalf("plan %v while store 0 is out of balance in bytes", got)
	}
	// The same stores with store 0 within the allowance: counts move.
	load["region-000"] = RegionLoad{Bytes: 500 << 20}
	if got := Plan(m, load, nil, s); len(got) != 2 || got[0].From != 1 || got[1].From != 1 {
		t.Fatalf("plan %v, want two count moves off store 1", got)
	}
}

// The count balance respects what the other passes respect: moves in
// flight (the budget, and never moved again), settling regions (another
// full store gives instead), unreachable stores and leaving ones (neither
// gives nor receives), small neighbours waiting to merge; and it waits
// while another pass moves anything.
func TestCountBalanceRespectsTheOtherPassesRules(t *testing.T) {
	m := mapOf(t, 9)
	for i := range m.Region {
		m.Region[i].Owner = ownerPtr(i % 2) // 5 on store 0, 4 on store 1, none on 2
	}
	load := map[string]RegionLoad{}
	for _, r := range m.Region {
		load[r.Name] = RegionLoad{Bytes: 1 << 20}
	}
	s := BalanceSettings{Stores: 3, Tolerance: 0.15, MaxMovesInFlight: 2, MinBytes: 64 << 20, MinQPS: 1000}
	if got := Plan(m, load, nil, s); len(got) != 2 || got[0].To != 2 || got[1].To != 2 {
		t.Fatalf("plan %v, want two moves onto the empty store 2", got)
	}
	if got := Plan(m, load, map[string]bool{"region-000": true, "region-002": true}, s); len(got) != 0 {
		t.Fatalf("two moves in flight, budget 2: plan %v", got)
	}
	if got := Plan(m, load, map[string]bool{"region-000": true}, s); len(got) != 1 || got[0].Region == "region-000" {
		t.Fatalf("one move in flight: plan %v, want one move of another region", got)
	}
	s.Settling = map[string]bool{}
	for i, r := range m.Region {
		if i%2 == 0 {
			s.Settling[r.Name] = true // every region of store 0
		}
	}
	got := Plan(m, load, nil, s)
	if len(got) == 0 || got[0].From != 1 || got[0].To != 2 {
		t.Fatalf("store 0's regions settling: plan %v, want store 1 to give to store 2", got)
	}
	for _, r := range m.Region {
		s.Settling[r.Name] = true
	}
	if got := Plan(m, load, nil, s); len(got) != 0 {
		t.Fatalf("every region settling: plan %v", got)
	}
	s.Settling = nil
	for _, o := range []int{2} {
		s.Unreachable = []int{o}
		if got := Plan(m, load, nil, s); len(got) != 0 {
			t.Fatalf("store 2 unreachable (5/4 on the others): plan %v", got)
		}
		s.Unreachable = nil
		s.Leaving = []int{o}
		if got := Plan(m, load, nil, s); len(got) != 0 {
			t.Fatalf("store 2 leaving (5/4 on the others): plan %v", got)
		}
		s.Leaving = nil
	}
	s.Unreachable = []int{0}
	for _, mv := range Plan(m, load, nil, s) {
		if mv.From == 0 {
			t.Fatalf("plan %v: the unreachable store 0 gives a region", mv)
		}
	}
	s.Unreachable = nil
	// Small neighbours together on one store stay there.
	pair := mapOf(t, 4)
	for i := range pair.Region {
		pair.Region[i].Owner = ownerPtr(0)
	}
	s.MergeBytes = 8 << 20
	pload := map[string]RegionLoad{"region-000": {Bytes: 1 << 20}, "region-001": {Bytes: 2 << 20},
		"region-002": {Bytes: 30 << 20}, "region-003": {Bytes: 40 << 20}}
	for _, mv := range Plan(pair, pload, nil, BalanceSettings{Stores: 2, Tolerance: 0.15, MaxMovesInFlight: 2, MinBytes: 64 << 20, MergeBytes: 8 << 20}) {
		if mv.Region == "region-000" || mv.Region == "region-001" {
			t.Fatalf("plan %v parts small neighbours waiting to merge", mv)
		}
	}
	// A drain plans: no count move beside it.
	s.MergeBytes = 0
	s.Leaving = []int{1}
	s.MaxMovesInFlight = 10
	for _, mv := range Plan(m, load, nil, s) {
		if mv.From != 1 {
			t.Fatalf("plan %v beside a drain", mv)
		}
	}
}

// Random light clusters (every region at most 1 MiB, a few requests/s:
// under the floors): random store counts, regions on a random subset of
// the stores (the others new), random budgets and settling. The balance
// ends with every reachable staying store within one region of every
// other, in a bounded number of rounds, and without churn: no region moves
// twice and no store both gives and receives.
func TestCountBalanceOverRandomLightClusters(t *testing.T) {
	for seed := range uint64(300) {
		rng := rand.New(rand.NewPCG(seed, 53))
		stores := 2 + rng.IntN(7)
		m := mapOf(t, 1+rng.IntN(60))
		holders := 1 + rng.IntN(stores)
		load := map[string]RegionLoad{}
		for i := range m.Region {
			m.Region[i].Owner = ownerPtr(rng.IntN(holders))
			load[m.Region[i].Name] = RegionLoad{Bytes: int64(rng.IntN(1 << 20)), QPS: float64(rng.IntN(10))}
		}
		s := BalanceSettings{Stores: stores, Tolerance: 0.15, MaxMovesInFlight: 1 + rng.IntN(3), MinBytes: 64 << 20, MinQPS: 1000}
		if rng.IntN(3) == 0 {
			s.Unreachable = []int{rng.IntN(stores)}
		}
		settle := rng.IntN(11)
		name := fmt.Sprintf("seed %d: %d regions, %d stores (%d holding), unreachable %v, budget %d, settle %d",
			seed, len(m.Region), stores, holders, s.Unreachable, s.MaxMovesInFlight, settle)
		before := Loads(m, load, stores)
		final, rounds, moves := balanceRounds(t, m, load, s, settle, 40*len(m.Region)+40)
		after := Loads(final, load, stores)
		lo, hi := len(m.Region), 0
		for o, st := range after {
			if slices.Contains(s.Unreachable, o) {
				if st.Regions != before[o].Regions {
					t.Fatalf("%s: the unreachable store %d went from %d to %d regions", name, o, before[o].Regions, st.Regions)
				}
				continue
			}
			lo, hi = min(lo, st.Regions), max(hi, st.Regions)
		}
		if hi-lo > 1 {
			t.Fatalf("%s: counts %v after %d rounds, %d moves", name, regionCounts(after), rounds, len(moves))
		}
		once := map[string]bool{}
		gave, took := map[int]bool{}, map[int]bool{}
		for _, mv := range moves {
			if once[mv.Region] {
				t.Fatalf("%s: %s moved twice: %v", name, mv.Region, moves)
			}
			once[mv.Region] = true
			gave[mv.From], took[mv.To] = true, true
		}
		for o := range gave {
			if took[o] {
				t.Fatalf("%s: store %d both gave and received: %v", name, o, moves)
			}
		}
	}
}
