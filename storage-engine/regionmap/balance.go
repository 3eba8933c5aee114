package regionmap

// The balancer's decision (docs/regions.md §4), a pure function of the map
// and the regions' readings: which regions to move to which store so that
// every store holds about the mean bytes and serves about the mean request
// rate, and, where those are even or too small to matter, about the mean
// number of regions. The store that holds the balancer lease (lease.go) calls Plan and
// commits the result with Map.Moved; the owners then hand the regions over.

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
)

// RegionLoad is one region's readings, as its serving store reports them.
type RegionLoad struct {
	Bytes int64
	// QPS is the requests per second it served over the recent window.
	QPS float64
}

// BalanceSettings bound a plan.
type BalanceSettings struct {
	// Stores is the cluster's store count: ordinals 0 … Stores-1.
	Stores int
	// Tolerance is how far from the mean a store may be, as a fraction of
	// the mean (0.15: ±15%), in bytes and in requests per second.
	Tolerance float64
	// MinBytes and MinQPS: a store is never out of balance by less than
	// these, whatever the tolerance says: moving regions of a small or
	// idle cluster costs each a flush and a cold cache for nothing.
	MinBytes int64
	MinQPS   float64
	// MaxMovesInFlight bounds the moves under way at once, cluster-wide:
	// the ones committed whose new owner has not opened the region yet
	// count against it.
	MaxMovesInFlight int
	// Unreachable stores (ordinals) neither give nor receive regions: a
	// move to a store that does not answer would leave the region closed.
	Unreachable []int
	// Leaving stores (ordinals) are about to go (the operator marked them
	// before shrinking the StatefulSet): their regions are moved off
	// first, whatever the balance, the floors, settling or small
	// neighbours say, and they receive none. The mean the others are
	// balanced to leaves them out. Draining by planned moves makes each
	// region's unavailability one bounded handover, instead of a release
	// racing the pod's termination grace period.
	Leaving []int
	// Settling regions moved recently and are not moved again yet: while
	// the data grows and regions split, readings change between plans,
	// and without a pause a region would go back and forth.
	Settling map[string]bool
	// MergeBytes is the stores' merge size: two adjacent regions each
	// under it merge once on one store (server/automerge.go), so the plan
	// brings such neighbours together and does not part them. 0: no
	// merges. MergeQPS: with it set, only regions serving fewer requests
	// per second than it are merge candidates (the stores' quarter of
	// their split rate), so hot small regions still balance.
	MergeBytes int64
	MergeQPS   float64
	// MergeReady are the small regions that have been small for the
	// stores' merge wait (the balancer times it): only two of these are
	// brought together. A new cluster's pre-split regions are all small
	// from the first reading; bringing them together at once would undo
	// the spread the user asked for, and moves would race the first
	// clients, for regions that may well grow.
	MergeReady map[string]bool
	// RecutTolerance: two adjacent regions, both RecutReady, that Recut
	// against the mean region size with this tolerance are brought onto
	// one store and not parted, as small neighbours are, so that store
	// re-cuts them (server/automerge.go). 0: no re-cuts.
	RecutTolerance float64
	// RecutReady are the regions whose size has held still for the
	// stores' merge wait (the balancer times it): they stopped growing.
	RecutReady map[string]bool
	// RecutStore is the store that re-cuts (the balancer's own, which alone
	// knows the mean): uneven neighbours are brought onto it. Negative:
	// onto the larger one's store.
	RecutStore int
}

// Move gives Region, served by From, to To.
type Move struct {
	Region   string
	From, To int
}

func (m Move) String() string { return fmt.Sprintf("%s: %d→%d", m.Region, m.From, m.To) }

// StoreLoad is what one store holds under a map: the sums of its regions'
// readings.
type StoreLoad struct {
	Regions int
	Bytes   int64
	QPS     float64
}

