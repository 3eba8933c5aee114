package region

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

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

// flushTwentyKeys writes 20 keys of file f and flushes them into one file.
func flushTwentyKeys(t *testing.T, r *Region, f int) {
	t.Helper()
	for i := range 20 {
		if _, err := r.Put([]byte(fmt.Sprintf("k%d-%02d", f, i)), []byte("v")); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// A compaction request that finds the region compacting is counted when it
// arises and runs when the running compaction ends. It used to be dropped
// before it was counted, so the autoscaler's demand T fell exactly when
// the pool was too small.
func TestRequestDuringACompactionIsCountedAndRun(t *testing.T) {
	opts := testOptions(t, t.TempDir())
	exec := &gatedExecutor{bucket: opts.Bucket, calls: make(chan string, 4), gate: make(chan struct{})}
	opts.Executor = exec
	opts.Compaction = compaction.Policy{MinFiles: 2, MaxFiles: 4, Ratio: 100, MaxBytes: 1 << 30}
	r := mustOpen(t, opts)
	defer r.Close()
	flush := func(f int) { t.Helper(); flushTwentyKeys(t, r, f) }
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

// placedExecutor is a gatedExecutor that says where its job runs: nowhere
// ("", waiting for a worker) until placed is set.
type placedExecutor struct {
	gatedExecutor
	placed atomic.Bool
}

func (e *placedExecutor) Where(string) (location, worker string, ok bool) {
	if e.placed.Load() {
		return "remote", "w-0", true
	}
	return "", "", true
}

// What a region's compactions owe, and since when: a compaction waiting for
// a worker owes its inputs and dates the wait from when it was wanted; the
// files flushed meanwhile add to the debt (though at most one request is
// queued); once the compaction executes only the queued request waits, and
// when both are done nothing is owed. The autoscaler reads this debt: the
// queue alone plateaus at one request per region under overload.
func TestACompactionWaitingForAWorkerIsOwedAndDatedUntilItRuns(t *testing.T) {
	opts := testOptions(t, t.TempDir())
	exec := &placedExecutor{gatedExecutor: gatedExecutor{bucket: opts.Bucket, calls: make(chan string, 4), gate: make(chan struct{})}}
	opts.Executor = exec
	opts.Compaction = compaction.Policy{MinFiles: 2, MaxFiles: 4, Ratio: 100, MaxBytes: 1 << 30}
	r := mustOpen(t, opts)
	defer r.Close()
	flush := func(f int) { t.Helper(); flushTwentyKeys(t, r, f) }
	filesBytes := func() (total int64) {
		r.mu.RLock()
		defer r.mu.RUnlock()
		for _, tb := range r.current.tables {
			total += tb.meta.Size
		}
		return total
	}
	if st := r.CompactionState(); st.PendingBytes != 0 || !st.WaitingSince.IsZero() {
		t.Fatalf("an empty region owes %d bytes, waiting since %v", st.PendingBytes, st.WaitingSince)
	}
	flush(1)
	before := time.Now()
	flush(2)
	<-exec.calls // compacting files 1 and 2, waiting for a worker
	started := time.Now()
	st := r.CompactionState()
	if !st.Running || st.Location != "" {
		t.Fatalf("state %+v, want a compaction waiting to start", st)
	}
	if want := filesBytes(); st.PendingBytes != want {
		t.Fatalf("a compaction waiting for a worker owes %d bytes, want its inputs' %d", st.PendingBytes, want)
	}
	if st.WaitingSince.Before(before) || st.WaitingSince.After(started) {
		t.Fatalf("waiting since %v, want between %v and %v", st.WaitingSince, before, started)
	}
	firstWanted, firstDebt := st.WaitingSince, st.PendingBytes

	flush(3)
	queuedAfter := time.Now()
	flush(4)
	flush(5)
	r.maybeScheduleCompaction()
	st = r.CompactionState()
	if !st.Queued {
		t.Fatalf("state %+v, want a request queued behind the waiting compaction", st)
	}
	if !st.WaitingSince.Equal(firstWanted) {
		t.Fatalf("waiting since %v, want the oldest wanted compaction's %v", st.WaitingSince, firstWanted)
	}
	// All five files are owed, and merged ones are owed again.
	if total := filesBytes(); st.PendingBytes <= total || st.PendingBytes <= firstDebt {
		t.Fatalf("owes %d bytes with five files of %d bytes waiting (%d before), want more than both", st.PendingBytes, total, firstDebt)
	}

	exec.placed.Store(true)
	st = r.CompactionState()
	if st.WaitingSince.Before(queuedAfter) || !st.WaitingSince.Before(time.Now()) {
		t.Fatalf("with the first compaction executing, waiting since %v; want the queued request's time (after %v)", st.WaitingSince, queuedAfter)
	}
	if owed := st.PendingBytes; owed == 0 || owed >= filesBytes() {
		t.Fatalf("with files 1 and 2 executing, owes %d bytes of %d, want files 3 to 5's debt only", owed, filesBytes())
	}

	close(exec.gate)
	<-exec.calls // the queued request runs once the first compaction ends
	r.compactMu.Lock()
	st = r.CompactionState()
	r.compactMu.Unlock()
	if st.PendingBytes != 0 || !st.WaitingSince.IsZero() || st.Queued {
		t.Fatalf("after both compactions: %+v, want nothing owed or waiting", st)
	}
}
