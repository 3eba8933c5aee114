package retention

import (
	"math"
	"slices"
	"testing"
	"time"
)

func TestMark(t *testing.T) {
	for _, c := range []struct {
		name    string
		tss     []uint64
		max     int
		snaps   []uint64
		horizon uint64
		want    []bool
	}{
		{"horizon 0 judges nothing", []uint64{9, 5, 3}, 0, nil, 0, []bool{true, true, true}},
		{"horizon 0 with a count bound judges nothing", []uint64{9, 5, 3}, 1, nil, 0, []bool{true, true, true}},
		{"newest only", []uint64{9, 5, 3}, 1, nil, math.MaxUint64, []bool{true, false, false}},
		{"two newest", []uint64{9, 5, 3}, 2, nil, math.MaxUint64, []bool{true, true, false}},
		{"no count bound, all judged: the newest", []uint64{9, 5, 3}, 0, nil, math.MaxUint64, []bool{true, false, false}},
		{"snapshot pins the version it reads", []uint64{9, 5, 3}, 1, []uint64{4}, math.MaxUint64, []bool{true, false, true}},
		{"snapshot between versions", []uint64{9, 5, 3}, 1, []uint64{8, 6}, math.MaxUint64, []bool{true, true, false}},
		{"snapshot older than every version", []uint64{9, 5}, 1, []uint64{2}, math.MaxUint64, []bool{true, false}},
		{"snapshot above every version", []uint64{9, 5}, 0, []uint64{12}, math.MaxUint64, []bool{true, false}},
		{"above the horizon all kept, and what the horizon reads", []uint64{9, 7, 5, 3}, 1, []uint64{6}, 6, []bool{true, true, true, false}},
		// The GC window (maxVersions 0): versions superseded at or
		// below the horizon are garbage, the rest stay.
		{"window: above kept, newest at or below kept, older dropped", []uint64{9, 7, 5, 3, 1}, 0, nil, 6, []bool{true, true, true, false, false}},
		{"window: horizon on a version", []uint64{9, 7, 5, 3}, 0, nil, 7, []bool{true, true, false, false}},
		{"window: every version above the horizon", []uint64{9, 7}, 0, nil, 6, []bool{true, true}},
		{"window: every version at or below: the newest", []uint64{5, 3, 1}, 0, nil, 6, []bool{true, false, false}},
		{"window: a snapshot below the horizon keeps its version", []uint64{9, 5, 3, 1}, 0, []uint64{2}, 6, []bool{true, true, false, true}},
		{"window: a snapshot above the horizon adds nothing", []uint64{9, 5, 3}, 0, []uint64{8}, 6, []bool{true, true, false}},
		{"window: count bound keeps more below the horizon", []uint64{9, 5, 3, 1}, 3, nil, 6, []bool{true, true, true, false}},
		{"single version", []uint64{4}, 0, nil, math.MaxUint64, []bool{true}},
		{"no versions", nil, 0, []uint64{3}, 6, []bool{}},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := Mark(nil, c.tss, c.max, c.snaps, c.horizon); !slices.Equal(got, c.want) {
				t.Fatalf("Mark(%v, max %d, snaps %v, horizon %d) = %v, want %v", c.tss, c.max, c.snaps, c.horizon, got, c.want)
			}
		})
	}
}

// TestMarkReadsUnchanged checks the rule's promise on every small case: a
// read at any timestamp at or above the horizon, or at a snapshot, sees the
// same version after Mark as before.
func TestMarkReadsUnchanged(t *testing.T) {
	read := func(tss []uint64, keep []bool, at uint64) int {
		for i, ts := range tss {
			if ts <= at && (keep == nil || keep[i]) {
				return int(ts)
			}
		}
		return -1
	}
	for n := 0; n <= 4; n++ {
		// Versions at 2, 4, ..., 2n, newest first.
		var tss []uint64
		for i := n; i >= 1; i-- {
			tss = append(tss, uint64(2*i))
		}
		for horizon := uint64(0); horizon <= uint64(2*n+2); horizon++ {
			for _, max := range []int{0, 1, 2} {
				for _, snaps := range [][]uint64{nil, {1}, {3}, {2*uint64(n) + 1, 3}} {
					keep := Mark(nil, tss, max, snaps, horizon)
					kept := 0
					for _, k := range keep {
						if k {
							kept++
						}
					}
					reads := append([]uint64{}, snaps...)
					for at := horizon; at <= uint64(2*n+2); at++ {
						reads = append(reads, at)
					}
					for _, at := range reads {
						if got, want := read(tss, keep, at), read(tss, nil, at); got != want {
							t.Fatalf("versions %v, max %d, snaps %v, horizon %d: a read at %d sees %d after Mark, %d before", tss, max, snaps, horizon, at, got, want)
						}
					}
					if max == 0 && kept > len(snaps)+1+int(countAbove(tss, horizon)) {
						t.Fatalf("versions %v, snaps %v, horizon %d: kept %d, more than the rule needs", tss, snaps, horizon, kept)
					}
				}
			}
		}
	}
}

func countAbove(tss []uint64, h uint64) uint64 {
	n := uint64(0)
	for _, ts := range tss {
		if ts > h {
			n++
		}
	}
	return n
}

func TestHorizon(t *testing.T) {
	const s = uint64(time.Second)
	for _, c := range []struct {
		name         string
		visible, now uint64
		maxVersions  int
		ttl          time.Duration
		want         uint64
	}{
		{"keep every version", 100 * s, 100 * s, 0, 0, 0},
		{"negative window keeps every version", 100 * s, 100 * s, 0, -time.Second, 0},
		{"count bound judges every visible version", 100 * s, 200 * s, 1, 10 * time.Second, 100 * s},
		{"window: now minus the TTL", 100 * s, 100 * s, 0, 10 * time.Second, 90 * s},
		{"window never above the visible timestamp", 50 * s, 100 * s, 0, 10 * time.Second, 50 * s},
		{"clock younger than the window", 5 * s, 5 * s, 0, 10 * time.Second, 0},
		{"clock exactly the window", 10 * s, 10 * s, 0, 10 * time.Second, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := Horizon(c.visible, c.now, c.maxVersions, c.ttl); got != c.want {
				t.Fatalf("Horizon(visible %d, now %d, maxVersions %d, ttl %v) = %d, want %d", c.visible, c.now, c.maxVersions, c.ttl, got, c.want)
			}
		})
	}
}
