package region

import (
	"context"
	"fmt"
	"testing"

	"github.com/bellows-kv/bellows/storage-engine/blob"
	"github.com/bellows-kv/bellows/storage-engine/compaction"
)

// gatedExecutor runs jobs locally; the first waits for gate to close.
type gatedExecutor struct {
	bucket *blob.Bucket
	calls  chan string // every job's output key, as it starts
	gate   chan struct{}
	n      int
}

func (e *gatedExecutor) Execute(ctx context.Context, job compaction.Job) (compaction.Result, error) {
	e.calls <- job.Output
	if e.n++; e.n == 1 {
		select {
		case <-e.gate:
		case <-ctx.Done():
			return compaction.Result{}, ctx.Err()
		}
	}
	return compaction.Local{Bucket: e.bucket}.Execute(ctx, job)
}

// A compaction request that finds the region compacting is counted when it
// arises and runs when the running compaction ends. It used to be dropped
// before it was counted, so the autoscaler's demand T fell exactly when
// the pool was too small.
func TestRequestDuringACompactionIsCountedAndRun(t *testing.T) {
	ctx := context.Background()
	opts := testOptions(t, t.TempDir())
	exec := &gatedExecutor{bucket: opts.Bucket, calls: make(chan string, 4), gate: make(chan struct{})}
	opts.Executor = exec
	opts.Compaction = compaction.Policy{MinFiles: 2, MaxFiles: 4, Ratio: 100, MaxBytes: 1 << 30}
	r := mustOpen(t, opts)
	defer r.Close()
	flush := func(f int) {
		t.Helper()
		for i := range 20 {
			if _, err := r.Put([]byte(fmt.Sprintf("k%d-%02d", f, i)), []byte("v")); err != nil {
				t.Fatal(err)
			}
		}
		if err := r.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	flush(1)
	flush(2)
	<-exec.calls // the flush after file 2 started a compaction of 1 and 2; it waits at the gate
	if got := r.Stats().CompactionsRequested.Load(); got != 1 {
		t.Fatalf("requested %d, want 1", got)
	}
	flush(3)
	flush(4)
	// The flusher asks after each flush; asking again here makes the
	// count independent of whether it has yet: one request is queued.
	r.maybeScheduleCompaction()
	if got := r.Stats().CompactionsRequested.Load(); got != 2 {
		t.Fatalf("requested %d while the first compaction runs, want 2 (files 3 and 4 qualify)", got)
	}
	close(exec.gate)
	<-exec.calls // the queued request runs once the first compaction ends
	// It runs under compactMu: holding it, the second compaction is over.
	r.compactMu.Lock()
	s := r.Stats()
	req, done := s.CompactionsRequested.Load(), s.CompactionsDone.Load()
	n := r.FileCount()
	r.compactMu.Unlock()
	if req != 2 || done != 2 {
		t.Fatalf("requested %d, done %d; want 2 and 2", req, done)
	}
	if n != 1 {
		t.Fatalf("%d files, want 1 (the second compaction merges the first's output with 3 and 4)", n)
	}
}
