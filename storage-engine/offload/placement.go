package offload

import (
	"hash/fnv"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// Discovery lists the compaction workers a store may use ("host:port").
type Discovery interface {
	Compactors() []string
}

// Static is a fixed list of workers (bellows local, --compactors). Discovery
// through the compactor Service's EndpointSlices (--compactor-service) is a
// follow-up; it will be another implementation of Discovery.
type Static []string

// Compactors implements Discovery.
func (s Static) Compactors() []string { return s }

// ParseStatic parses a comma-separated host:port list, ignoring empty items.
func ParseStatic(list string) Static {
	var s Static
	for _, a := range strings.Split(list, ",") {
		if a = strings.TrimSpace(a); a != "" {
			s = append(s, a)
		}
	}
	return s
}

// Rendezvous orders workers for a region by highest random weight: every
// store computes the same order without coordination, a region keeps its
// preferred worker while that worker lives, and when a worker leaves only its
// regions move (Ahmad & Kemme's region→compaction-server assignment,
// without a manager on the request path). testdata/placement pins the
// orders: stores of two versions must agree during an upgrade.
func Rendezvous(region string, workers []string) []string {
	type scored struct {
		addr  string
		score uint64
	}
	s := make([]scored, 0, len(workers))
	for _, w := range workers {
		s = append(s, scored{w, score(region, w)})
	}
	slices.SortFunc(s, func(a, b scored) int { return byScore(a.score, a.addr, b.score, b.addr) })
	out := make([]string, len(s))
	for i, x := range s {
		out[i] = x.addr
	}
	return out
}

// score is a region's weight for a worker: the higher, the more the region
// prefers it.
func score(region, worker string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(region))
	h.Write([]byte{0})
	h.Write([]byte(worker))
	return mix(h.Sum64())
}

// byScore orders higher scores first, ties by name.
func byScore(sa uint64, a string, sb uint64, b string) int {
	if sa != sb {
		if sa > sb {
			return -1
		}
		return 1
	}
	return strings.Compare(a, b)
}

// DefaultEpsilon is the balance slack of Balanced. Zero: every worker is the
// first choice of ⌊R/C⌋ or ⌈R/C⌉ regions, the balance the capacity model
// assumes. A larger ε moves fewer regions when a worker comes or goes
// (Mirrokni et al., consistent hashing with bounded loads); at 0, adding a
// worker to 100 regions on 8 moves about 17 regions, where 11 is the least
// any balanced placement moves and pure rendezvous hashing moves 11.
const DefaultEpsilon = 0

