package sstable

import (
	"bytes"
	"math/rand/v2"
	"testing"

	"github.com/bellows-kv/bellows/storage-engine/kv"
)

// A streaming iterator (a compaction's) reads every version in order and
// decodes each block into one buffer of its own: a pass over the file
// allocates a few buffers, not one per block as a cache-less NewIter does.
func TestStreamingIterReadsEveryVersionIntoOneBuffer(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	vs := randomVersions(rng, 5000)
	for _, c := range []Compression{NoCompression, S2Compression} {
		data := buildTable(t, vs, WriterOptions{BlockSize: 1024, Compression: c})
		r := openTable(t, data, nil)
		if r.NumBlocks() < 50 {
			t.Fatalf("%v: %d blocks; the test needs many", c, r.NumBlocks())
		}
		it := r.NewStreamingIter()
		i := 0
		for ok := it.First(); ok; ok = it.Next() {
			if kv.Compare(it.Key(), vs[i].key) != 0 || !bytes.Equal(it.Value(), vs[i].val) {
				t.Fatalf("%v: entry %d: got %v=%q want %v=%q", c, i, it.Key(), it.Value(), vs[i].key, vs[i].val)
			}
			i++
		}
		if it.Err() != nil || i != len(vs) {
			t.Fatalf("%v: iterated %d of %d, err %v", c, i, len(vs), it.Err())
		}
		pass := func(it interface {
			First() bool
			Next() bool
		}) func() {
			return func() {
				for ok := it.First(); ok; ok = it.Next() {
				}
			}
		}
		streaming := testing.AllocsPerRun(5, pass(it))
		perBlock := testing.AllocsPerRun(5, pass(r.NewIter()))
		if streaming > 4 || perBlock < float64(r.NumBlocks()) {
			t.Fatalf("%v: a pass over %d blocks allocated %.0f times streaming, %.0f times with NewIter; want a few and at least one per block",
				c, r.NumBlocks(), streaming, perBlock)
		}
	}
}
