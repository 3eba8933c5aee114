package sstable

import (
	"bytes"
	"math/rand/v2"
	"testing"

	"github.com/bellows-kv/bellows/storage-engine/blockcache"
	"github.com/bellows-kv/bellows/storage-engine/iterator/itertest"
)

// An SST moves backwards through its blocks by the index and within a block
// through restart intervals: every block size (one entry per block, a
// restart interval split across blocks, one block), both codecs and every
// index layout.
func TestIterMovesBothWays(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for _, n := range []int{1, 3, 40, 3000} {
		vs := randomVersions(rng, n)
		want := make([]itertest.Entry, len(vs))
		for i, v := range vs {
			want[i] = itertest.Entry{Key: v.key, Value: v.val}
		}
		for _, bs := range []int{1, 200, 1024, 1 << 20} {
			for _, c := range []Compression{NoCompression, S2Compression} {
				for _, l := range layouts {
					opts := l.opts
					opts.BlockSize, opts.Compression = bs, c
					data := buildTable(t, vs, opts)
					r, err := Open(bytes.NewReader(data), int64(len(data)), "t.sst", blockcache.New(1<<20))
					if err != nil {
						t.Fatal(err)
					}
					itertest.Check(t, r.NewIter(), want, rng)
				}
			}
		}
	}
}
