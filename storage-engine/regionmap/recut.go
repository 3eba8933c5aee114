package regionmap

import "math"

// Evening region sizes out (docs/regions.md, "Evening sizes out").
//
// Binary splits by size leave every region between half the split size and
// the split size, and where a region ends in that range depends on when the
// writes moved on from it: a load that walks the key space leaves regions
// anywhere in [S/2, S], ±33% around their mean. Two adjacent regions that
// stopped growing, one of them far from the cluster's mean region size,
// are re-cut: merged, and split again at the key that halves their bytes,
// so each holds (a+b)/2. A re-cut keeps the region count and the cluster's
// bytes, so the mean it is judged against stays put, and each one lowers
// the sum of the squared deviations from it: re-cuts converge.

// Recut reports whether adjacent regions of a and b bytes should be re-cut
// into two of (a+b)/2 against the mean region size mean: one of them is
// off the mean by more than tolerance × mean, they differ by more than a
// quarter of that (a re-cut of two near-equal regions would move little
// for a merge and a split; a bound as large as the tolerance would leave
// runs of large neighbours that each differ by less, never re-cut), the
// halves would be closer to the mean than the
// worse of the two, and each half holds at least minBytes (smaller, they
// would be merge candidates, and a re-cut would be undone).
func Recut(a, b, mean int64, tolerance float64, minBytes int64) bool {
	if mean <= 0 || tolerance <= 0 || a < 0 || b < 0 {
		return false
	}
	m := float64(mean)
	worst := math.Max(math.Abs(float64(a)-m), math.Abs(float64(b)-m))
	half := float64(a+b) / 2
	return worst > tolerance*m && math.Abs(float64(a-b)) > tolerance/4*m &&
		math.Abs(half-m) < worst && half >= float64(minBytes)
}

// MeanRegionBytes is the mean size of m's regions that have a reading in
// load (0 with none).
func MeanRegionBytes(m Map, load map[string]RegionLoad) int64 {
	var sum int64
	n := 0
	for _, r := range m.Region {
		if l, ok := load[r.Name]; ok {
			sum += l.Bytes
			n++
		}
	}
	if n == 0 {
		return 0
	}
	return sum / int64(n)
}
