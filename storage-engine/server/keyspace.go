package server

import (
	"bytes"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/bellows-kv/bellows/internal/contract"
	"github.com/bellows-kv/bellows/storage-engine/regionmap"
)

// Span is one region's key range [Start, End); a nil End is unbounded.
type Span struct {
	Name       string
	Start, End []byte
	// Slot is the index of the initial region the region descends from:
	// the store with ordinal Slot mod N serves it (regionmap.Region.Slot).
	Slot int
	// Owner is the ordinal the balancer placed the region on, nil: the
	// slot rule (regionmap.Region.Owner, OwnerOf).
	Owner *int
	// Parents, for a region made by a split (one) or a merge (two, in key
	// order), are what it derives its first manifest from
	// (region.Options.DeriveFrom).
	Parents []regionmap.Parent
}

// SpansOf are the regions of m as spans, in key order.
func SpansOf(m regionmap.Map) []Span {
	out := make([]Span, len(m.Region))
	for i, r := range m.Region {
		out[i] = Span{Name: r.Name, Start: r.Start, End: r.End, Slot: r.Slot, Owner: r.Owner, Parents: r.Parents}
	}
	return out
}

// InitialMap is the region map of a new cluster whose regions are spans
// (--regions, --split-keys): the same names and slots.
func InitialMap(spans []Span) (regionmap.Map, error) {
	var bounds [][]byte
	for _, sp := range spans[1:] {
		bounds = append(bounds, sp.Start)
	}
	return regionmap.Initial(bounds)
}

// OwnerOf is the ordinal of the store serving the span among n stores
// (regionmap.Region.OwnerOf).
func (s Span) OwnerOf(n int) int {
	return regionmap.Region{Slot: s.Slot, Owner: s.Owner}.OwnerOf(n)
}

// Contains reports whether key falls in the span.
func (s Span) Contains(key []byte) bool {
	return bytes.Compare(key, s.Start) >= 0 && (s.End == nil || bytes.Compare(key, s.End) < 0)
}

// SplitEvenly divides the key space into n regions by first byte (--regions
// N): region i starts at byte ⌊256·i/n⌋.
func SplitEvenly(n int) ([]Span, error) {
	if n < 1 || n > contract.MaxRegionCount {
		return nil, fmt.Errorf("--regions %d: want 1 to %d (regions split the key space by first byte)", n, contract.MaxRegionCount)
	}
	var bounds [][]byte
	for i := 1; i < n; i++ {
		bounds = append(bounds, []byte{byte(256 * i / n)})
	}
	return spans(bounds), nil
}

// SplitAt divides the key space at the given keys (--split-keys a,b,c gives
// four regions). Keys must be strictly ascending and non-empty.
func SplitAt(keys []string) ([]Span, error) {
	var bounds [][]byte
	for i, k := range keys {
		if k == "" {
			return nil, fmt.Errorf("--split-keys: key %d is empty", i+1)
		}
		if i > 0 && k <= keys[i-1] {
			return nil, fmt.Errorf("--split-keys: %q does not sort after %q; split keys must be strictly ascending", k, keys[i-1])
		}
		bounds = append(bounds, []byte(k))
	}
	return spans(bounds), nil
}

func spans(bounds [][]byte) []Span {
	out := make([]Span, 0, len(bounds)+1)
	var start []byte
	for i := 0; i <= len(bounds); i++ {
		s := Span{Name: regionmap.Name(uint64(i)), Start: start, Slot: i}
		if i < len(bounds) {
			s.End = bounds[i]
			start = bounds[i]
		}
		if s.Start == nil {
			s.Start = []byte{}
		}
		out = append(out, s)
	}
	return out
}

// Owner is --region-owner ORDINAL/REPLICAS: the store serves the regions
// the balancer placed on Ordinal, and the others of slot i when i mod
// Replicas = Ordinal (the operator's status.regionAssignment); a split
// keeps its region's slot and owner.
type Owner struct{ Ordinal, Replicas int }

// ParseOwner parses ORDINAL/REPLICAS; empty means 0/1 (every region).
func ParseOwner(s string) (Owner, error) {
	if s == "" {
		return Owner{0, 1}, nil
	}
	a, b, ok := strings.Cut(s, "/")
	o, err1 := strconv.Atoi(a)
	n, err2 := strconv.Atoi(b)
	if !ok || err1 != nil || err2 != nil || n < 1 || o < 0 || o >= n {
		return Owner{}, fmt.Errorf("--region-owner %q: want ORDINAL/REPLICAS with 0 ≤ ORDINAL < REPLICAS, e.g. 0/3", s)
	}
	return Owner{o, n}, nil
}

// Owned filters spans to this owner's.
func (o Owner) Owned(all []Span) []Span {
	return slices.DeleteFunc(slices.Clone(all), func(s Span) bool { return !o.Owns(s) })
}

// Owns reports whether this owner serves s.
func (o Owner) Owns(s Span) bool { return s.OwnerOf(o.Replicas) == o.Ordinal }
