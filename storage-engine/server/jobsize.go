package server

import (
	"github.com/bellows-kv/bellows/storage-engine/compaction"
	"github.com/bellows-kv/bellows/storage-engine/region"
)

// JobInputBytes sizes a compaction job from its region's manifest, without
// bucket calls (the offload queue's pending-bytes metric). 0 when the store
// is not open yet or the region is not this store's.
func (s *Store) JobInputBytes(j compaction.Job) int64 {
	if s == nil {
		return 0
	}
	r := s.ByName(j.Region)
	if r == nil {
		return 0
	}
	e, err := r.Engine()
	if err != nil {
		return 0
	}
	sizes := map[string]int64{}
	for _, f := range e.Manifest().Files {
		sizes[region.ObjectKey(j.Region, f.Key)] = f.Size
	}
	var n int64
	for _, in := range j.Inputs {
		n += sizes[in]
	}
	return n
}

// RegionNames lists the regions this store serves; nil when the store is
// not open yet.
func (s *Store) RegionNames() []string {
	if s == nil {
		return nil
	}
	var names []string
	for _, a := range s.Assignments() {
		names = append(names, a.Name())
	}
	return names
}

// PlacementRegions is the set offload placement balances over the workers
// (offload.BalancedOrder): every region of the cluster per the newest
// region map this store knows, so that every store of the cluster computes
// the same assignment and the cluster's regions spread over the pool, each
// worker the first choice of ⌊R/C⌋ or ⌈R/C⌉ of them. A store balancing
// only its own regions cannot see its peers': with fewer regions than
// workers, their first choices pile up on some workers while others idle.
// Without a map (fixed regions), the regions this store serves.
func (s *Store) PlacementRegions() []string {
	m, ok := s.RegionMap()
	if !ok || len(m.Region) == 0 {
		return s.RegionNames()
	}
	names := make([]string, len(m.Region))
	for i, r := range m.Region {
		names[i] = r.Name
	}
	return names
}
