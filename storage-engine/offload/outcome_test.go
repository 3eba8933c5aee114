package offload

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/bellows-kv/bellows/storage-engine/blob"
	"github.com/bellows-kv/bellows/storage-engine/compaction"
	"github.com/bellows-kv/bellows/storage-engine/region"
)

// openRegion opens region name over exec with three flushed files.
func openRegion(t *testing.T, b *blob.Bucket, name string, exec compaction.Executor) *region.Region {
	t.Helper()
	ctx := context.Background()
	r, err := region.Open(ctx, region.Options{Name: name, Bucket: b, WALDir: t.TempDir(), DisableAutoCompaction: true, Executor: exec})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close() })
	for f := range 3 {
		for i := range 50 {
			if _, err := r.Put(fmt.Appendf(nil, "k%02d-%03d", f, i), []byte("value")); err != nil {
				t.Fatal(err)
			}
		}
		if err := r.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	return r
}

func openBucket(t *testing.T) (string, *blob.Bucket) {
	t.Helper()
	url := "file://" + t.TempDir()
	b, err := blob.Open(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return url, b
}

// A compaction that an unreachable worker could not run and the next one
// ran is one remote success, not a failure: failures are final outcomes,
// tries are attempts.
func TestCompactionsCountFinalOutcome(t *testing.T) {
	url, b := openBucket(t)
	dead := listen(t)
	deadAddr := dead.Addr().String()
	_ = dead.Close()
	l := listen(t)
	live, _ := startWorker(t, l, 64<<20)
	// The region's first choice is the dead worker.
	name := "r"
	for i := 0; Rendezvous(name, []string{deadAddr, live})[0] != deadAddr; i++ {
		name = fmt.Sprint("r", i)
	}
	reg := prometheus.NewRegistry()
	exec, err := New(Options{Mode: Required, Workers: Static{deadAddr, live}, BucketURL: url,
		Local: compaction.Local{Bucket: b}, Registerer: reg, RetryInitial: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer exec.Close()
	r := openRegion(t, b, name, exec)
	for range 2 {
		rep := &Report{}
		if _, err := r.Compact(WithReport(context.Background(), rep), true); err != nil {
			t.Fatal(err)
		}
		if loc, w, note := rep.Ran(); loc != LocationRemote || w != live || note != "" {
			t.Fatalf("report: ran %s on %q (%q), want remote on %s", loc, w, note, live)
		}
	}
	want := `
# HELP bellows_compaction_attempts_total Tries to run a compaction on a worker, by the worker's outcome: ok, refused (cache full), unavailable (unreachable, draining, stream broke), failed.
# TYPE bellows_compaction_attempts_total counter
bellows_compaction_attempts_total{worker_outcome="failed"} 0
bellows_compaction_attempts_total{worker_outcome="ok"} 2
bellows_compaction_attempts_total{worker_outcome="refused"} 0
bellows_compaction_attempts_total{worker_outcome="unavailable"} 2
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "bellows_compaction_attempts_total"); err != nil {
		t.Fatal(err)
	}
	for series, n := range map[[2]string]float64{
		{"remote", "success"}: 2, {"remote", "failure"}: 0, {"local", "success"}: 0, {"local", "failure"}: 0,
	} {
		if got := testutil.ToFloat64(exec.m.compactions.WithLabelValues(series[0], series[1])); got != n {
			t.Errorf("bellows_compactions_total%v = %v, want %v", series, got, n)
		}
	}
}

// A job larger than every worker's cache is refused by all of them; in
// Required mode it runs in the store (once: no retry rounds), counted as
// oversized and as a local compaction.
func TestOversizedJobRunsLocally(t *testing.T) {
	url, b := openBucket(t)
	small, _ := startWorker(t, listen(t), 1<<10)
	reg := prometheus.NewRegistry()
	exec, err := New(Options{Mode: Required, Workers: Static{small}, BucketURL: url, Local: compaction.Local{Bucket: b},
		Registerer: reg, InputBytes: func(compaction.Job) int64 { return 1 << 20 }})
	if err != nil {
		t.Fatal(err)
	}
	defer exec.Close()
	r := openRegion(t, b, "r", exec)
	rep := &Report{}
	if _, err := r.Compact(WithReport(context.Background(), rep), true); err != nil {
		t.Fatal(err)
	}
	if loc, _, note := rep.Ran(); loc != LocationLocal || note != ReasonJobTooLarge+": 1.0 MiB of inputs, larger than every worker's cache (largest 1.0 KiB)" {
		t.Fatalf("report: ran %s (%q)", loc, note)
	}
	for name, got := range map[string]float64{
		"oversized":     testutil.ToFloat64(exec.m.oversized),
		"refused":       testutil.ToFloat64(exec.m.attempts.WithLabelValues(AttemptRefused)),
		"local success": testutil.ToFloat64(exec.m.compactions.WithLabelValues(LocationLocal, "success")),
	} {
		if got != 1 {
			t.Errorf("%s = %v, want 1", name, got)
		}
	}
}

// untilCancelledLocal runs until its context ends.
type untilCancelledLocal struct{ started chan struct{} }

func (l untilCancelledLocal) Execute(ctx context.Context, _ compaction.Job) (compaction.Result, error) {
	close(l.started)
	<-ctx.Done()
	return compaction.Result{}, ctx.Err()
}

// The start timeout also bounds the wait for one of the store's slots
// (STORE_BUSY), and Preferred mode ignores it for workers: it runs the job
// here instead of waiting.
func TestStartTimeout(t *testing.T) {
	local := untilCancelledLocal{started: make(chan struct{})}
	exec, err := New(Options{Mode: Disabled, Local: local, MaxConcurrent: 1})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _, _ = exec.Execute(ctx, compaction.Job{Region: "a"}) }()
	<-local.started
	_, err = exec.Execute(WithReport(context.Background(), &Report{StartTimeout: 50 * time.Millisecond}), compaction.Job{Region: "b"})
	var ns *NotStartedError
	if !errors.As(err, &ns) || ns.Reason != ReasonStoreBusy || ns.Waited < 50*time.Millisecond {
		t.Fatalf("second job with the only slot taken: %v, want STORE_BUSY after 50ms", err)
	}

	url, b := openBucket(t)
	dead := listen(t)
	addr := dead.Addr().String()
	_ = dead.Close()
	exec, err = New(Options{Mode: Preferred, Workers: Static{addr}, BucketURL: url, Local: compaction.Local{Bucket: b}})
	if err != nil {
		t.Fatal(err)
	}
	defer exec.Close()
	rep := &Report{StartTimeout: time.Nanosecond}
	if _, err := openRegion(t, b, "r", exec).Compact(WithReport(context.Background(), rep), true); err != nil {
		t.Fatalf("Preferred with a start timeout: %v", err)
	}
	if loc, _, _ := rep.Ran(); loc != LocationLocal {
		t.Fatalf("ran %q, want local", loc)
	}
}