// Loads are the per-store sums of the regions' readings, indexed by
// ordinal, under map m in a cluster of n stores. A region without a
// reading counts as empty.
func Loads(m Map, load map[string]RegionLoad, n int) []StoreLoad {
	out := make([]StoreLoad, max(n, 0))
	for _, r := range m.Region {
		o := r.OwnerOf(n)
		if o < 0 {
			continue
		}
		l := load[r.Name]
		out[o].Regions++
		out[o].Bytes += l.Bytes
		out[o].QPS += l.QPS
	}
	return out
}

// Balanced reports whether every store is within the tolerance of the mean,
// in bytes and in requests per second.
func Balanced(stores []StoreLoad, tolerance float64) bool {
	if len(stores) == 0 {
		return true
	}
	var bytes int64
	var qps float64
	for _, s := range stores {
		bytes += s.Bytes
		qps += s.QPS
	}
	mb, mq := float64(bytes)/float64(len(stores)), qps/float64(len(stores))
	for _, s := range stores {
		if math.Abs(float64(s.Bytes)-mb) > tolerance*mb || math.Abs(s.QPS-mq) > tolerance*mq {
			return false
		}
	}
	return true
}

// Plan returns the moves that bring the stores toward the mean, at most
// MaxMovesInFlight minus the moves already in flight (inFlight: regions
// whose owner has not opened them yet; they are neither moved again nor
// counted as settled). First it drains the Leaving stores: each of their
// regions goes to the staying, reachable store with the fewest bytes, the
// loads updated as it goes. Settling regions stay where they are. Bytes first: each move takes, from the store
// furthest above the mean bytes to the one furthest below, the region that
// best closes their gap without reversing it. When bytes are within the
// tolerance, requests per second the same way, with only moves that keep
// bytes within it. Then small and uneven neighbours are brought together.
// Last, only when none of that planned a move and no store is out of
// balance in bytes or requests: region counts, from the store with the
// most regions to the one with the fewest while they differ by more than
// one, the smallest region first, each move keeping bytes and requests
// within the tolerances (so a new or returning store is filled under a
// light load, where the floors make every gap no imbalance). A region is
// moved at most once per plan. The plan is empty when the stores are
// balanced or no move improves them: with few regions the tolerance may be
// out of reach, and the balancer then waits for splits.
func Plan(m Map, load map[string]RegionLoad, inFlight map[string]bool, s BalanceSettings) []Move {
	n := s.Stores
	budget := s.MaxMovesInFlight - len(inFlight)
	if n < 2 || budget <= 0 {
		return nil
	}
	owner := map[string]int{}
	for _, r := range m.Region {
		owner[r.Name] = r.OwnerOf(n)
	}
	stores := Loads(m, load, n)
	reachable := func(o int) bool { return !slices.Contains(s.Unreachable, o) }
	leaving := func(o int) bool { return slices.Contains(s.Leaving, o) }
	// takes: a store that may receive a region (and, in the balance
	// passes, give one).
	takes := func(o int) bool { return reachable(o) && !leaving(o) }
	var moves []Move
	moved := map[string]bool{}
	apply := func(mv Move) {
		moves = append(moves, mv)
		moved[mv.Region] = true
		owner[mv.Region] = mv.To
		l := load[mv.Region]
		stores[mv.From].Regions--
		stores[mv.From].Bytes -= l.Bytes
		stores[mv.From].QPS -= l.QPS
		stores[mv.To].Regions++
		stores[mv.To].Bytes += l.Bytes
		stores[mv.To].QPS += l.QPS
	}
	// Drain first: every region of a reachable leaving store goes to the
	// staying store with the fewest bytes, the largest regions first (so
	// the smaller ones even out what the larger leave).
	for _, name := range drainOrder(m, load, owner, inFlight, leaving, reachable) {
		if len(moves) >= budget {
			break
		}
		to := -1
		for o := range n {
			if takes(o) && (to < 0 || stores[o].Bytes < stores[to].Bytes) {
				to = o
			}
		}
		if to < 0 {
			break // no store to drain to
		}
		apply(Move{Region: name, From: owner[name], To: to})
	}
	// Small regions waiting on one store to merge are not parted, unless
	// that store is leaving.
	fixed := maps.Clone(s.Settling)
	if fixed == nil {
		fixed = map[string]bool{}
	}
	small := func(name string) bool {
		l, ok := load[name]
		return ok && l.Bytes < s.MergeBytes && (s.MergeQPS <= 0 || l.QPS < s.MergeQPS)
	}
	mean := MeanRegionBytes(m, load)
	uneven := func(a, b string) bool {
		return s.RecutTolerance > 0 && s.RecutReady[a] && s.RecutReady[b] &&
			Recut(load[a].Bytes, load[b].Bytes, mean, s.RecutTolerance, s.MergeBytes)
	}
	for i := 0; i+1 < len(m.Region); i++ {
		a, b := m.Region[i].Name, m.Region[i+1].Name
		together := owner[a] == owner[b] && !leaving(owner[a])
		if together && ((small(a) && small(b)) || (uneven(a, b) && (s.RecutStore < 0 || owner[a] == s.RecutStore))) {
			fixed[a], fixed[b] = true, true
		}
	}
	for len(moves) < budget {
		mv, ok := bestMove(m, load, owner, stores, inFlight, moved, fixed, takes, leaving, s)
		if !ok {
			break
		}
		apply(mv)
	}
	// Then bring small neighbours, and uneven ones that stopped growing,
	// on different stores together: the smaller goes to the larger's
	// store (a small region hardly moves the balance).
	for i := 0; i+1 < len(m.Region) && len(moves) < budget; i++ {
		a, b := m.Region[i].Name, m.Region[i+1].Name
		mergeable := small(a) && small(b) && s.MergeReady[a] && s.MergeReady[b]
		if fixed[a] || fixed[b] || moved[a] || moved[b] || inFlight[a] || inFlight[b] {
			continue
		}
		if !mergeable && uneven(a, b) && s.RecutStore >= 0 {
			// Both onto the re-cutting store, the larger first.
			if !takes(s.RecutStore) || !reachable(owner[a]) || !reachable(owner[b]) {
				continue
			}
			pair := []string{a, b}
			if load[b].Bytes > load[a].Bytes {
				pair = []string{b, a}
			}
			for _, r := range pair {
				if owner[r] != s.RecutStore && len(moves) < budget {
					moves = append(moves, Move{Region: r, From: owner[r], To: s.RecutStore})
					owner[r] = s.RecutStore
				}
				moved[r] = true
			}
			i++
			continue
		}
		if (!mergeable && !uneven(a, b)) || owner[a] == owner[b] {
			continue
		}
		from, to := a, b
		if load[a].Bytes > load[b].Bytes {
			from, to = b, a
		}
		if !reachable(owner[from]) || !takes(owner[to]) {
			continue
		}
		moves = append(moves, Move{Region: from, From: owner[from], To: owner[to]})
		moved[from], moved[to] = true, true
		owner[from] = owner[to]
		i++
	}
	// Last, and only when nothing else moves: count balance, so a new or
	// returning store is filled where bytes and requests are too few to
	// say anything (under the floors), and within the tolerances where
	// they do.
	if len(moves) == 0 {
		stays := func(name string) bool { return inFlight[name] || moved[name] || fixed[name] }
		for len(moves) < budget {
			mv, ok := countMove(m, load, owner, stores, stays, takes, leaving, s)
			if !ok {
				break
			}
			apply(mv)
		}
	}
	return moves
}

