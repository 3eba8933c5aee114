package compaction

import (
	"bytes"
	"context"
	"fmt"
	"runtime"
	"testing"

	"github.com/bellows-kv/bellows/storage-engine/blob"
	"github.com/bellows-kv/bellows/storage-engine/kv"
	"github.com/bellows-kv/bellows/storage-engine/sstable"
)

// BenchmarkExecute is a local compaction of three 8 MiB inputs (S2, 32 KiB
// blocks, 100-byte values, retention of one version): alloc-bytes/input-byte
// is the garbage it makes per byte it reads (each input block decoded into
// a fresh buffer made it at least 1).
func BenchmarkExecute(b *testing.B) {
	ctx := context.Background()
	bucket, err := blob.Open(ctx, "file://"+b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	defer bucket.Close()
	const keys = 72 << 10 // about 8 MiB of keys and values per input
	opts := sstable.WriterOptions{BlockSize: 32 << 10, Compression: sstable.S2Compression, ExpectedKeys: keys}
	var inputs []string
	var inputBytes int64
	for f := range 3 {
		var buf bytes.Buffer
		w := sstable.NewWriter(&buf, opts)
		v := make([]byte, 100)
		for k := range keys {
			copy(v, fmt.Sprintf("value-%d-%d", f, k))
			if err := w.Add(kv.InternalKey{UserKey: fmt.Appendf(nil, "key-%08d", k*3+f%2), TS: uint64(f + 1), Kind: kv.KindSet}, v); err != nil {
				b.Fatal(err)
			}
		}
		if _, _, err := w.Finish(); err != nil {
			b.Fatal(err)
		}
		in := fmt.Sprintf("in-%d.sst", f)
		if err := bucket.WriteAll(ctx, in, buf.Bytes(), false); err != nil {
			b.Fatal(err)
		}
		inputs = append(inputs, in)
		inputBytes += int64(buf.Len())
	}
	job := Job{Region: "r", Inputs: inputs, Output: "out.sst", SST: opts,
		Merge: MergeOptions{Major: true, Retention: Retention{MaxVersions: 1}}}
	b.ReportAllocs()
	b.SetBytes(inputBytes)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for b.Loop() {
		if _, err := Execute(ctx, bucket, job, false); err != nil {
			b.Fatal(err)
		}
	}
	runtime.ReadMemStats(&after)
	b.ReportMetric(float64(after.TotalAlloc-before.TotalAlloc)/float64(b.N)/float64(inputBytes), "alloc-bytes/input-byte")
}
