package offload

import (
	"context"
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/bellows-kv/bellows/storage-engine/blob"
	"github.com/bellows-kv/bellows/storage-engine/compaction"
	"github.com/bellows-kv/bellows/storage-engine/compactor"
	"github.com/bellows-kv/bellows/storage-engine/region"
)

// A restarted store announces its new session to every worker it knows, so
// each frees what the previous incarnation kept there, also a worker that
// no job of the new session reaches.
func TestNewSessionIsAnnouncedToEveryWorker(t *testing.T) {
	ctx := context.Background()
	url := "file://" + t.TempDir()
	b, err := blob.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	addrA, wA := startWorker(t, listen(t), 64<<20)
	addrB, wB := startWorker(t, listen(t), 64<<20)

	// Session 1 of store s leaves a kept output on each worker: one
	// region's compaction on each (an executor per worker pins it there).
	for i, addr := range []string{addrA, addrB} {
		exec, err := New(Options{Mode: Required, Workers: Static{addr}, BucketURL: url, KeepOutput: true,
			Store: "s", Session: "1", Local: compaction.Local{Bucket: b}})
		if err != nil {
			t.Fatal(err)
		}
		r, err := region.Open(ctx, region.Options{Name: fmt.Sprint("r", i), Bucket: b, WALDir: t.TempDir(), DisableAutoCompaction: true,
			Executor: exec, Warmup: region.WarmupRemoteCache})
		if err != nil {
			t.Fatal(err)
		}
		for f := range 3 {
			if _, err := r.Put(fmt.Appendf(nil, "k%d", f), []byte("value")); err != nil {
				t.Fatal(err)
			}
			if err := r.Flush(ctx); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := r.Compact(ctx, true); err != nil {
			t.Fatal(err)
		}
		// The store "crashes": neither the region nor the executor says
		// goodbye (closing the region would release the output itself).
	}
	kept := func(w *compactor.Worker) uint32 {
		st, err := w.Status(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		return st.KeptOutputs
	}
	if kept(wA) != 1 || kept(wB) != 1 {
		t.Fatalf("kept outputs %d and %d, want 1 on each worker", kept(wA), kept(wB))
	}

	// Session 2 runs no job at all, and still frees both.
	exec, err := New(Options{Mode: Required, Workers: Static{addrA, addrB}, BucketURL: url, KeepOutput: true,
		Store: "s", Session: "2", Local: compaction.Local{Bucket: b}})
	if err != nil {
		t.Fatal(err)
	}
	defer exec.Close()
	err = wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return kept(wA) == 0 && kept(wB) == 0, nil
	})
	if err != nil {
		t.Fatalf("kept outputs %d and %d after the new session started, want 0 on each worker", kept(wA), kept(wB))
	}
}