// drainOrder are the regions on reachable leaving stores that are not in
// flight, largest first (then by name, so plans are repeatable).
func drainOrder(m Map, load map[string]RegionLoad, owner map[string]int, inFlight map[string]bool, leaving, reachable func(int) bool) []string {
	var out []string
	for _, r := range m.Region {
		if o := owner[r.Name]; leaving(o) && reachable(o) && !inFlight[r.Name] {
			out = append(out, r.Name)
		}
	}
	slices.SortStableFunc(out, func(a, b string) int {
		if la, lb := load[a].Bytes, load[b].Bytes; la != lb {
			if la > lb {
				return -1
			}
			return 1
		}
		return strings.Compare(a, b)
	})
	return out
}

// bestMove is the next move of Plan, by bytes, else by requests per second.
// usable stores give and receive; the means are over the stores that are
// not leaving.
func bestMove(m Map, load map[string]RegionLoad, owner map[string]int, stores []StoreLoad, inFlight, moved, settling map[string]bool,
	usable, leaving func(int) bool, s BalanceSettings) (Move, bool) {
	fixed := func(name string) bool { return inFlight[name] || moved[name] || settling[name] }
	sp, ok := measure(stores, usable, leaving, s)
	if !ok {
		return Move{}, false
	}
	bytesOf := func(o int) float64 { return float64(stores[o].Bytes) }
	qpsOf := func(o int) float64 { return stores[o].QPS }
	if sp.bytesOff {
		return pairMove(m, load, owner, fixed, usable, len(stores), bytesOf,
			func(l RegionLoad) float64 { return float64(l.Bytes) }, nil)
	}
	if !sp.qpsOff {
		return Move{}, false
	}
	// A request-rate move must not push bytes out of tolerance.
	keepsBytes := func(from, to int, l RegionLoad) bool { return sp.keepsBytes(stores, from, to, l) }
	return pairMove(m, load, owner, fixed, usable, len(stores), qpsOf,
		func(l RegionLoad) float64 { return l.QPS }, keepsBytes)
}

