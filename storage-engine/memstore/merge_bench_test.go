package memstore

import (
	"encoding/binary"
	"math/rand/v2"
	"testing"

	"github.com/bits-and-blooms/bloom/v3"

	"github.com/bellows-kv/bellows/storage-engine/kv"
)

// BenchmarkMergeIndexes is Basic's in-memory merge late in a memstore's
// life: the previous merge's output (300,000 versions of uniform 16 B keys
// with 100 B values) and five newly flattened segments of 8,000 versions
// each, merged into one index, with the memstore's key filter (made before
// the clock starts, as the memstore adds to it at each flatten). It reports
// the merge's cost per output version.
func BenchmarkMergeIndexes(b *testing.B) {
	var keys *bloom.BloomFilter
	benchMerge(b, func(in []*flat) {
		if keys == nil {
			keys = bloom.NewWithEstimates(600000, keyFilterFalsePositive)
			for _, f := range in {
				f.addKeysTo(keys)
			}
		}
		mergeFlat(in, nil, keys)
	})
}

func benchMerge(b *testing.B, merge func([]*flat)) {
	rng := rand.New(rand.NewPCG(5, 6))
	val := make([]byte, 100)
	var ts uint64
	segment := func(n int) *flat {
		s := NewSkiplist()
		for range n {
			ts++
			k := make([]byte, 16)
			binary.BigEndian.PutUint64(k, rng.Uint64())
			binary.BigEndian.PutUint64(k[8:], ts)
			s.Add(kv.InternalKey{UserKey: k, TS: ts, Kind: kv.KindSet}, val)
		}
		return flatten(s)
	}
	var olds []*flat
	for range 10 {
		olds = append(olds, segment(30000))
	}
	old, _ := mergeFlat(olds, nil, nil)
	inputs := []*flat{segment(8000), segment(8000), segment(8000), segment(8000), segment(8000), old}
	total := 0
	for _, f := range inputs {
		total += len(f.entries)
	}
	b.ResetTimer()
	for b.Loop() {
		merge(inputs)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(total), "ns/version")
}

// BenchmarkMergeOrder is the ordering part of BenchmarkMergeIndexes alone,
// two ways: mergeCursor (the largest input's next entry against the least
// of the others', which changes only when one of them advances) and a
// linear scan of every input's next entry per version, the textbook k-way
// merge for few inputs. Both walk the same six inputs to the end.
func BenchmarkMergeOrder(b *testing.B) {
	b.Run("cursor", func(b *testing.B) {
		benchMerge(b, func(in []*flat) {
			c := newMergeCursor(in, true)
			for {
				if i, _ := c.next(); i < 0 {
					return
				}
			}
		})
	})
	b.Run("linear", func(b *testing.B) {
		pos := make([]int, 6)
		benchMerge(b, func(in []*flat) {
			clear(pos)
			for {
				best := -1
				for i, s := range in {
					if pos[i] == len(s.entries) {
						continue
					}
					if best < 0 || lessEntry(s, &s.entries[pos[i]], in[best], &in[best].entries[pos[best]], true) {
						best = i
					}
				}
				if best < 0 {
					return
				}
				pos[best]++
			}
		})
	})
}
