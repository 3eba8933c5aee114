package server

import (
	"bytes"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/bellows-kv/bellows/internal/contract"
)

// Span is one region's key range [Start, End); a nil End is unbounded.
type Span struct {
	Name       string
	Start, End []byte
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
		s := Span{Name: fmt.Sprintf("region-%03d", i), Start: start}
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

// Owner is --region-owner ORDINAL/REPLICAS: the store serves region i when
// i mod Replicas = Ordinal (the operator's status.regionAssignment).
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
	return slices.DeleteFunc(slices.Clone(all), func(s Span) bool {
		i := slices.IndexFunc(all, func(x Span) bool { return x.Name == s.Name })
		return i%o.Replicas != o.Ordinal
	})
}
