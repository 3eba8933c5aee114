package process

import (
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	kvpb "github.com/bellows-kv/bellows/proto/bellows/kv/v1"
	"github.com/bellows-kv/bellows/storage-engine/blob"
	"github.com/bellows-kv/bellows/storage-engine/manifest"
	"github.com/bellows-kv/bellows/storage-engine/region"
	"github.com/bellows-kv/bellows/storage-engine/server"
)

const region0 = "region-000"

// slowCompactor is throttled so a job runs for seconds: long enough to kill
// it mid-way once Status shows it in flight.
func slowCompactor(t *testing.T, name string) *proc {
	return start(t, name, "compactor", "--name="+name, "--cache-bytes=64MiB", "--compaction-rate-limit=100KB/s")
}

// noAutoCompaction is engine.yaml with a policy that never selects a minor
// compaction for these small tests, so the only compaction is the one the
// test asks for.
const noAutoCompaction = "compaction: {minFiles: 50, maxFiles: 50, ratio: 1.2, maxBytes: 1073741824}\n"

func startStore(t *testing.T, bucket, walDir, mode string, compactors ...*proc) *proc {
	return startStoreWith(t, bucket, walDir, mode, "", compactors...)
}

// storeArgs are a one-region store's flags; extra adds engine.yaml lines.
func storeArgs(t *testing.T, bucket, walDir, mode, extra string) []string {
	config := filepath.Join(t.TempDir(), "engine.yaml")
	if err := os.WriteFile(config, []byte(noAutoCompaction+extra), 0o644); err != nil {
		t.Fatal(err)
	}
	return []string{"store", "--create-bucket", "--bucket=" + bucket, "--wal-dir=" + walDir, "--config=" + config, "--regions=1", "--offload=" + mode}
}

// startStoreWith adds extra engine.yaml lines (e.g. the warmup mode).
func startStoreWith(t *testing.T, bucket, walDir, mode, extra string, compactors ...*proc) *proc {
	args := storeArgs(t, bucket, walDir, mode, extra)
	var addrs []string
	for _, c := range compactors {
		addrs = append(addrs, c.grpc)
	}
	if len(addrs) > 0 {
		args = append(args, "--compactors="+strings.Join(addrs, ","))
	}
	return start(t, "store", args...)
}

// load writes files×perFile keys of 1 KiB random values, flushing after each
// batch so the region has that many SSTs, and returns what it wrote.
func load(t *testing.T, s *proc, files, perFile int) map[string][]byte {
	t.Helper()
	ctx := context.Background()
	want := map[string][]byte{}
	for f := range files {
		for i := range perFile {
			k := fmt.Sprintf("bulk-%02d-%04d", f, i)
			v := make([]byte, 1024)
			_, _ = rand.Read(v)
			if _, err := s.kv().Put(ctx, &kvpb.PutRequest{Key: []byte(k), Value: v}); err != nil {
				t.Fatal(err)
			}
			want[k] = v
		}
		if _, err := s.admin().Flush(ctx, &kvpb.FlushRequest{}); err != nil {
			t.Fatal(err)
		}
	}
	return want
}

// checkData reads every written key back.
func checkData(t *testing.T, s *proc, want map[string][]byte) {
	t.Helper()
	for k, v := range want {
		got, err := s.kv().Get(context.Background(), &kvpb.GetRequest{Key: []byte(k)})
		if err != nil || !got.Found || string(got.Value) != string(v) {
			t.Fatalf("key %s after the fault: found=%v err=%v", k, got.GetFound(), err)
		}
	}
}

// checkManifest: the region's manifest names only files that exist.
func checkManifest(t *testing.T, bucketURL, name string) manifest.Manifest {
	t.Helper()
	ctx := context.Background()
	b, err := blob.Open(ctx, bucketURL)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	rb := b.Prefixed(region.BucketPrefix(name))
	m, err := manifest.Load(ctx, rb)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range m.Files {
		if ok, err := rb.Exists(ctx, f.Key); err != nil || !ok {
			t.Fatalf("manifest %d names %s, which does not exist (err %v)", m.Number, f.Key, err)
		}
	}
	return m
}

// compactAsync starts a major compaction through the store's Admin API.
func compactAsync(s *proc) <-chan error {
	done := make(chan error, 1)
	go func() {
		resp, err := s.admin().Compact(context.Background(), &kvpb.CompactRequest{Region: region0, Major: true})
		if err == nil && !resp.Compacted {
			err = fmt.Errorf("nothing compacted")
		}
		done <- err
	}()
	return done
}

// killRunning waits until one of the workers has the job in flight and
// SIGKILLs it.
func killRunning(t *testing.T, workers ...*proc) *proc {
	t.Helper()
	var victim *proc
	waitFor(t, "a compactor running the job", func() bool {
		for _, w := range workers {
			if w.status(t).InflightJobs > 0 {
				victim = w
				return true
			}
		}
		return false
	})
	victim.kill()
	return victim
}