// Balanced assigns each region a worker with rendezvous hashing under a
// load bound: no worker is the first choice of more than
// ⌈(1+ε)·len(regions)/len(workers)⌉ regions. Pure rendezvous hashing leaves
// the load to chance (4 regions on 3 workers: some worker has no region
// 56% of the time), while the capacity model (Ahmad & Kemme §6.3) counts
// on every worker taking its share.
//
// The assignment is the region-proposing stable matching (Gale–Shapley with
// capacities): regions ask workers in their rendezvous order, and a full
// worker keeps the regions that score highest for it. It is unique, so it
// depends only on the two sets, not on their order, and a region stays on
// its rendezvous choice unless that worker is over the bound; when a worker
// comes or goes, only regions near the bound move with it.
func Balanced(regions, workers []string, epsilon float64) map[string]string {
	regions = slices.Compact(slices.Sorted(slices.Values(regions)))
	workers = slices.Compact(slices.Sorted(slices.Values(workers)))
	if len(workers) == 0 || len(regions) == 0 {
		return map[string]string{}
	}
	bound := LoadBound(len(regions), len(workers), epsilon)
	orders := make(map[string][]string, len(regions))
	next := make(map[string]int, len(regions))
	held := make(map[string][]string, len(workers))
	free := slices.Clone(regions)
	for len(free) > 0 {
		r := free[len(free)-1]
		free = free[:len(free)-1]
		if orders[r] == nil {
			orders[r] = Rendezvous(r, workers)
		}
		// bound·C ≥ R, so some worker along r's order has room.
		w := orders[r][next[r]]
		next[r]++
		held[w] = append(held[w], r)
		if len(held[w]) > bound {
			// Evict the region that scores lowest for w; it asks its next.
			slices.SortFunc(held[w], func(a, b string) int { return byScore(score(a, w), a, score(b, w), b) })
			free = append(free, held[w][bound])
			held[w] = held[w][:bound]
		}
	}
	// The bound caps loads but leaves workers idle (4 regions, 3 workers:
	// 2+2+0 is within it). A worker under ⌊R/C⌋ takes, from workers above
	// it, the region that scores highest for it; Σ loads = R ≥ C·⌊R/C⌋, so
	// there is always one to take.
	floor := len(regions) / len(workers)
	for _, w := range workers {
		for len(held[w]) < floor {
			var from, best string
			for _, v := range workers {
				if len(held[v]) <= floor {
					continue
				}
				for _, r := range held[v] {
					if best == "" || byScore(score(r, w), r, score(best, w), best) < 0 {
						from, best = v, r
					}
				}
			}
			held[from] = slices.DeleteFunc(held[from], func(r string) bool { return r == best })
			held[w] = append(held[w], best)
		}
	}
	out := make(map[string]string, len(regions))
	for w, rs := range held {
		for _, r := range rs {
			out[r] = w
		}
	}
	return out
}

// LoadBound is ⌈(1+ε)·regions/workers⌉, at least 1.
func LoadBound(regions, workers int, epsilon float64) int {
	if workers <= 0 {
		return 0
	}
	return max(1, int(math.Ceil((1+max(epsilon, 0))*float64(regions)/float64(workers)-1e-9)))
}

// BalancedOrder is the order in which a store offers a region's jobs to
// workers: the region's Balanced worker first, then the rest in rendezvous
// order (the fallbacks when the first refuses or is unreachable). regions
// is the set of regions the store balances over; region is added to it.
func BalancedOrder(region string, regions, workers []string, epsilon float64) []string {
	var once balancedCache
	return once.order(region, regions, workers, epsilon)
}

// balancedCache is BalancedOrder with the last assignment kept: a store
// places every job over the same regions and workers until one comes or
// goes, and Balanced of a cluster's 1,000 regions over 200 workers costs
// tens of milliseconds.
type balancedCache struct {
	mu       sync.Mutex
	key      uint64
	assigned map[string]string
}

func (c *balancedCache) order(region string, regions, workers []string, epsilon float64) []string {
	if !slices.Contains(regions, region) {
		regions = append(slices.Clone(regions), region)
	}
	key := setsKey(regions, workers, epsilon)
	c.mu.Lock()
	if c.assigned == nil || c.key != key {
		c.key, c.assigned = key, Balanced(regions, workers, epsilon)
	}
	first, ok := c.assigned[region]
	c.mu.Unlock()
	order := Rendezvous(region, workers)
	if !ok || order[0] == first {
		return order
	}
	return append([]string{first}, slices.DeleteFunc(order, func(w string) bool { return w == first })...)
}

// setsKey identifies the two sets (order and duplicates aside) and ε.
func setsKey(regions, workers []string, epsilon float64) uint64 {
	h := fnv.New64a()
	for _, set := range [][]string{regions, workers} {
		for _, x := range slices.Compact(slices.Sorted(slices.Values(set))) {
			h.Write([]byte(x))
			h.Write([]byte{0})
		}
		h.Write([]byte{1})
	}
	h.Write([]byte(strconv.FormatFloat(epsilon, 'g', -1, 64)))
	return h.Sum64()
}

// mix is splitmix64's finalizer: FNV's low bits alone spread poorly over
// similar addresses.
func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}
