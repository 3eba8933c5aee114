package engine

import (
	"hash/fnv"
	"math"
	"math/rand/v2"
)

// Zipf is YCSB's scrambled Zipfian generator (Gray et al., "Quickly
// generating billion-record synthetic databases"): item popularity follows
// Zipf(θ) and the hot items are spread over the key space by hashing.
// math/rand's Zipf needs s > 1, while YCSB's default θ is 0.99.
type Zipf struct {
	n                 uint64
	theta, alpha, eta float64
	zetan, zeta2theta float64
	rng               *rand.Rand
}

// NewZipf returns a generator over [0, n).
func NewZipf(rng *rand.Rand, n uint64, theta float64) *Zipf {
	z := &Zipf{n: n, theta: theta, rng: rng}
	z.zeta2theta = zeta(2, theta)
	z.zetan = zeta(n, theta)
	z.alpha = 1 / (1 - theta)
	z.eta = (1 - math.Pow(2/float64(n), 1-theta)) / (1 - z.zeta2theta/z.zetan)
	return z
}

func zeta(n uint64, theta float64) float64 {
	var s float64
	for i := uint64(1); i <= n; i++ {
		s += 1 / math.Pow(float64(i), theta)
	}
	return s
}

// Next returns the next item.
func (z *Zipf) Next() uint64 {
	u := z.rng.Float64()
	uz := u * z.zetan
	var rank uint64
	switch {
	case uz < 1:
		rank = 0
	case uz < 1+math.Pow(0.5, z.theta):
		rank = 1
	default:
		rank = uint64(float64(z.n) * math.Pow(z.eta*u-z.eta+1, z.alpha))
	}
	h := fnv.New64a()
	var b [8]byte
	for i := range b {
		b[i] = byte(rank >> (8 * i))
	}
	h.Write(b[:])
	return h.Sum64() % z.n
}
