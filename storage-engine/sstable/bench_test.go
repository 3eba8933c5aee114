package sstable

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/bellows-kv/bellows/storage-engine/blockcache"
	"github.com/bellows-kv/bellows/storage-engine/kv"
)

// benchTable is a file of n keys of 16 bytes with 100-byte values in 4 KiB
// blocks, the engine benchmark's shape, in the given format.
func benchTable(b *testing.B, n int, format uint32) ([]byte, [][]byte) {
	b.Helper()
	var buf bytes.Buffer
	w := NewWriter(&buf, WriterOptions{BlockSize: 4 << 10, Compression: S2Compression, FormatVersion: format, ExpectedKeys: uint(n)})
	keys := make([][]byte, n)
	val := bytes.Repeat([]byte("v"), 100)
	for i := range n {
		keys[i] = fmt.Appendf(nil, "key-%012d", i)
		if err := w.Add(kv.InternalKey{UserKey: keys[i], TS: 1, Kind: kv.KindSet}, val); err != nil {
			b.Fatal(err)
		}
	}
	if _, _, err := w.Finish(); err != nil {
		b.Fatal(err)
	}
	return buf.Bytes(), keys
}

// BenchmarkGet reads random present keys of a 200,000-key file with a
// memory budget that holds it all (the lookup's CPU) and one that holds
// format 1's index and filter and a quarter of the data blocks (most reads
// miss), in both formats. Each format's cache is the budget less what its
// reader holds outside the cache.
func BenchmarkGet(b *testing.B) {
	const n = 200_000
	v1, _ := benchTable(b, n, FormatVersion1)
	v1Pinned, err := Open(bytes.NewReader(v1), int64(len(v1)), "b.sst", blockcache.New(1))
	if err != nil {
		b.Fatal(err)
	}
	small := v1Pinned.MemoryBytes() + int64(len(v1))/4
	for _, format := range []uint32{FormatVersion1, FormatVersion} {
		data, keys := benchTable(b, n, format)
		pinned, err := Open(bytes.NewReader(data), int64(len(data)), "b.sst", blockcache.New(1))
		if err != nil {
			b.Fatal(err)
		}
		for _, c := range []struct {
			name  string
			bytes int64
		}{{"budget-holds-all", 256 << 20}, {"budget-holds-a-quarter", small}} {
			b.Run(fmt.Sprintf("format-%d/%s", format, c.name), func(b *testing.B) {
				cache := blockcache.New(c.bytes - pinned.MemoryBytes())
				r, err := Open(bytes.NewReader(data), int64(len(data)), "b.sst", cache)
				if err != nil {
					b.Fatal(err)
				}
				rng := rand.New(rand.NewPCG(1, 2))
				b.ResetTimer()
				for range b.N {
					if _, _, ok, err := r.Get(keys[rng.IntN(n)], kv.MaxTimestamp); !ok || err != nil {
						b.Fatal(ok, err)
					}
				}
				st := cache.Stats()
				b.ReportMetric(float64(st.Misses)/float64(b.N), "misses/op")
				b.ReportMetric(float64(st.MetaMisses)/float64(b.N), "meta-misses/op")
			})
		}
	}
}

// BenchmarkScan seeks to a random key and reads 100 entries, in both
// formats, through a cache that holds the file.
func BenchmarkScan(b *testing.B) {
	const n = 200_000
	for _, format := range []uint32{FormatVersion1, FormatVersion} {
		data, keys := benchTable(b, n, format)
		b.Run(fmt.Sprintf("format-%d", format), func(b *testing.B) {
			r, err := Open(bytes.NewReader(data), int64(len(data)), "b.sst", blockcache.New(256<<20))
			if err != nil {
				b.Fatal(err)
			}
			rng := rand.New(rand.NewPCG(1, 2))
			it := r.NewIter()
			b.ResetTimer()
			for range b.N {
				ok := it.SeekGE(kv.MakeSearchKey(keys[rng.IntN(n-100)], kv.MaxTimestamp))
				for j := 0; ok && j < 99; j++ {
					ok = it.Next()
				}
				if !ok {
					b.Fatal(it.Err())
				}
			}
		})
	}
}