// spread is where the stores stand against the means over the staying
// (not leaving) stores: how far from them a store may be, in bytes and in
// requests per second (the tolerance, or the floor when larger), and
// whether a usable store is further.
type spread struct {
	meanBytes, meanQPS     float64
	bytesWithin, qpsWithin float64
	bytesOff, qpsOff       bool
}

// measure is the stores' spread; false when no store stays.
func measure(stores []StoreLoad, usable, leaving func(int) bool, s BalanceSettings) (spread, bool) {
	var totalBytes int64
	var totalQPS float64
	staying := 0
	for o, st := range stores {
		if leaving(o) {
			continue
		}
		staying++
		totalBytes += st.Bytes
		totalQPS += st.QPS
	}
	if staying == 0 {
		return spread{}, false
	}
	sp := spread{meanBytes: float64(totalBytes) / float64(staying), meanQPS: totalQPS / float64(staying)}
	sp.bytesWithin = max(s.Tolerance*sp.meanBytes, float64(s.MinBytes))
	sp.qpsWithin = max(s.Tolerance*sp.meanQPS, s.MinQPS)
	for o, st := range stores {
		if !usable(o) {
			continue
		}
		sp.bytesOff = sp.bytesOff || math.Abs(float64(st.Bytes)-sp.meanBytes) > sp.bytesWithin
		sp.qpsOff = sp.qpsOff || math.Abs(st.QPS-sp.meanQPS) > sp.qpsWithin
	}
	return sp, true
}

// keepsBytes: moving a region with readings l from store from to store to
// leaves both within the bytes' tolerance (or floor) of the mean.
func (sp spread) keepsBytes(stores []StoreLoad, from, to int, l RegionLoad) bool {
	b := float64(l.Bytes)
	return math.Abs(float64(stores[from].Bytes)-b-sp.meanBytes) <= sp.bytesWithin &&
		math.Abs(float64(stores[to].Bytes)+b-sp.meanBytes) <= sp.bytesWithin
}

// keepsQPS is keepsBytes for requests per second.
func (sp spread) keepsQPS(stores []StoreLoad, from, to int, l RegionLoad) bool {
	return math.Abs(stores[from].QPS-l.QPS-sp.meanQPS) <= sp.qpsWithin &&
		math.Abs(stores[to].QPS+l.QPS-sp.meanQPS) <= sp.qpsWithin
}

