package offload

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"testing"

	"github.com/bellows-kv/bellows/storage-engine/compaction"
	"github.com/bellows-kv/bellows/storage-engine/compactor"
)

// Rendezvous order is deterministic, independent of list order, and removing
// a worker moves only the regions that preferred it.
func TestRendezvous(t *testing.T) {
	workers := []string{"10.0.0.1:7500", "10.0.0.2:7500", "10.0.0.3:7500", "10.0.0.4:7500"}
	rev := slices.Clone(workers)
	slices.Reverse(rev)
	first := map[string]int{}
	for i := range 400 {
		region := fmt.Sprintf("region-%03d", i)
		o := Rendezvous(region, workers)
		if !slices.Equal(o, Rendezvous(region, rev)) || len(o) != len(workers) {
			t.Fatalf("%s: order depends on the list order", region)
		}
		first[o[0]]++
		without := Rendezvous(region, workers[1:])
		if o[0] != workers[0] && without[0] != o[0] {
			t.Fatalf("%s moved from %s although only %s left", region, o[0], workers[0])
		}
		if !slices.Equal(without, slices.DeleteFunc(slices.Clone(o), func(w string) bool { return w == workers[0] })) {
			t.Fatalf("%s: removing a worker reordered the rest", region)
		}
	}
	for _, w := range workers {
		if first[w] < 50 { // 100 expected; a hash this skewed is broken
			t.Fatalf("worker %s preferred by only %d of 400 regions: %v", w, first[w], first)
		}
	}
}

func TestParseMode(t *testing.T) {
	for in, want := range map[string]Mode{"": Preferred, "Required": Required, "Preferred": Preferred, "Disabled": Disabled} {
		if got, err := ParseMode(in); err != nil || got != want {
			t.Fatalf("ParseMode(%q) = %v, %v", in, got, err)
		}
	}
	if _, err := ParseMode("sometimes"); err == nil {
		t.Fatal("ParseMode accepted sometimes")
	}
}

// Balanced placement: over many region sets, loads are within
// [⌊R/C⌋, ⌈(1+ε)R/C⌉], the assignment does not depend on list order, and
// adding a worker moves few regions (at most about twice the R/(C+1) that
// the new worker must take). The log compares it with pure rendezvous
// hashing, whose spread issue 11 measured.
func TestBalancedSpread(t *testing.T) {
	for _, rc := range [][2]int{{4, 3}, {3, 4}, {8, 3}, {10, 4}, {32, 5}, {100, 8}} {
		R, C := rc[0], rc[1]
		const sets = 200
		var anyIdleR, anyIdleB, maxR, maxB, movR, movB int
		for s := range sets {
			var regions, workers []string
			for i := range R {
				regions = append(regions, fmt.Sprintf("kv-%d-region-%03d", s, i))
			}
			for i := range C {
				workers = append(workers, fmt.Sprintf("10.%d.0.%d:7500", s%7, i+1))
			}
			bal := Balanced(regions, workers, DefaultEpsilon)
			rev := slices.Clone(regions)
			slices.Reverse(rev)
			if !maps.Equal(bal, Balanced(rev, workers, DefaultEpsilon)) {
				t.Fatalf("R=%d C=%d set %d: assignment depends on the list order", R, C, s)
			}
			more := append(slices.Clone(workers), "10.9.9.9:7500")
			bal2 := Balanced(regions, more, DefaultEpsilon)
			lr, lb := map[string]int{}, map[string]int{}
			for _, r := range regions {
				lr[Rendezvous(r, workers)[0]]++
				lb[bal[r]]++
				if Rendezvous(r, workers)[0] != Rendezvous(r, more)[0] {
					movR++
				}
				if bal[r] != bal2[r] {
					movB++
				}
				if s > 0 {
					continue
				}
				if o := BalancedOrder(r, regions, workers, DefaultEpsilon); o[0] != bal[r] || len(o) != C {
					t.Fatalf("%s: BalancedOrder %v, want %s first of %d", r, o, bal[r], C)
				}
			}
			idleR, idleB, m1, m2 := false, false, 0, 0
			for _, w := range workers {
				idleR, idleB = idleR || lr[w] == 0, idleB || lb[w] == 0
				m1, m2 = max(m1, lr[w]), max(m2, lb[w])
				if lb[w] < R/C || lb[w] > LoadBound(R, C, DefaultEpsilon) {
					t.Fatalf("R=%d C=%d set %d: worker %s has %d regions, want %d..%d", R, C, s, w, lb[w], R/C, LoadBound(R, C, DefaultEpsilon))
				}
			}
			if idleR {
				anyIdleR++
			}
			if idleB {
				anyIdleB++
			}
			maxR += m1
			maxB += m2
		}
		least := float64(R) / float64(C+1)
		if got := float64(movB) / sets; got > 2*least+0.5 {
			t.Errorf("R=%d C=%d: adding a worker moved %.2f regions on average, want ≤ %.2f", R, C, got, 2*least+0.5)
		}
		t.Logf("R=%d C=%d: rendezvous: some worker idle in %.0f%% of sets, mean max load %.2f, moved on add %.2f | balanced: idle %.0f%%, max %.2f, moved %.2f (least %.2f)",
			R, C, 100*float64(anyIdleR)/sets, float64(maxR)/sets, float64(movR)/sets,
			100*float64(anyIdleB)/sets, float64(maxB)/sets, float64(movB)/sets, least)
	}
}

