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

// RegionNames lists the regions this store serves, the set offload placement
// balances over the workers; nil when the store is not open yet.
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
