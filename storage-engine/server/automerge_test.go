package server

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

func TestMergePairs(t *testing.T) {
	r := func(name, start, end string, bytes int64, qps float64) mergeReading {
		var e []byte
		if end != "" {
			e = []byte(end)
		}
		return mergeReading{name: name, start: []byte(start), end: e, bytes: bytes, qps: qps}
	}
	l := mergeLimits{maxBytes: 100, maxPairBytes: 150, maxQPS: 10}
	for _, c := range []struct {
		name string
		rs   []mergeReading
		want [][2]string
	}{
		{"two small neighbours", []mergeReading{r("a", "", "m", 10, 0), r("b", "m", "", 20, 0)}, [][2]string{{"a", "b"}}},
		{"not adjacent (a region between on another store)", []mergeReading{r("a", "", "g", 10, 0), r("c", "m", "", 20, 0)}, nil},
		{"one too large", []mergeReading{r("a", "", "m", 100, 0), r("b", "m", "", 20, 0)}, nil},
		{"the pair too large together", []mergeReading{r("a", "", "m", 90, 0), r("b", "m", "", 70, 0)}, nil},
		{"one too hot", []mergeReading{r("a", "", "m", 10, 10), r("b", "m", "", 20, 0)}, nil},
		{"a region merges with one neighbour per pass", []mergeReading{r("a", "", "g", 10, 0), r("b", "g", "m", 10, 0), r("c", "m", "t", 10, 0), r("d", "t", "", 10, 0)},
			[][2]string{{"a", "b"}, {"c", "d"}}},
		{"the last region is unbounded", []mergeReading{r("a", "", "m", 10, 0), r("b", "m", "", 10, 0), r("c", "zz", "", 10, 0)}, [][2]string{{"a", "b"}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := mergePairs(c.rs, l); !slices.Equal(got, c.want) {
				t.Fatalf("mergePairs = %v, want %v", got, c.want)
			}
		})
	}
	if got := mergePairs([]mergeReading{r("a", "", "m", 10, 500), r("b", "m", "", 20, 0)}, mergeLimits{maxBytes: 100}); len(got) != 1 {
		t.Fatalf("without a load bound, load is not looked at: %v", got)
	}
}

// A store whose regions are small merges them by itself, one pair per
// pass once each pair stayed small for MergeAfter, down to one region that
// serves every acknowledged write.
func TestStoreMergesSmallRegionsByItself(t *testing.T) {
	c := newMapCluster(t)
	c.splitKeys = []string{"user000250", "user000500", "user000750"}
	c.mergeBytes, c.mergeAfter = 1<<30, 50*time.Millisecond
	s := c.open(t, 0)
	kv := NewKV(s, nil, nil)
	// Merges may begin while the keys are written (MergeAfter is short,
	// and a loaded machine writes slowly): a put that meets a region
	// merging is refused as a stale route, and retried as a client would.
	acked := putRetrying(t, kv, 0, 1000, "v")
	// The merge is counted just after the assignment changes.
	waitUntil(t, "the store's merges down to one region, counted", func() bool { return len(s.Assignments()) == 1 && s.Merges() >= 3 })
	if s.Merges() != 3 {
		t.Fatalf("%d merges, want 3 (4 regions into 1)", s.Merges())
	}
	checkKeys(t, kv, acked)
	if got := mapRegions(t, c); got != fmt.Sprint(regionNames(s)) {
		t.Fatalf("the map names %s, the store serves %v", got, regionNames(s))
	}
}
