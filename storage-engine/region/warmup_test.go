package region

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bellows-kv/bellows/storage-engine/blob"
	"github.com/bellows-kv/bellows/storage-engine/compaction"
	"github.com/bellows-kv/bellows/storage-engine/kv"
	"github.com/bellows-kv/bellows/storage-engine/sstable"
)

// fileSource serves a job's output blocks from the output file, the way a
// worker serves them from memory. It can pause after a number of blocks
// (so a test can look at a warmup midway) or fail there (a worker dying).
type fileSource struct {
	r        *sstable.Reader
	obj      blob.Object // r's file, closed by Release as a worker frees its copy
	pauseAt  int
	paused   chan int      // receives T's block index when pausing
	resume   chan struct{} // closed by the test to continue
	failAt   int
	released atomic.Bool
	remote   atomic.Int64 // Block calls
}

func (s *fileSource) Fetch(ctx context.Context, from int, _ int64, fn func(int, []byte) error) error {
	for i := from; i < s.r.NumBlocks(); i++ {
		if i == s.failAt {
			return errors.New("worker connection lost")
		}
		b, err := s.r.ReadStoredBlock(i)
		if err != nil {
			return err
		}
		if err := fn(i, b); err != nil {
			return err
		}
		if i+1 == s.pauseAt {
			s.paused <- i
			select {
			case <-s.resume:
			case <-ctx.Done(): // a worker's stream breaks too
				return ctx.Err()
			}
		}
	}
	return nil
}

func (s *fileSource) Block(_ context.Context, i int) ([]byte, error) {
	s.remote.Add(1)
	return s.r.ReadStoredBlock(i)
}

func (s *fileSource) Release(context.Context) error {
	if s.released.Swap(true) || s.obj == nil {
		return nil
	}
	return s.obj.Close()
}

// sourceExecutor runs the job locally and attaches a fileSource.
type sourceExecutor struct {
	bucket *blob.Bucket
	setup  func(*fileSource)
	last   *fileSource
}

func (e *sourceExecutor) Execute(ctx context.Context, job compaction.Job) (compaction.Result, error) {
	res, err := compaction.Local{Bucket: e.bucket}.Execute(ctx, job)
	if err != nil || res.Empty {
		return res, err
	}
	obj, err := e.bucket.OpenObject(ctx, job.Output)
	if err != nil {
		return res, err
	}
	rd, err := sstable.Open(obj, obj.Size(), job.Output, nil)
	if err != nil {
		_ = obj.Close()
		return res, err
	}
	s := &fileSource{r: rd, obj: obj, pauseAt: -1, failAt: -1}
	if e.setup != nil {
		e.setup(s)
	}
	e.last = s
	res.Blocks = s
	return res, nil
}

func key(i int) []byte { return []byte(fmt.Sprintf("key%05d", i)) }

