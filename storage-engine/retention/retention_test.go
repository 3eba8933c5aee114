package retention

import (
	"math"
	"slices"
	"testing"
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
		{"keep all", []uint64{9, 5, 3}, 0, nil, math.MaxUint64, []bool{true, true, true}},
		{"newest only", []uint64{9, 5, 3}, 1, nil, math.MaxUint64, []bool{true, false, false}},
		{"snapshot pins the version it reads", []uint64{9, 5, 3}, 1, []uint64{4}, math.MaxUint64, []bool{true, false, true}},
		{"snapshot between versions", []uint64{9, 5, 3}, 1, []uint64{8, 6}, math.MaxUint64, []bool{true, true, false}},
		{"snapshot older than every version", []uint64{9, 5}, 1, []uint64{2}, math.MaxUint64, []bool{true, false}},
		{"above the horizon all kept, and what the horizon reads", []uint64{9, 7, 5, 3}, 1, []uint64{6}, 6, []bool{true, true, true, false}},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := Mark(nil, c.tss, c.max, c.snaps, c.horizon); !slices.Equal(got, c.want) {
				t.Fatalf("Mark(%v, max %d, snaps %v, horizon %d) = %v, want %v", c.tss, c.max, c.snaps, c.horizon, got, c.want)
			}
		})
	}
}
