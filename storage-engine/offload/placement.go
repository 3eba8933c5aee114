package offload

import (
	"hash/fnv"
	"slices"
	"strings"
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
		h := fnv.New64a()
		h.Write([]byte(region))
		h.Write([]byte{0})
		h.Write([]byte(w))
		s = append(s, scored{w, mix(h.Sum64())})
	}
	slices.SortFunc(s, func(a, b scored) int {
		if a.score != b.score {
			if a.score > b.score {
				return -1
			}
			return 1
		}
		return strings.Compare(a.addr, b.addr)
	})
	out := make([]string, len(s))
	for i, x := range s {
		out[i] = x.addr
	}
	return out
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
