package regionmap

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

func TestRecut(t *testing.T) {
	const mib = 1 << 20
	for _, c := range []struct {
		a, b, mean int64
		want       bool
		why        string
	}{
		{90 * mib, 190 * mib, 117 * mib, true, "one far above the mean, the halves (140) closer to it"},
		{100 * mib, 110 * mib, 117 * mib, false, "both within the tolerance"},
		{150 * mib, 160 * mib, 100 * mib, true, "both far above, but the halves (155) are closer than the worse: a step toward the mean"},
		{150 * mib, 154 * mib, 100 * mib, false, "both far above and within a quarter of the tolerance of each other: too little to gain"},
		{130 * mib, 130 * mib, 100 * mib, false, "equal: a re-cut changes nothing"},
		{40 * mib, 100 * mib, 100 * mib, true, "one far below, the halves (70) closer"},
		{2 * mib, 8 * mib, 100 * mib, false, "halves under the merge size: merge candidates, not re-cuts"},
		{90 * mib, 190 * mib, 0, false, "no mean yet"},
	} {
		if got := Recut(c.a, c.b, c.mean, 0.2, 8*mib); got != c.want {
			t.Errorf("Recut(%d, %d, mean %d) = %v, want %v: %s", c.a>>20, c.b>>20, c.mean>>20, got, c.want, c.why)
		}
	}
}

// Regions left anywhere between half the split size and the split size (a
// walking load's end), re-cut pair by pair wherever Recut says so, end
// within the tolerance of their mean, over many random layouts, and every
// re-cut lowers the squared deviation: the process converges.
func TestRecutsEvenRegionsOut(t *testing.T) {
	const tol, goal = 0.2, 0.25
	most, all := 0, 0
	defer func() { t.Logf("re-cuts per layout: at most %d, %.1f on average", most, float64(all)/300) }()
	for seed := range uint64(300) {
		rng := rand.New(rand.NewPCG(seed, 1))
		const split = 180 << 20
		sizes := make([]int64, 12+rng.IntN(12))
		for i := range sizes {
			sizes[i] = split/2 + rng.Int64N(split/2)
		}
		var total int64
		for _, s := range sizes {
			total += s
		}
		mean := total / int64(len(sizes))
		dev := func() float64 {
			var d float64
			for _, s := range sizes {
				d += math.Pow(float64(s-mean), 2)
			}
			return d
		}
		for round := 0; ; round++ {
			if round > 10*len(sizes) {
				t.Fatalf("seed %d: no end after %d re-cuts: %v", seed, round, sizes)
			}
			i := -1
			for j := 0; j+1 < len(sizes); j++ {
				if Recut(sizes[j], sizes[j+1], mean, tol, 0) {
					i = j
					break
				}
			}
			if i < 0 {
				most, all = max(most, round), all+round
				break
			}
			before := dev()
			h := (sizes[i] + sizes[i+1]) / 2
			sizes[i], sizes[i+1] = h, sizes[i]+sizes[i+1]-h
			if dev() >= before {
				t.Fatalf("seed %d: re-cut %d did not lower the deviation", seed, i)
			}
		}
		for _, s := range sizes {
			if d := math.Abs(float64(s-mean)) / float64(mean); d > goal {
				t.Fatalf("seed %d: settled with a region %.0f%% off the mean: %v (MiB: %v)", seed, 100*d, sizes, mibs(sizes))
			}
		}
	}
}

func mibs(s []int64) string {
	out := ""
	for _, v := range s {
		out += fmt.Sprintf(" %d", v>>20)
	}
	return out
}