// loadWarm writes n keys over three flushes and reads them all, so the
// old files are in the cache as in a steady state.
func loadWarm(t *testing.T, r *Region, n int) {
	t.Helper()
	for f := 0; f < 3; f++ {
		for i := f; i < n; i += 3 {
			if _, err := r.Put(key(i), bytes.Repeat([]byte{byte(i)}, 64)); err != nil {
				t.Fatal(err)
			}
		}
		if err := r.Flush(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < n; i++ {
		if _, ok, err := r.Get(key(i), kv.MaxTimestamp); !ok || err != nil {
			t.Fatalf("key %d: %v %v", i, ok, err)
		}
	}
}

func warmupRegion(t *testing.T, mode WarmupMode, setup func(*fileSource)) (*Region, *sourceExecutor) {
	t.Helper()
	opts := testOptions(t, t.TempDir())
	opts.DisableAutoCompaction = true
	opts.Warmup = mode
	opts.WarmupRateBytes = 1 << 30
	ex := &sourceExecutor{bucket: opts.Bucket, setup: setup}
	opts.Executor = ex
	r := mustOpen(t, opts)
	t.Cleanup(func() { r.Close() })
	loadWarm(t, r, 2000)
	return r, ex
}

func TestIncrementalWarmupServesEachReadFromOneSide(t *testing.T) {
	const pauseAt = 20
	paused := make(chan int)
	resume := make(chan struct{})
	r, ex := warmupRegion(t, WarmupIncremental, func(s *fileSource) {
		s.pauseAt, s.paused, s.resume = pauseAt, paused, resume
	})
	done := make(chan error)
	go func() {
		_, err := r.Compact(context.Background(), true)
		done <- err
	}()
	<-paused

	warming, T := r.Warming()
	out := ex.last.r
	if !warming || !bytes.Equal(T, blockLast(t, out, pauseAt-1)) {
		t.Fatalf("Warming() = %v, T=%q; want T = last key of block %d (%q)", warming, T, pauseAt-1, blockLast(t, out, pauseAt-1))
	}
	// The manifest already names only the new file: a restart now opens it.
	if m := r.Manifest(); len(m.Files) != 1 {
		t.Fatalf("manifest lists %d files during warmup, want only the output", len(m.Files))
	}
	// Old blocks ≤ T are gone from the cache; old blocks above T stay.
	r.mu.RLock()
	w := r.warm
	r.mu.RUnlock()
	aboveCached := 0
	for _, in := range w.inputs {
		for i := 0; i < in.reader.NumBlocks(); i++ {
			last := blockLast(t, in.reader, i)
			switch below := bytes.Compare(last, T) <= 0; {
			case below && in.reader.BlockCached(i):
				t.Fatalf("old block %d of %s (last key %q ≤ T) is still cached", i, in.key, last)
			case !below && in.reader.BlockCached(i):
				aboveCached++
			}
		}
	}
	if aboveCached == 0 {
		t.Fatal("every old block above T was evicted; they must stay until T passes them")
	}
	// A get above T reads the old files, all still cached: no new block is
	// loaded and the cache sees no miss.
	missesBefore := r.opts.BlockCache.Stats().Misses
	above := key(1999)
	if v, ok, err := r.Get(above, kv.MaxTimestamp); err != nil || !ok || v[0] != byte(1999%256) {
		t.Fatalf("get above T: %v %v %v", v, ok, err)
	}
	for i := pauseAt; i < out.NumBlocks(); i++ {
		if r.current.tables[0].reader.BlockCached(i) {
			t.Fatalf("a read above T loaded new block %d", i)
		}
	}
	if m := r.opts.BlockCache.Stats().Misses; m != missesBefore {
		t.Fatalf("get above T missed the cache %d times; the old blocks were warm", m-missesBefore)
	}
	// A get at or below T reads the new file, from the warmed blocks.
	if v, ok, err := r.Get(T, kv.MaxTimestamp); err != nil || !ok || len(v) != 64 {
		t.Fatalf("get at T: %v %v %v", v, ok, err)
	}
	if m := r.opts.BlockCache.Stats().Misses; m != missesBefore {
		t.Fatal("get at T missed the cache: the new blocks ≤ T were fetched")
	}
	// A scan starting above T is served wholly by the old files even though
	// T may pass it; one starting below T by the new one.
	rows, err := r.Scan(above, nil, 0, kv.MaxTimestamp)
	if err != nil || len(rows) != 1 {
		t.Fatalf("scan above T: %d rows, %v", len(rows), err)
	}
	// A flush during the warmup is visible on both sides of T.
	if _, err := r.Put(key(0), []byte("new-below")); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Put(key(1999), []byte("new-above")); err != nil {
		t.Fatal(err)
	}
	if err := r.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	for k, want := range map[int]string{0: "new-below", 1999: "new-above"} {
		if v, ok, err := r.Get(key(k), kv.MaxTimestamp); err != nil || !ok || string(v) != want {
			t.Fatalf("after a flush during warmup, key %d = %q,%v,%v; want %q", k, v, ok, err, want)
		}
	}
	close(resume)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if warming, _ := r.Warming(); warming {
		t.Fatal("still warming after the compaction returned")
	}
	if !ex.last.released.Load() {
		t.Fatal("the worker's copy was not released")
	}
	for i := 0; i < out.NumBlocks(); i++ {
		if !r.current.tables[0].reader.BlockCached(i) {
			t.Fatalf("new block %d not cached after warmup", i)
		}
	}
	if len(r.current.tables) != 2 {
		t.Fatalf("after warmup %d files, want the output and the flush", len(r.current.tables))
	}
	for _, in := range w.inputs {
		if ok, _ := r.bucket.Exists(context.Background(), in.key); ok {
			t.Fatalf("old file %s survived the warmup with no reader left", in.key)
		}
	}
	if st := r.WarmupStats(); st.BytesFromCompactor.Load() == 0 || st.BytesFromBucket.Load() != 0 || st.Progress.Load() != 1e6 {
		t.Fatalf("warmup stats: compactor %d, bucket %d, progress %d", st.BytesFromCompactor.Load(), st.BytesFromBucket.Load(), st.Progress.Load())
	}
	for i := 7; i < 1999; i += 7 {
		if v, ok, _ := r.Get(key(i), kv.MaxTimestamp); !ok || v[0] != byte(i) {
			t.Fatalf("key %d after warmup: %v %v", i, v, ok)
		}
	}
}

func TestWorkerLostDuringWarmupFinishesFromBucket(t *testing.T) {
	r, ex := warmupRegion(t, WarmupThrottledIncremental, func(s *fileSource) { s.failAt = 7 })
	if _, err := r.Compact(context.Background(), true); err != nil {
		t.Fatal(err)
	}
	st := r.WarmupStats()
	if st.BytesFromCompactor.Load() == 0 || st.BytesFromBucket.Load() == 0 {
		t.Fatalf("want blocks from both sources, got compactor %d bucket %d", st.BytesFromCompactor.Load(), st.BytesFromBucket.Load())
	}
	out := r.current.tables[0].reader
	for i := 0; i < out.NumBlocks(); i++ {
		if !out.BlockCached(i) {
			t.Fatalf("block %d not warmed", i)
		}
	}
	if !ex.last.released.Load() {
		t.Fatal("not released")
	}
}

func TestPreSwitchWarmsEverythingBeforeTheSwitch(t *testing.T) {
	r, _ := warmupRegion(t, WarmupPreSwitch, nil)
	if _, err := r.Compact(context.Background(), true); err != nil {
		t.Fatal(err)
	}
	out := r.current.tables[0].reader
	for i := 0; i < out.NumBlocks(); i++ {
		if !out.BlockCached(i) {
			t.Fatalf("block %d not warmed", i)
		}
	}
	if r.WarmupStats().BytesFromBucket.Load() != 0 {
		t.Fatal("pre-switch read the bucket although the worker served every block")
	}
}

// Misses on the new file go to the worker while the file is live; the
// worker's copy is released once the file leaves the version (compacted
// away) and when the region is released, not only by the worker's TTL.
func TestRemoteCacheServesMissesFromTheWorker(t *testing.T) {
	r, ex := warmupRegion(t, WarmupRemoteCache, nil)
	if _, err := r.Compact(context.Background(), true); err != nil {
		t.Fatal(err)
	}
	if v, ok, err := r.Get(key(1234), kv.MaxTimestamp); err != nil || !ok || v[0] != byte(1234%256) {
		t.Fatalf("get: %v %v %v", v, ok, err)
	}
	first := ex.last
	if first.remote.Load() == 0 {
		t.Fatal("a miss on the new file did not go to the worker")
	}
	if first.released.Load() {
		t.Fatal("remote cache mode released the worker's copy while still using it")
	}
	// The next compaction replaces the file: its copy is released.
	if _, err := r.Compact(context.Background(), true); err != nil {
		t.Fatal(err)
	}
	second := ex.last
	if second == first {
		t.Fatal("the second compaction kept no output")
	}
	awaitTrue(t, "the compacted-away file's copy released", first.released.Load)
	if second.released.Load() {
		t.Fatal("the live file's copy was released")
	}
	if err := r.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	awaitTrue(t, "the released region's copy released", second.released.Load)
}

// awaitTrue polls cond: a release runs off the closing path.
func awaitTrue(t *testing.T, what string, cond func() bool) {
	t.Helper()
	awaitWithin(t, 10*time.Second, what, cond)
}

// awaitWithin polls cond until it holds, failing the test after d.
func awaitWithin(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestThrottledWarmupNeedsARate(t *testing.T) {
	opts := testOptions(t, t.TempDir())
	opts.Warmup = WarmupThrottledIncremental
	if _, err := Open(context.Background(), opts); err == nil {
		t.Fatal("ThrottledIncremental without a rate was accepted")
	}
}

// Every mode's name parses back to the mode, in any case; nothing else
// parses.
func TestWarmupModeNamesRoundTrip(t *testing.T) {
	want := map[WarmupMode]string{
		WarmupNone:                 "None",
		WarmupOffload:              "Offload",
		WarmupRemoteCache:          "RemoteCache",
		WarmupPreSwitch:            "PreSwitch",
		WarmupIncremental:          "Incremental",
		WarmupThrottledIncremental: "ThrottledIncremental",
		WarmupWriteThrough:         "WriteThrough",
	}
	for m := WarmupNone; m <= WarmupWriteThrough; m++ {
		if got := m.String(); got != want[m] {
			t.Errorf("WarmupMode(%d).String() = %q, want %q", int(m), got, want[m])
		}
		for _, name := range []string{m.String(), strings.ToLower(m.String()), strings.ToUpper(m.String())} {
			if got, err := ParseWarmupMode(name); err != nil || got != m {
				t.Errorf("ParseWarmupMode(%q) = %v, %v; want %v", name, got, err, m)
			}
		}
	}
	if got := WarmupMode(len(want)).String(); got != "WarmupMode(7)" {
		t.Errorf("an unknown mode's String() = %q, want WarmupMode(7)", got)
	}
	for _, bad := range []string{"", "Sideways", "WarmupMode(7)", "Incremental ", "Throttled"} {
		_, err := ParseWarmupMode(bad)
		want := fmt.Sprintf("unknown warmup mode %q (want one of None, Offload, RemoteCache, PreSwitch, Incremental, ThrottledIncremental, WriteThrough)", bad)
		if err == nil || err.Error() != want {
			t.Errorf("ParseWarmupMode(%q): err = %v, want %q", bad, err, want)
		}
	}
}

func TestConcurrentReadsDuringIncrementalWarmupAreCorrect(t *testing.T) {
	opts := testOptions(t, t.TempDir())
	opts.DisableAutoCompaction = true
	opts.Warmup = WarmupThrottledIncremental
	opts.WarmupRateBytes = 4 << 20 // slow enough that reads overlap the warmup
	opts.Executor = &sourceExecutor{bucket: opts.Bucket}
	r := mustOpen(t, opts)
	defer r.Close()
	loadWarm(t, r, 3000)
	stop := make(chan struct{})
	errs := make(chan error, 4)
	var reads atomic.Int64
	for g := 0; g < 4; g++ {
		go func(g int) {
			for i := g; ; i = (i + 37) % 3000 {
				select {
				case <-stop:
					errs <- nil
					return
				default:
				}
				if g%2 == 0 {
					v, ok, err := r.Get(key(i), kv.MaxTimestamp)
					if err != nil || !ok || len(v) != 64 || v[0] != byte(i) {
						errs <- fmt.Errorf("get %d during warmup: %v %v %v", i, v, ok, err)
						return
					}
				} else {
					rows, err := r.Scan(key(i), nil, 10, kv.MaxTimestamp)
					if err != nil || len(rows) != min(10, 3000-i) || !bytes.Equal(rows[0].Key, key(i)) {
						errs <- fmt.Errorf("scan from %d during warmup: %d rows, %v", i, len(rows), err)
						return
					}
				}
				reads.Add(1)
			}
		}(g)
	}
	if _, err := r.Compact(context.Background(), true); err != nil {
		t.Fatal(err)
	}
	close(stop)
	for g := 0; g < 4; g++ {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if reads.Load() == 0 {
		t.Fatal("no read overlapped the warmup")
	}
}

// blockLast is data block i's last user key.
func blockLast(t testing.TB, rd *sstable.Reader, i int) []byte {
	t.Helper()
	last, err := rd.BlockLastUserKey(i)
	if err != nil {
		t.Fatal(err)
	}
	return last
}
