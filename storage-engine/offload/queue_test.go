package offload

import (
	"context"
	"runtime"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/bellows-kv/bellows/internal/contract"
	"github.com/bellows-kv/bellows/storage-engine/compaction"
)

// blockingLocal runs a job by announcing it and waiting for its release.
type blockingLocal struct {
	running chan string
	release chan struct{}
}

func (b blockingLocal) Execute(ctx context.Context, job compaction.Job) (compaction.Result, error) {
	b.running <- job.Region
	select {
	case <-b.release:
	case <-ctx.Done():
		return compaction.Result{}, ctx.Err()
	}
	return compaction.Result{InputBytes: 100}, nil
}

// The queue depth the autoscaler reads as backlog counts the jobs waiting
// to start, not the ones running: with one slot, one running job and one
// waiting job make a depth of 1 (it was 2, and the operator asked for an
// extra worker per running job).
func TestQueueDepthCountsWaitingJobsOnly(t *testing.T) {
	reg := prometheus.NewRegistry()
	local := blockingLocal{running: make(chan string), release: make(chan struct{})}
	exec, err := New(Options{Mode: Disabled, Local: local, MaxConcurrent: 1, Registerer: reg,
		InputBytes: func(compaction.Job) int64 { return 100 }})
	if err != nil {
		t.Fatal(err)
	}
	depth := func() (float64, float64) {
		return testutil.ToFloat64(exec.m.queueDepth), testutil.ToFloat64(exec.m.pendingBytes)
	}
	done := make(chan error, 2)
	run := func(region string) {
		_, err := exec.Execute(context.Background(), compaction.Job{Region: region})
		done <- err
	}
	go run("a")
	<-local.running // a holds the only slot and runs
	if d, b := depth(); d != 0 || b != 0 {
		t.Fatalf("one running job: depth %v, pending bytes %v; want 0, 0", d, b)
	}
	go run("b")
	// b cannot start until a finishes; wait until it is queued.
	for {
		if d, _ := depth(); d == 1 {
			break
		}
		select {
		case err := <-done:
			t.Fatalf("a job finished early: %v", err)
		default:
		}
		runtime.Gosched()
	}
	if _, b := depth(); b != 100 {
		t.Fatalf("pending bytes %v with b waiting, want 100", b)
	}
	local.release <- struct{}{} // a finishes; b starts
	if r := <-local.running; r != "b" {
		t.Fatalf("started %q, want b", r)
	}
	if d, b := depth(); d != 0 || b != 0 {
		t.Fatalf("b running: depth %v, pending bytes %v; want 0, 0", d, b)
	}
	local.release <- struct{}{}
	for range 2 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	if n, err := testutil.GatherAndCount(reg, contract.MetricCompactionQueueDepth); err != nil || n != 1 {
		t.Fatalf("%s exported %d times (%v), want once", contract.MetricCompactionQueueDepth, n, err)
	}
}
