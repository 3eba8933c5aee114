package process

import (
	"context"
	"path/filepath"
	"testing"

	kvpb "github.com/bellows-kv/bellows/proto/bellows/kv/v1"
	"github.com/bellows-kv/bellows/storage-engine/blob"
	"github.com/bellows-kv/bellows/storage-engine/region"
)

// A compactor that streams slowly, so the test can act mid-warmup.
func slowStreamingCompactor(t *testing.T, name string) *proc {
	return start(t, name, "compactor", "--name="+name, "--cache-bytes=64MiB", "--transfer-rate=40KB/s")
}

const incrementalWarmup = "warmup: {mode: Incremental}\n"

func warmupProgress(t *testing.T, s *proc) float64 {
	return s.metric(t, `bellows_warmup_progress_ratio{region="`+region0+`"}`)
}

// The compactor dies while the store warms up from its memory: the rest of
// the warmup reads the new file from the bucket, and nothing is lost.
func TestCompactorKilledWhileStreamingWarmupFinishesFromBucket(t *testing.T) {
	dir := t.TempDir()
	bucket := "file://" + filepath.Join(dir, "bucket")
	w := slowStreamingCompactor(t, "w1")
	s := startStoreWith(t, bucket, filepath.Join(dir, "wal"), "Required", incrementalWarmup, w)
	want := load(t, s, 3, 150)
	h := newHistory(s.kv(), 4, 64)
	h.start()
	done := compactAsync(s)
	waitFor(t, "the warmup to be under way", func() bool {
		p := warmupProgress(t, s)
		return p > 0 && p < 0.5
	})
	w.kill()
	if err := <-done; err != nil {
		t.Fatalf("compaction with a lost worker mid-warmup: %v", err)
	}
	h.stopAfterMore(20)
	h.check(t)
	if got := warmupProgress(t, s); got != 1 {
		t.Fatalf("warmup progress %v after the compaction, want 1", got)
	}
	if s.metric(t, `bellows_warmup_bytes_total{source="compactor"}`) == 0 || s.metric(t, `bellows_warmup_bytes_total{source="bucket"}`) == 0 {
		t.Fatal("want blocks from the compactor before the kill and from the bucket after it")
	}
	if m := checkManifest(t, bucket, region0); len(m.Files) != 1 {
		t.Fatalf("manifest lists %d files, want the compaction output only", len(m.Files))
	}
	checkData(t, s, want)
}

// The store dies during an incremental warmup: the manifest committed before
// the warmup began names only the new file, so the restarted store opens it
// and deletes the old ones.
func TestStoreKilledDuringWarmupReopensOnlyNewFiles(t *testing.T) {
	dir := t.TempDir()
	bucket := "file://" + filepath.Join(dir, "bucket")
	wal := filepath.Join(dir, "wal")
	w := slowStreamingCompactor(t, "w1")
	s := startStoreWith(t, bucket, wal, "Required", incrementalWarmup, w)
	want := load(t, s, 3, 150)
	before := checkManifest(t, bucket, region0)
	// The history spans the crash: writes acknowledged before it must be
	// read after the restart; writes that failed may or may not be.
	h := newHistory(s.kv(), 4, 64)
	h.start()
	_ = compactAsync(s)
	waitFor(t, "the warmup to be under way", func() bool {
		p := warmupProgress(t, s)
		return p > 0 && p < 0.5
	})
	s.kill()
	s2 := startStoreWith(t, bucket, wal, "Required", incrementalWarmup, w)
	h.setKV(s2.kv())
	h.stopAfterMore(40)
	h.check(t)
	m := checkManifest(t, bucket, region0)
	if len(m.Files) != 1 {
		t.Fatalf("after restart the manifest lists %d files, want the compaction output only", len(m.Files))
	}
	b, err := blob.Open(context.Background(), bucket)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	for _, old := range before.Files {
		if old.Key == m.Files[0].Key {
			t.Fatal("the output is one of the old files")
		}
		if ok, _ := b.Exists(context.Background(), region.ObjectKey(region0, old.Key)); ok {
			t.Fatalf("old file %s survived the restart", old.Key)
		}
	}
	resp, err := s2.kv().Regions(context.Background(), &kvpb.RegionsRequest{})
	if err != nil || len(resp.Regions) != 1 {
		t.Fatalf("regions after restart: %v %v", resp, err)
	}
	if got := s2.metric(t, `bellows_region_sst_files{region="`+region0+`"}`); got != 1 {
		t.Fatalf("restarted store opened %v files, want 1", got)
	}
	checkData(t, s2, want)
}
