package compaction

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bellows-kv/bellows/storage-engine/blob"
	"github.com/bellows-kv/bellows/storage-engine/kv"
	"github.com/bellows-kv/bellows/storage-engine/sstable"
)

// A worker keeping a job's output holds about the output's data blocks and
// no more, whatever the inputs: two 16 MiB inputs of the same keys, of
// which retention keeps one version (a 16 MiB output), raise the heap's
// peak by at most the output plus 12 MiB (the inputs' blocks in flight and
// the garbage a collection has not reached yet). Keeping a copy of the whole file
// sized to the inputs, then cutting and cloning it, took the inputs' size
// and the output's again (about 48 MiB here): outside the ⌊m/b⌋ accounting.
func TestKeepingTheOutputHoldsItsBlocksOnly(t *testing.T) {
	ctx := context.Background()
	b, err := blob.Open(ctx, "file://"+t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	const keys, valueSize = 16 << 10, 1 << 10 // 16 MiB per input
	rng := rand.NewChaCha8([32]byte{1})
	var inputs []string
	for f := range 2 {
		var buf bytes.Buffer
		w := sstable.NewWriter(&buf, sstable.WriterOptions{Compression: sstable.S2Compression, ExpectedKeys: keys})
		v := make([]byte, valueSize)
		for k := range keys {
			_, _ = rng.Read(v) // incompressible
			if err := w.Add(kv.InternalKey{UserKey: fmt.Appendf(nil, "key-%06d", k), TS: uint64(f + 1), Kind: kv.KindSet}, v); err != nil {
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

	// Collect often, so the heap's objects are close to what is live, and
	// sample them while the job runs.
	defer debug.SetGCPercent(debug.SetGCPercent(5))
	runtime.GC()
	sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	heap := func() int64 { metrics.Read(sample); return int64(sample[0].Value.Uint64()) }
	base := heap()
	var peak atomic.Int64
	done := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			if h := heap() - base; h > peak.Load() {
				peak.Store(h)
			}
			select {
			case <-done:
				return
			case <-time.After(200 * time.Microsecond):
			}
		}
	}()
	res, err := Execute(ctx, b, Job{Region: "r", Inputs: inputs, Output: "out.sst",
		Merge: MergeOptions{Major: true, Retention: Retention{MaxVersions: 1}},
		SST:   sstable.WriterOptions{Compression: sstable.S2Compression, ExpectedKeys: keys}}, true)
	close(done)
	<-sampled
	if err != nil {
		t.Fatal(err)
	}
	if h := heap() - base; h > peak.Load() {
		peak.Store(h)
	}
	limit := res.Size + 12<<20
	t.Logf("inputs %d MiB, output %d MiB, %d blocks kept; heap peak +%d MiB (limit %d MiB)",
		res.InputBytes>>20, res.Size>>20, len(res.Kept), peak.Load()>>20, limit>>20)
	if res.Stats.OutputVersions != keys || len(res.Kept) == 0 {
		t.Fatalf("the merge kept %d versions in %d blocks; want %d", res.Stats.OutputVersions, len(res.Kept), keys)
	}
	if peak.Load() > limit {
		t.Fatalf("keeping the output raised the heap by %d MiB at its peak, over the output's %d MiB plus 12", peak.Load()>>20, res.Size>>20)
	}
	runtime.KeepAlive(res)
}
