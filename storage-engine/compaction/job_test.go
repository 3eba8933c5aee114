package compaction

import (
	"bytes"
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/bellows-kv/bellows/storage-engine/blob"
	"github.com/bellows-kv/bellows/storage-engine/kv"
	"github.com/bellows-kv/bellows/storage-engine/sstable"
)

// Keeping the output costs no bucket read: a job that keeps reads exactly
// the bytes one that does not keep reads (its inputs), and the kept blocks
// are byte for byte the output file's stored data blocks.
func TestKeepOutputReadsNothingBack(t *testing.T) {
	ctx := context.Background()
	b, err := blob.Open(ctx, "file://"+t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	var inputs []string
	for f := range 3 {
		var buf bytes.Buffer
		w := sstable.NewWriter(&buf, sstable.WriterOptions{BlockSize: 1 << 10, Compression: sstable.S2Compression})
		for k := range 500 {
			key := kv.InternalKey{UserKey: fmt.Appendf(nil, "key-%05d", k*3+f), TS: 1, Kind: kv.KindSet}
			if err := w.Add(key, bytes.Repeat([]byte{byte(k)}, 100)); err != nil {
				t.Fatal(err)
			}
		}
		if _, _, err := w.Finish(); err != nil {
			t.Fatal(err)
		}
		in := fmt.Sprintf("in-%d.sst", f)
		if err := b.WriteAll(ctx, in, buf.Bytes(), false); err != nil {
			t.Fatal(err)
		}
		inputs = append(inputs, in)
	}
	var read atomic.Int64
	counted := b.WithReadHook(func(_ context.Context, n int) error { read.Add(int64(n)); return nil })
	job := func(out string) Job {
		return Job{Region: "r", Inputs: inputs, Output: out,
			SST: sstable.WriterOptions{BlockSize: 2 << 10, Compression: sstable.S2Compression}}
	}

	plain, err := Execute(ctx, counted, job("plain.sst"), false)
	if err != nil {
		t.Fatal(err)
	}
	plainRead := read.Swap(0)
	kept, err := Execute(ctx, counted, job("kept.sst"), true)
	if err != nil {
		t.Fatal(err)
	}
	keptRead := read.Load()
	t.Logf("bucket bytes read: plain %d, keeping %d (inputs %d, output %d)", plainRead, keptRead, kept.InputBytes, kept.Size)
	if keptRead != plainRead || plain.Kept != nil {
		t.Fatalf("keeping read %d bytes from the bucket, plain offload %d", keptRead, plainRead)
	}

	obj, err := b.OpenObject(ctx, "kept.sst")
	if err != nil {
		t.Fatal(err)
	}
	defer obj.Close()
	r, err := sstable.Open(obj, obj.Size(), "kept.sst", nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(kept.Kept) != r.NumBlocks() || r.NumBlocks() < 10 {
		t.Fatalf("kept %d blocks, the file has %d", len(kept.Kept), r.NumBlocks())
	}
	for i, blk := range kept.Kept {
		stored, err := r.ReadStoredBlock(i)
		if err != nil {
			t.Fatal(err)
		}
		h, herr := r.BlockHandle(i)
		last, lerr := r.BlockLastUserKey(i)
		if herr != nil || lerr != nil {
			t.Fatal(herr, lerr)
		}
		if !bytes.Equal(blk.Stored, stored) || blk.Handle != h || !bytes.Equal(blk.LastUserKey, last) {
			t.Fatalf("kept block %d differs from the file's", i)
		}
	}
}