// A compactor dies mid-compaction: the store's Compact stream breaks, the
// job is retried on the other compactor (Required mode), nothing is
// half-installed, and a concurrent client history stays linearizable.
func TestCompactorKilledJobRetriedOnAnother(t *testing.T) {
	dir := t.TempDir()
	bucket := "file://" + filepath.Join(dir, "bucket")
	a, b := slowCompactor(t, "compactor-a"), slowCompactor(t, "compactor-b")
	s := startStore(t, bucket, filepath.Join(dir, "wal"), "Required", a, b)
	want := load(t, s, 3, 100)

	h := newHistory(s.kv(), 4, 4)
	h.start()
	done := compactAsync(s)
	victim := killRunning(t, a, b)
	survivor := a
	if victim == a {
		survivor = b
	}
	if err := <-done; err != nil {
		t.Fatalf("compaction after %s was killed: %v", victim.name, err)
	}
	h.stopAfterMore(20)
	h.check(t)

	if n := s.metric(t, `bellows_compaction_attempts_total{worker_outcome="unavailable"}`); n < 1 {
		t.Fatalf("the killed attempt was not counted as an unavailable worker: %v", n)
	}
	// The compaction succeeded on its retry: it is no failure.
	if n := s.metric(t, `bellows_compactions_total{location="remote",result="failure"}`); n != 0 {
		t.Fatalf("remote failures: %v", n)
	}
	if n := s.metric(t, `bellows_compactions_total{location="remote",result="success"}`); n != 1 {
		t.Fatalf("remote successes: %v", n)
	}
	if n := s.metric(t, `bellows_compactions_total{location="local",result="success"}`); n != 0 {
		t.Fatalf("Required mode compacted locally: %v", n)
	}
	if n := survivor.metric(t, `bellows_compactor_jobs_total{result="success"}`); n != 1 {
		t.Fatalf("%s ran %v jobs", survivor.name, n)
	}
	m := checkManifest(t, bucket, region0)
	if len(m.Files) != 1 {
		t.Fatalf("after a major compaction the manifest names %d files", len(m.Files))
	}
	checkData(t, s, want)
}

// In Preferred mode a job whose only compactor died runs in the store.
func TestCompactorKilledPreferredCompactsLocally(t *testing.T) {
	dir := t.TempDir()
	bucket := "file://" + filepath.Join(dir, "bucket")
	c := slowCompactor(t, "compactor")
	s := startStore(t, bucket, filepath.Join(dir, "wal"), "Preferred", c)
	want := load(t, s, 3, 100)
	h := newHistory(s.kv(), 4, 4)
	h.start()
	done := compactAsync(s)
	killRunning(t, c)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	h.stopAfterMore(20)
	h.check(t)
	if n := s.metric(t, `bellows_compactions_total{location="local",result="success"}`); n != 1 {
		t.Fatalf("local successes: %v", n)
	}
	checkManifest(t, bucket, region0)
	checkData(t, s, want)
}

// The store dies while its job runs remotely: the compactor sees the broken
// stream, aborts the job and frees the memory it reserved. The store restarts
// on its WAL, and a client history across the crash (compare-and-sets
// among its writes) is linearizable.
func TestStoreKilledCompactorAborts(t *testing.T) {
	dir := t.TempDir()
	bucket := "file://" + filepath.Join(dir, "bucket")
	c := slowCompactor(t, "compactor")
	s := startStore(t, bucket, filepath.Join(dir, "wal"), "Required", c)
	want := load(t, s, 3, 100)
	h := newHistory(s.kv(), 4, 8)
	h.cas = true
	h.start()
	compactAsync(s)
	waitFor(t, "the job in flight with memory reserved", func() bool {
		st := c.status(t)
		return st.InflightJobs == 1 && st.CacheUsedBytes > 0
	})
	s.kill()
	waitFor(t, "the job aborted and its memory freed", func() bool {
		st := c.status(t)
		return st.InflightJobs == 0 && st.CacheUsedBytes == 0
	})
	if n := c.metric(t, `bellows_compactor_jobs_total{result="aborted"}`); n != 1 {
		t.Fatalf("aborted jobs: %v", n)
	}
	if n := c.metric(t, "bellows_compactor_cache_used_bytes"); n != 0 {
		t.Fatalf("cache used after abort: %v", n)
	}
	// The region reopens from its manifest with every file present, and
	// serves every acknowledged write.
	checkManifest(t, bucket, region0)
	s2 := startStore(t, bucket, filepath.Join(dir, "wal"), "Required", c)
	h.setKV(s2.kv())
	h.stopAfterMore(40)
	h.check(t)
	checkData(t, s2, want)
}

// startNamedStore is a one-region store with extra flags and no compactors.
func startNamedStore(t *testing.T, name, bucket, walDir string, flags ...string) *proc {
	return start(t, name, append(storeArgs(t, bucket, walDir, "Disabled", ""), flags...)...)
}

