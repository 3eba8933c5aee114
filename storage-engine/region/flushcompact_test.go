package region

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bellows-kv/bellows/storage-engine/compaction"
)

// A flush asks for a compaction as soon as its file is installed, not when
// no frozen memstore is left to flush. Writers that keep a frozen memstore
// always waiting (a write rate above the flush rate, the memstore
// benchmark's Basic at full speed) used to keep the flusher from ever
// asking: eight files piled up and every scan read all of them.
func TestFlushAsksForACompactionWhileOtherMemstoresWait(t *testing.T) {
	opts := testOptions(t, t.TempDir())
	opts.MemstoreBytes = 4 << 10
	opts.MaxImmutableMemstores = 3
	opts.Compaction = compaction.Policy{MinFiles: 2, MaxFiles: 4, Ratio: 100, MaxBytes: 1 << 30}
	// Every job reports its start and runs at once (the gate is open).
	exec := &gatedExecutor{bucket: opts.Bucket, calls: make(chan string, 8), gate: make(chan struct{})}
	close(exec.gate)
	opts.Executor = exec
	var calls atomic.Int32
	first, third := make(chan struct{}), make(chan struct{})
	atThird := make(chan struct{})
	opts.BeforeFlushCommit = func(_ context.Context, final bool) {
		switch calls.Add(1) {
		case 1:
			<-first
		case 3:
			close(atThird)
			<-third
		}
	}
	r := mustOpen(t, opts)
	defer func() {
		select {
		case <-third:
		default:
			close(third)
		}
		r.Close()
	}()
	// The first flush waits before its commit: the writes freeze two more
	// memstores behind it.
	frozen := func() int {
		r.mu.RLock()
		defer r.mu.RUnlock()
		return len(r.imm)
	}
	for i := 0; frozen() < 3; i++ {
		if i == 10000 {
			t.Fatalf("%d frozen memstores after %d puts, want 3", frozen(), i)
		}
		if _, err := r.Put([]byte(fmt.Sprintf("k%05d", i)), make([]byte, 100)); err != nil {
			t.Fatal(err)
		}
	}
	close(first)
	// The flusher installs the first two files and stops before the third's
	// commit, with that memstore still waiting.
	<-atThird
	if n := r.Stats().Flushes.Load(); n != 2 {
		t.Fatalf("%d flushes installed while the third waits, want 2", n)
	}
	select {
	case <-exec.calls:
	case <-time.After(10 * time.Second):
		t.Fatalf("no compaction of the %d files in 10 s while a frozen memstore waited for its flush (requested %d)",
			r.FileCount(), r.Stats().CompactionsRequested.Load())
	}
	// It runs under compactMu: holding it, the compaction is over.
	r.compactMu.Lock()
	done := r.Stats().CompactionsDone.Load()
	r.compactMu.Unlock()
	if done == 0 {
		t.Fatal("the compaction that started while a frozen memstore waited did not finish")
	}
	close(third)
	if err := r.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
}
