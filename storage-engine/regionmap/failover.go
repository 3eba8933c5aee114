package regionmap

// The balancer's failover (docs/failover.md §5), a pure function of the map:
// every region a dead store serves goes to a live store that is not
// leaving, the one with the fewest regions, then the fewest bytes, so the
// dead store's regions spread over the survivors instead of doubling one.

import (
	"slices"
	"strings"
)

// Failover is m with every region served by a dead store (by OwnerOf in a
// cluster of stores, so also a region whose slot fallback lands on a dead
// store) placed on a live store that is not leaving, and the moves that
// does. The regions go largest first, each to the live store that holds
// the fewest regions at that point, then the fewest bytes, then the lowest
// ordinal: so every store that receives one ends at most one region above
// the least-loaded live store. Each moved region gets an explicit Owner.
// With no live store to take them, m is returned unchanged and no moves.
// The result is not committed; regions of live stores keep their owner.
func Failover(m Map, dead []int, stores int, leaving func(int) bool, load map[string]RegionLoad) (Map, []Move) {
	isDead := func(o int) bool { return slices.Contains(dead, o) }
	var live []int
	for o := range max(stores, 0) {
		if !isDead(o) && (leaving == nil || !leaving(o)) {
			live = append(live, o)
		}
	}
	if len(live) == 0 {
		return m, nil
	}
	var orphans []int // indexes into m.Region
	for i, r := range m.Region {
		if isDead(r.OwnerOf(stores)) {
			orphans = append(orphans, i)
		}
	}
	if len(orphans) == 0 {
		return m, nil
	}
	slices.SortStableFunc(orphans, func(a, b int) int {
		if la, lb := load[m.Region[a].Name].Bytes, load[m.Region[b].Name].Bytes; la != lb {
			if la > lb {
				return -1
			}
			return 1
		}
		return strings.Compare(m.Region[a].Name, m.Region[b].Name)
	})
	held := Loads(m, load, stores)
	next := m.clone()
	var moves []Move
	for _, i := range orphans {
		to := live[0]
		for _, o := range live[1:] {
			if held[o].Regions < held[to].Regions || (held[o].Regions == held[to].Regions && held[o].Bytes < held[to].Bytes) {
				to = o
			}
		}
		r := m.Region[i]
		from := r.OwnerOf(stores)
		l := load[r.Name]
		held[from].Regions--
		held[from].Bytes -= l.Bytes
		held[to].Regions++
		held[to].Bytes += l.Bytes
		owner := to
		next.Region[i].Owner = &owner
		moves = append(moves, Move{Region: r.Name, From: from, To: to})
	}
	return next, moves
}
