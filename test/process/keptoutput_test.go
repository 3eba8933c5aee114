package process

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	kvpb "github.com/bellows-kv/bellows/proto/bellows/kv/v1"
)

const cacheUsed = "bellows_compactor_cache_used_bytes"

// A small worker cache, offload Required and RemoteCache warmup: each
// compaction's output is kept on the worker while its file is live, and
// released when the next compaction replaces the file, when the store
// shuts down, or (after a crash) when the restarted store's new session
// reaches the worker. Compactions keep running: had the outputs leaked
// until the worker's 10-minute TTL, the cache (about three outputs) would
// fill by the fifth round and Required would wait minutes.
func TestKeptOutputsAreReleasedUnderASmallWorkerCache(t *testing.T) {
	const (
		rounds   = 6
		perRound = 50 // keys of 1 KiB: every round adds ~50 KiB of versions
		bound    = 20 * time.Second
	)
	dir := t.TempDir()
	bucket := "file://" + filepath.Join(dir, "bucket")
	wal := filepath.Join(dir, "wal")
	w := start(t, "w1", "compactor", "--name=w1", "--cache-bytes=1MiB")
	extra := "warmup: {mode: RemoteCache}\n"
	s := startStoreWith(t, bucket, wal, "Required", extra, w)
	want := load(t, s, 3, perRound)

	compact := func(s *proc, round int) {
		t.Helper()
		began := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), bound)
		defer cancel()
		resp, err := s.admin().Compact(ctx, &kvpb.CompactRequest{Region: region0, Major: true})
		took := time.Since(began)
		if err != nil || !resp.Compacted {
			t.Fatalf("round %d: compaction after %v: %v (compacted %v)", round, took.Round(time.Millisecond), err, resp.GetCompacted())
		}
		// The replaced file's output is released: only the live file's stays.
		waitFor(t, "the worker to keep only the live file's output", func() bool { return w.status(t).KeptOutputs == 1 })
		t.Logf("round %d: compaction took %v; worker keeps %.0f bytes", round, took.Round(time.Millisecond), w.metric(t, cacheUsed))
	}
	for round := range rounds {
		if round > 0 {
			for k, v := range load(t, s, 1, perRound) {
				want[k] = v
			}
		}
		compact(s, round)
	}
	if n := w.metric(t, "bellows_compactor_rejections_total"); n != 0 {
		t.Errorf("the worker refused %v jobs", n)
	}
	checkData(t, s, want)

	// A crash leaves the live file's output on the worker; the restarted
	// store's first job announces its new session and frees it.
	s.kill()
	if st := w.status(t); st.KeptOutputs != 1 {
		t.Fatalf("after the crash the worker keeps %d outputs, want the live file's", st.KeptOutputs)
	}
	s = startStoreWith(t, bucket, wal, "Required", extra, w)
	for k, v := range load(t, s, 1, perRound) {
		want[k] = v
	}
	compact(s, rounds)
	checkData(t, s, want)

	// A graceful shutdown closes the region: its live file's output goes too.
	s.terminate()
	waitFor(t, "the worker's kept bytes to return to zero", func() bool { return w.metric(t, cacheUsed) == 0 })
	if st := w.status(t); st.KeptOutputs != 0 || st.InflightJobs != 0 {
		t.Fatalf("worker status after the store left: %+v", st)
	}
}
