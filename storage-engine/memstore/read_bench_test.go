package memstore

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/bellows-kv/bellows/storage-engine/kv"
)

// BenchmarkGet measures the in-memory cost of a point read under each
// policy, with the memstore filled to one flush's worth of 16 B keys and
// 100 B values written in the paper's shape (uniform keys, one writer),
// so the pipeline is as long as the policy leaves it just before a disk
// flush. Misses read every segment: they are what a read that goes on
// to the SSTs pays in the memstore.
func BenchmarkGet(b *testing.B) {
	const flushBytes = 64 << 20
	const keys = 2_000_000
	key := func(i uint64) []byte {
		k := make([]byte, 16)
		binary.BigEndian.PutUint64(k, i*0x9E3779B97F4A7C15)
		binary.BigEndian.PutUint64(k[8:], i)
		return k
	}
	val := make([]byte, 100)
	for _, p := range []Policy{None, Basic, Eager} {
		m, err := New(Config{Policy: p, FlushBytes: flushBytes, ActiveFraction: 0.02, PipelineSegments: 5, RedundancyThreshold: 0.5})
		if err != nil {
			b.Fatal(err)
		}
		rng := rand.New(rand.NewPCG(1, 2))
		var ts uint64
		written := map[uint64]bool{}
		for m.View().ApproximateBytes() < flushBytes*9/10 {
			ts++
			i := rng.Uint64N(keys)
			written[i] = true
			a := m.Active()
			a.BeginWrite()
			a.Add(kv.InternalKey{UserKey: key(i), TS: ts, Kind: kv.KindSet}, val)
			a.EndWrite()
			if m.NeedsInMemoryFlush() && m.PushActive() {
				m.FlushInMemory(Retention{MaxVersions: 1, Horizon: ts})
			}
		}
		v := m.View()
		b.Run(fmt.Sprintf("policy=%s/segments=%d/scan20", p, v.Segments()+1), func(b *testing.B) {
			rng := rand.New(rand.NewPCG(3, 4))
			for b.Loop() {
				it := v.NewIterator()
				it.SeekGE(kv.MakeSearchKey(key(rng.Uint64N(keys)), ts))
				for j := 0; j < 20 && it.Valid(); j++ {
					it.Next()
				}
				it.Close()
			}
		})
		// The same 20 versions backwards: each skiplist step is a search.
		b.Run(fmt.Sprintf("policy=%s/segments=%d/scan20-reverse", p, v.Segments()+1), func(b *testing.B) {
			rng := rand.New(rand.NewPCG(3, 4))
			for b.Loop() {
				it := v.NewIterator()
				it.SeekLT(kv.MakeSearchKey(key(rng.Uint64N(keys)), ts))
				for j := 0; j < 20 && it.Valid(); j++ {
					it.Prev()
				}
				it.Close()
			}
		})
		for _, hit := range []bool{true, false} {
			b.Run(fmt.Sprintf("policy=%s/segments=%d/hit=%v", p, v.Segments()+1, hit), func(b *testing.B) {
				rng := rand.New(rand.NewPCG(3, 4))
				for b.Loop() {
					i := rng.Uint64N(keys)
					for written[i] != hit {
						i = rng.Uint64N(keys)
					}
					v.Get(key(i), ts)
				}
			})
		}
	}
}