// Two stores are assigned one region (a region moving between pods). The
// second may not claim it while the first owns it, because the first's
// unflushed writes exist only in its WAL: it serves UNAVAILABLE for the
// region and waits. The first keeps serving; on SIGTERM it flushes and
// releases the region, the second claims it, and a client history that ran
// against the first up to its shutdown and then against the second is
// linearizable: no write the first acknowledged is lost.
func TestSecondStoreClaimsTheRegionOnlyAfterRelease(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	bucket := "file://" + filepath.Join(dir, "bucket")
	old := startNamedStore(t, "store-old", bucket, filepath.Join(dir, "wal-old"))
	want := load(t, old, 2, 100)
	h := newHistory(old.kv(), 4, 4)
	h.start()

	cur := startNamedStore(t, "store-new", bucket, filepath.Join(dir, "wal-new"))
	if n := cur.metric(t, "bellows_regions_waiting"); n != 1 {
		t.Fatalf("new store: %v regions waiting, want 1", n)
	}
	_, err := cur.kv().Get(ctx, &kvpb.GetRequest{Key: []byte("k")})
	// The owner is named exactly: quoted, as manifest.OwnedError prints it.
	owner := fmt.Sprintf("%s: %q (manifest ", manifest.ErrOwned, fmt.Sprintf("%s pid %d", hostname(t), old.cmd.Process.Pid))
	if status.Code(err) != codes.Unavailable || server.RegionOf(err) != region0 || !strings.Contains(status.Convert(err).Message(), owner) {
		t.Fatalf("new store before the release: want UNAVAILABLE about %s naming its owner (%s...), got %v (region %q)", region0, owner, err, server.RegionOf(err))
	}
	// The owner is undisturbed: the history keeps running against it.
	waitFor(t, "the history to record operations against the owner", func() bool {
		h.mu.Lock()
		defer h.mu.Unlock()
		return len(h.ops) >= 200
	})
	old.terminate()
	if !strings.Contains(old.stderr.String(), ` msg="released regions" `) {
		t.Fatalf("old store did not release its region:\n%s", old.stderr.String())
	}
	waitFor(t, "the new store to claim the released region", func() bool {
		return cur.metric(t, "bellows_regions_waiting") == 0 && cur.metric(t, "bellows_regions") == 1
	})
	h.setKV(cur.kv())
	h.stopAfterMore(50)
	h.check(t)
	checkData(t, cur, want)
	m := checkManifest(t, bucket, region0)
	if m.Released {
		t.Fatalf("manifest %d: the new owner's claim should not be marked released", m.Number)
	}
}

// A forced takeover (the old owner's WAL is declared lost) fences the old
// owner: it notices the newer manifest within its ownership check interval,
// without committing anything itself, and refuses writes with
// FAILED_PRECONDITION; the new owner serves the flushed data. What the old
// owner acknowledged but did not flush is forfeited by definition, so there
// is no history to check here.
func TestForcedTakeoverFencesTheStaleStore(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	bucket := "file://" + filepath.Join(dir, "bucket")
	old := startNamedStore(t, "store-old", bucket, filepath.Join(dir, "wal-old"), "--ownership-check-interval=50ms")
	if _, err := old.kv().Put(ctx, &kvpb.PutRequest{Key: []byte("k1"), Value: []byte("v1")}); err != nil {
		t.Fatal(err)
	}
	if _, err := old.admin().Flush(ctx, &kvpb.FlushRequest{}); err != nil {
		t.Fatal(err)
	}
	cur := startNamedStore(t, "store-new", bucket, filepath.Join(dir, "wal-new"), "--force-takeover")
	got, err := cur.kv().Get(ctx, &kvpb.GetRequest{Key: []byte("k1")})
	if err != nil || string(got.Value) != "v1" {
		t.Fatalf("new owner reads k1: %v %v", got, err)
	}
	var last error
	waitFor(t, "the stale store to refuse writes", func() bool {
		_, last = old.kv().Put(ctx, &kvpb.PutRequest{Key: []byte("k2"), Value: []byte("stale")})
		return last != nil
	})
	if status.Code(last) != codes.FailedPrecondition || server.RegionOf(last) != region0 || !strings.Contains(status.Convert(last).Message(), manifest.ErrFenced.Error()) {
		t.Fatalf("stale put: want FAILED_PRECONDITION about %s saying it is fenced, got %v (region %q)", region0, last, server.RegionOf(last))
	}
	if _, err := cur.kv().Put(ctx, &kvpb.PutRequest{Key: []byte("k4"), Value: []byte("v4")}); err != nil {
		t.Fatalf("new owner write: %v", err)
	}
	if _, err := cur.admin().Flush(ctx, &kvpb.FlushRequest{}); err != nil {
		t.Fatalf("new owner flush: %v", err)
	}
	checkManifest(t, bucket, region0)
}

func hostname(t *testing.T) string {
	h, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	return h
}
