package region

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/bellows-kv/bellows/storage-engine/blob"
	"github.com/bellows-kv/bellows/storage-engine/compaction"
	"github.com/bellows-kv/bellows/storage-engine/kv"
	"github.com/bellows-kv/bellows/storage-engine/manifest"
)

// stuckExecutor is a compaction that runs until its context ends, like a
// long job on a remote worker: it writes its output (a worker's leftover)
// and then waits. With finish set it returns the output as a success when
// cancelled (a result that arrives as the region stops its compactions),
// otherwise the cancellation.
type stuckExecutor struct {
	bucket    *blob.Bucket
	finish    bool
	started   chan struct{}
	cancelled atomic.Bool
}

func (e *stuckExecutor) Execute(ctx context.Context, job compaction.Job) (compaction.Result, error) {
	res, err := compaction.Local{Bucket: e.bucket}.Execute(context.Background(), job)
	if err != nil {
		return res, err
	}
	close(e.started)
	<-ctx.Done()
	e.cancelled.Store(true)
	if e.finish {
		return res, nil
	}
	return compaction.Result{}, ctx.Err()
}

// releaseDuringCompaction writes three flushed files and some unflushed
// writes, starts a major Compact with opts.Executor and, once running
// returns, releases the region. It returns Compact's answer, the key→value
// pairs written, the manifest the release left, and Compact's error.
func releaseDuringCompaction(t *testing.T, opts Options, running func()) (*CompactionInfo, map[string]string, manifest.Manifest, error) {
	t.Helper()
	ctx := context.Background()
	opts.DisableAutoCompaction = true
	r := mustOpen(t, opts)
	want := map[string]string{}
	for f := range 3 {
		for i := range 50 {
			k, v := fmt.Sprintf("k%d-%03d", f, i), fmt.Sprintf("v%d", f)
			if _, err := r.Put([]byte(k), []byte(v)); err != nil {
				t.Fatal(err)
			}
			want[k] = v
		}
		if err := r.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 20 {
		k := fmt.Sprintf("unflushed-%02d", i)
		if _, err := r.Put([]byte(k), []byte("u")); err != nil {
			t.Fatal(err)
		}
		want[k] = "u"
	}
	type answer struct {
		info *CompactionInfo
		err  error
	}
	done := make(chan answer, 1)
	go func() {
		info, err := r.Compact(ctx, true)
		done <- answer{info, err}
	}()
	running()
	if err := r.Release(ctx); err != nil {
		t.Fatalf("release during a compaction: %v", err)
	}
	a := <-done // Release returned, so Compact has (it held compactMu)
	m, err := manifest.Load(ctx, opts.Bucket.Prefixed(BucketPrefix(opts.Name)))
	if err != nil {
		t.Fatal(err)
	}
	if !m.Released {
		t.Fatalf("manifest %d is not marked released", m.Number)
	}
	return a.info, want, m, a.err
}

// checkClaimedData reopens a released region from another WAL (its next
// owner) and reads every acknowledged write.
func checkClaimedData(t *testing.T, opts Options, want map[string]string) {
	t.Helper()
	opts.WALDir += "-next-owner"
	// It reads only: a compaction its open schedules would run the
	// test's executor again.
	opts.DisableAutoCompaction = true
	r := mustOpen(t, opts)
	defer r.Close()
	for k, v := range want {
		mustGet(t, r, k, v)
	}
}

// A region released while its compaction runs does not wait for the job: the
// job is cancelled, Compact answers ErrCompactionAborted saying that nothing
// was installed, the manifest names the inputs (and the output is gone), and
// the next owner has every acknowledged write.
func TestReleaseAbortsARunningCompaction(t *testing.T) {
	for _, finish := range []bool{false, true} {
		t.Run(fmt.Sprintf("job result arrives after the cancel=%v", finish), func(t *testing.T) {
			opts := testOptions(t, t.TempDir())
			ex := &stuckExecutor{bucket: opts.Bucket, finish: finish, started: make(chan struct{})}
			opts.Executor = ex
			info, want, m, err := releaseDuringCompaction(t, opts, func() { <-ex.started })
			if !ex.cancelled.Load() {
				t.Fatal("the job was not cancelled")
			}
			if !errors.Is(err, ErrCompactionAborted) || info != nil {
				t.Fatalf("Compact: %v, %v; want ErrCompactionAborted", info, err)
			}
			const says = "r1 was released by this store while its compaction ran; nothing was installed"
			var re *Error
			if !strings.Contains(err.Error(), says) || !errors.As(err, &re) || re.Region != "r1" {
				t.Fatalf("Compact error %q: want a region error of r1 saying %q", err, says)
			}
			// Three flushed inputs, then the release's flush; no output.
			if len(m.Files) != 4 {
				t.Fatalf("released manifest names %d files, want the 3 inputs and the final flush: %+v", len(m.Files), m.Files)
			}
			ssts, err := opts.Bucket.Prefixed(BucketPrefix("r1")).List(context.Background(), "sst/")
			if err != nil {
				t.Fatal(err)
			}
			for _, o := range ssts {
				if !slices.ContainsFunc(m.Files, func(f manifest.FileMeta) bool { return f.Key == o.Key }) {
					t.Errorf("%s is in the bucket but in no manifest: the aborted output was left behind", o.Key)
				}
			}
			checkClaimedData(t, opts, want)
		})
	}
}

// A compaction already installed when the release comes is done: a warmup
// cut short only leaves the cache cold, and Compact reports the compaction.
func TestReleaseCutsAWarmupShortButKeepsTheCompaction(t *testing.T) {
	opts := testOptions(t, t.TempDir())
	opts.Warmup = WarmupIncremental
	// The warmup stops after the first block (the output is installed by
	// then) until its context ends: the release.
	paused := make(chan int)
	opts.Executor = &sourceExecutor{bucket: opts.Bucket, setup: func(s *fileSource) {
		s.pauseAt, s.paused, s.resume = 1, paused, make(chan struct{})
	}}
	info, want, m, err := releaseDuringCompaction(t, opts, func() { <-paused })
	if err != nil || info == nil || info.Output == "" {
		t.Fatalf("Compact: %+v, %v; want the installed compaction", info, err)
	}
	if !slices.ContainsFunc(m.Files, func(f manifest.FileMeta) bool { return f.Key == info.Output }) {
		t.Fatalf("released manifest does not name the installed output %s: %+v", info.Output, m.Files)
	}
	checkClaimedData(t, opts, want)
}

// ReleaseWith's hook runs once the region refuses writes and has flushed
// every acknowledged write, before the manifest marking it released: it
// sees its own manifest still unreleased, and a failing hook leaves the
// region closed, not released.
func TestReleaseWithRunsItsHookBeforeTheReleasedManifest(t *testing.T) {
	ctx := context.Background()
	for _, fail := range []bool{false, true} {
		t.Run(fmt.Sprintf("fail=%t", fail), func(t *testing.T) {
			opts := testOptions(t, t.TempDir())
			r := mustOpen(t, opts)
			if _, err := r.Put([]byte("k"), []byte("v")); err != nil {
				t.Fatal(err)
			}
			prefixed := opts.Bucket.Prefixed(BucketPrefix(opts.Name))
			errHook := errors.New("hook failed")
			ran := false
			err := r.ReleaseWith(ctx, func(ctx context.Context) error {
				ran = true
				if _, err := r.Put([]byte("late"), []byte("v")); !errors.Is(err, ErrReleasing) {
					t.Errorf("a write during the hook: %v, want ErrReleasing", err)
				}
				if v, ok, err := r.Get([]byte("k"), kv.MaxTimestamp); err != nil || !ok || string(v) != "v" {
					t.Errorf("a read during the hook: %q %v %v", v, ok, err)
				}
				m, err := manifest.Load(ctx, prefixed)
				if err != nil {
					return err
				}
				if m.Released || m.FlushedTS == 0 {
					t.Errorf("manifest %d during the hook: released=%t flushedTS=%d; want flushed, not released", m.Number, m.Released, m.FlushedTS)
				}
				if fail {
					return errHook
				}
				return nil
			})
			if !ran {
				t.Fatal("the hook did not run")
			}
			m, lerr := manifest.Load(ctx, prefixed)
			if lerr != nil {
				t.Fatal(lerr)
			}
			if fail {
				if !errors.Is(err, errHook) || m.Released {
					t.Fatalf("failing hook: %v, released=%t; want its error, not released", err, m.Released)
				}
				return
			}
			if err != nil || !m.Released {
				t.Fatalf("release: %v, released=%t", err, m.Released)
			}
		})
	}
}
