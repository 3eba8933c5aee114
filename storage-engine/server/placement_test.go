package server

import (
	"slices"
	"testing"
)

// Offload placement balances a store's jobs over the cluster's regions,
// not only its own: a store that serves one of three regions still places
// over all three, so every store of the cluster computes the same
// assignment (offload's TestPlacementOverTheClustersRegionsBalancesThePool
// shows what that does for a pool).
func TestPlacementBalancesOverTheClustersRegions(t *testing.T) {
	c := newMapCluster(t)
	c.splitKeys = []string{"k1", "k2"}
	c.only = 1
	s := c.open(t, 0)
	if own := s.RegionNames(); len(own) != 1 {
		t.Fatalf("the store serves %v, want one region", own)
	}
	m, _ := s.RegionMap()
	var all []string
	for _, r := range m.Region {
		all = append(all, r.Name)
	}
	if got := s.PlacementRegions(); !slices.Equal(got, all) || len(got) != 3 {
		t.Fatalf("placement balances over %v, want the map's three regions %v", got, all)
	}
}
