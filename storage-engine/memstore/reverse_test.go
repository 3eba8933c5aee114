package memstore

import (
	"math/rand/v2"
	"testing"

	"github.com/bellows-kv/bellows/storage-engine/iterator/itertest"
)

// Both segment kinds move backwards as they move forwards: the skiplist by
// searching for each predecessor, the flat segment by index.
func TestSegmentsIterateBothWays(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for _, n := range []int{0, 1, 2, 5, 3000} {
		s := randomSkiplist(rng, n)
		var want []itertest.Entry
		for _, p := range collect(t, s.NewIterator()) {
			want = append(want, itertest.Entry{Key: p.key, Value: p.value})
		}
		itertest.Check(t, s.NewIterator(), want, rng)
		itertest.Check(t, flatten(s).NewIterator(), want, rng)
	}
}
