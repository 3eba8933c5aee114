package offload

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/bellows-kv/bellows/storage-engine/blob"
	"github.com/bellows-kv/bellows/storage-engine/compaction"
	"github.com/bellows-kv/bellows/storage-engine/region"
)

// gatedLocal runs jobs in this process once let through: a compaction that
// stays running while the test looks at it.
type gatedLocal struct {
	compaction.Local
	began chan string
	gate  chan struct{}
}

func (g gatedLocal) Execute(ctx context.Context, job compaction.Job) (compaction.Result, error) {
	g.began <- job.Region
	<-g.gate
	return g.Local.Execute(ctx, job)
}

// A region's compaction state says where its job runs, and that a job
// waiting for one of the store's compaction slots has not started.
func TestCompactionStateSaysWhereTheJobRuns(t *testing.T) {
	ctx := context.Background()
	b, err := blob.Open(ctx, "file://"+t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	local := gatedLocal{compaction.Local{Bucket: b}, make(chan string, 2), make(chan struct{})}
	exec, err := New(Options{Mode: Disabled, MaxConcurrent: 1, Local: local})
	if err != nil {
		t.Fatal(err)
	}
	defer exec.Close()
	open := func(name string) *region.Region {
		r, err := region.Open(ctx, region.Options{Name: name, Bucket: b, WALDir: t.TempDir(), DisableAutoCompaction: true, Executor: exec})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = r.Close() })
		for f := range 2 {
			if _, err := r.Put(fmt.Appendf(nil, "k%d", f), []byte("v")); err != nil {
				t.Fatal(err)
			}
			if err := r.Flush(ctx); err != nil {
				t.Fatal(err)
			}
		}
		return r
	}
	a, z := open("a"), open("z")
	if st := a.CompactionState(); st != (region.CompactionState{}) {
		t.Fatalf("before any compaction: %+v", st)
	}
	done := make(chan error, 2)
	go func() { _, err := a.Compact(ctx, true); done <- err }()
	if got := <-local.began; got != "a" {
		t.Fatalf("job of %s began, want a", got)
	}
	if st := a.CompactionState(); !st.Running || st.Location != LocationLocal {
		t.Errorf("a, compacting here: %+v, want running local", st)
	}
	// z's job waits for the one slot a holds.
	go func() { _, err := z.Compact(ctx, true); done <- err }()
	waitFor(t, "z's job to wait for a slot", func() bool { _, _, ok := exec.Where("z"); return ok })
	if st := z.CompactionState(); !st.Running || st.Location != "" {
		t.Errorf("z, waiting for a slot: %+v, want running with no location yet", st)
	}
	close(local.gate)
	for range 2 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	if st := a.CompactionState(); st != (region.CompactionState{}) {
		t.Errorf("after the compaction: %+v", st)
	}
	if _, _, ok := exec.Where("a"); ok {
		t.Error("the executor still places a's finished job")
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond) // polling interval, not synchronisation
	}
}