// countMove is the next move of the count balance (docs/regions.md §4,
// docs/failover.md §5): only when no usable store is out of balance in
// bytes or requests per second, from a usable store holding the most
// regions to the usable one holding the fewest (then the fewest bytes),
// while they differ by more than one, the smallest movable region by
// bytes whose move keeps both stores within the byte and request
// tolerances (or floors). Every such move leaves the byte and request
// passes nothing to do and lowers the sum of squared counts, so count
// moves settle and never fight the other passes.
func countMove(m Map, load map[string]RegionLoad, owner map[string]int, stores []StoreLoad, fixed func(string) bool,
	usable, leaving func(int) bool, s BalanceSettings) (Move, bool) {
	sp, ok := measure(stores, usable, leaving, s)
	if !ok || sp.bytesOff || sp.qpsOff {
		return Move{}, false
	}
	lo := -1
	var givers []int
	for o := range stores {
		if !usable(o) {
			continue
		}
		givers = append(givers, o)
		if lo < 0 || stores[o].Regions < stores[lo].Regions ||
			(stores[o].Regions == stores[lo].Regions && stores[o].Bytes < stores[lo].Bytes) {
			lo = o
		}
	}
	if lo < 0 {
		return Move{}, false
	}
	// The fullest first; a store whose regions all stay (settling, in
	// flight, waiting to merge) gives way to the next.
	slices.SortStableFunc(givers, func(a, b int) int { return stores[b].Regions - stores[a].Regions })
	for _, hi := range givers {
		if stores[hi].Regions-stores[lo].Regions <= 1 {
			break
		}
		best := ""
		for _, r := range m.Region {
			if owner[r.Name] != hi || fixed(r.Name) {
				continue
			}
			l := load[r.Name]
			if !sp.keepsBytes(stores, hi, lo, l) || !sp.keepsQPS(stores, hi, lo, l) {
				continue
			}
			if best == "" || l.Bytes < load[best].Bytes || (l.Bytes == load[best].Bytes && r.Name < best) {
				best = r.Name
			}
		}
		if best != "" {
			return Move{Region: best, From: hi, To: lo}, true
		}
	}
	return Move{}, false
}

// pairMove moves, from the usable store with the most of a measure to the
// one with the least, the movable region whose measure is nearest half
// their gap, if any is strictly between 0 and the gap (so the pair ends
// closer than it began) and allowed.
func pairMove(m Map, load map[string]RegionLoad, owner map[string]int, fixed func(string) bool, usable func(int) bool, n int,
	of func(int) float64, measure func(RegionLoad) float64, allowed func(from, to int, l RegionLoad) bool) (Move, bool) {
	hi, lo := -1, -1
	for o := range n {
		if !usable(o) {
			continue
		}
		if hi < 0 || of(o) > of(hi) {
			hi = o
		}
		if lo < 0 || of(o) < of(lo) {
			lo = o
		}
	}
	if hi < 0 || hi == lo {
		return Move{}, false
	}
	gap := of(hi) - of(lo)
	best, bestDist := "", math.Inf(1)
	for _, r := range m.Region {
		if owner[r.Name] != hi || fixed(r.Name) {
			continue
		}
		l := load[r.Name]
		v := measure(l)
		if v <= 0 || v >= gap || (allowed != nil && !allowed(hi, lo, l)) {
			continue
		}
		if d := math.Abs(v - gap/2); d < bestDist {
			best, bestDist = r.Name, d
		}
	}
	if best == "" {
		return Move{}, false
	}
	return Move{Region: best, From: hi, To: lo}, true
}

// Moved is m with each move's region placed on its new store (Owner set).
// A move of a region not in m fails: the plan was made on another epoch.
// The result is not committed.
func (m Map) Moved(moves []Move) (Map, error) {
	next := m.clone()
	for _, mv := range moves {
		i := slices.IndexFunc(next.Region, func(r Region) bool { return r.Name == mv.Region })
		if i < 0 {
			return Map{}, fmt.Errorf("regionmap: no region %s to move (epoch %d)", mv.Region, m.Epoch)
		}
		if mv.To < 0 {
			return Map{}, fmt.Errorf("regionmap: move of %s to the negative ordinal %d", mv.Region, mv.To)
		}
		to := mv.To
		next.Region[i].Owner = &to
	}
	return next, next.Validate()
}