// The executor places by Balanced over the store's regions: four regions
// that pure rendezvous hashing puts on two of three workers keep all three
// busy.
func TestExecutorBalancesRegions(t *testing.T) {
	url, b := openBucket(t)
	var addrs []string
	var workers []*compactor.Worker
	for range 3 {
		a, w := startWorker(t, listen(t), 64<<20)
		addrs, workers = append(addrs, a), append(workers, w)
	}
	// Four region names that leave a worker idle under pure rendezvous.
	var regions []string
	for i := 0; len(regions) == 0; i++ {
		rs := []string{fmt.Sprint("a", i), fmt.Sprint("b", i), fmt.Sprint("c", i), fmt.Sprint("d", i)}
		first := map[string]bool{}
		for _, r := range rs {
			first[Rendezvous(r, addrs)[0]] = true
		}
		if len(first) < 3 {
			regions = rs
		}
	}
	exec, err := New(Options{Mode: Required, Workers: Static(addrs), BucketURL: url, Local: compaction.Local{Bucket: b},
		Regions: func() []string { return regions }})
	if err != nil {
		t.Fatal(err)
	}
	defer exec.Close()
	for _, name := range regions {
		if _, err := openRegion(t, b, name, exec).Compact(context.Background(), true); err != nil {
			t.Fatal(err)
		}
	}
	for i, w := range workers {
		if st, _ := w.Status(context.Background(), nil); st.CompactionRateBytesPerSecond == 0 {
			t.Errorf("worker %s ran no job of %v", addrs[i], regions)
		}
	}
}

// Pool-wide placement: the stores of a cluster share a pool, and each
// places its own regions' jobs. Balancing only its own regions, a store
// spreads them well, but its peers do the same blind to it: with 20 stores
// of 50 regions on 200 workers, every store puts its 50 regions on 50
// distinct workers, and the 20 choices pile up. Balancing the cluster's
// regions (what server.Store.PlacementRegions gives every store), each
// store computes the same assignment and every worker is the first choice
// of ⌊R/C⌋ or ⌈R/C⌉ regions: here exactly 5.
func TestPlacementOverTheClustersRegionsBalancesThePool(t *testing.T) {
	const stores, perStore, workers = 20, 50, 200
	var all []string
	byStore := make([][]string, stores)
	for i := range stores * perStore {
		name := fmt.Sprintf("region-%04d", i)
		all = append(all, name)
		byStore[i%stores] = append(byStore[i%stores], name) // slot ownership: region mod stores
	}
	var pool []string
	for i := range workers {
		pool = append(pool, fmt.Sprintf("10.1.%d.%d:7500", i/250, i%250+1))
	}
	load := func(regionsOf func(s int) []string) (lo, hi int) {
		first := map[string]int{}
		var c balancedCache
		for s := range stores {
			for _, r := range byStore[s] {
				first[c.order(r, regionsOf(s), pool, DefaultEpsilon)[0]]++
			}
		}
		lo = len(all)
		for _, w := range pool {
			lo, hi = min(lo, first[w]), max(hi, first[w])
		}
		return lo, hi
	}
	perLo, perHi := load(func(s int) []string { return byStore[s] })
	clusterLo, clusterHi := load(func(int) []string { return all })
	t.Logf("each store balancing its own regions: worker loads %d..%d; balancing the cluster's: %d..%d", perLo, perHi, clusterLo, clusterHi)
	if want := len(all) / workers; clusterLo != want || clusterHi != want {
		t.Errorf("balancing the cluster's regions: worker loads %d..%d, want every worker at %d", clusterLo, clusterHi, want)
	}
	if perHi <= len(all)/workers {
		t.Errorf("each store balancing its own regions already gives loads %d..%d: the test does not show what the cluster-wide set fixes", perLo, perHi)
	}
}
