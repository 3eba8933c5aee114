package phases

import (
	"math/rand/v2"
	"slices"
)

// interval is the mean of runs' values and its 95% bootstrap interval.
type interval struct {
	Mean, Lo, Hi float64
	N            int
}

// bootstrapResamples is enough for the 2.5th and 97.5th percentiles of the
// resampled means to settle to well under the runs' own spread.
const bootstrapResamples = 10000

// bootstrapMean resamples xs with replacement and takes the 2.5th and
// 97.5th percentiles of the resamples' means (the percentile bootstrap).
// The seed is fixed: the same runs give the same interval.
func bootstrapMean(xs []float64) interval {
	n := len(xs)
	if n == 0 {
		return interval{}
	}
	iv := interval{Mean: mean(xs), N: n}
	rng := rand.New(rand.NewPCG(1, 2))
	means := make([]float64, bootstrapResamples)
	for i := range means {
		var sum float64
		for range n {
			sum += xs[rng.IntN(n)]
		}
		means[i] = sum / float64(n)
	}
	slices.Sort(means)
	iv.Lo = means[int(0.025*float64(len(means)))]
	iv.Hi = means[int(0.975*float64(len(means)))-1]
	return iv
}

func mean(xs []float64) float64 {
	var s float64
	for _, x := range xs {
		s += x
	}
	return s / float64(len(xs))
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(xs))
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
