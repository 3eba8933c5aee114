package compactor

import (
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/bellows-kv/bellows/storage-engine/compaction/compactionwire"
)

// A refusal says whether the job waits for room (cache full) or can never
// fit (larger than the whole cache).
func TestRefusalSaysWhy(t *testing.T) {
	w := New(Options{Name: "w", CacheBytes: 1000})
	if err := w.admit("a", 600); err != nil {
		t.Fatal(err)
	}
	for id, want := range map[string]string{
		"b": "cache full: job b needs 600 B, 400 B of 1000 B free",
		"c": "job c needs 1.0 KiB, larger than the whole cache (1000 B)",
	} {
		size := int64(600)
		if id == "c" {
			size = 1024
		}
		err := w.admit(id, size)
		if status.Code(err) != codes.ResourceExhausted || !strings.Contains(status.Convert(err).Message(), want) {
			t.Errorf("admit %s: %v, want RESOURCE_EXHAUSTED saying %q", id, err, want)
		}
		if m, ok := compactionwire.LargerThanCache(err); ok != (id == "c") || (ok && m != 1000) {
			t.Errorf("admit %s: LargerThanCache = %d, %v", id, m, ok)
		}
	}
}

// A kept output never keeps a job out: its blocks are in the bucket, so
// admission evicts it (oldest first) and the job runs; an output a store
// is streaming stays until the stream ends; running jobs still refuse.
func TestKeptOutputsAreEvictedToAdmitAJob(t *testing.T) {
	w := New(Options{Name: "w", CacheBytes: 1000})
	keep := func(id string, bytes int64) {
		t.Helper()
		if err := w.admit(id, bytes); err != nil {
			t.Fatal(err)
		}
		w.finish(id, &keptOutput{bytes: bytes})
	}
	keep("old", 300)
	keep("new", 300)
	// 400 free: a job of 500 evicts the oldest output only.
	if err := w.admit("j1", 500); err != nil {
		t.Fatalf("a job refused while the cache holds only kept outputs: %v", err)
	}
	if w.kept["old"] != nil || w.kept["new"] == nil {
		t.Fatalf("evicted the wrong output: old kept %v, new kept %v", w.kept["old"] != nil, w.kept["new"] != nil)
	}
	w.finish("j1", nil)

	// An output being streamed is not evicted.
	_, done := w.openStream("new")
	if err := w.admit("j2", 800); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("a job that needs a streamed output's room: %v, want RESOURCE_EXHAUSTED", err)
	}
	done()
	if err := w.admit("j2", 800); err != nil {
		t.Fatalf("after the stream ended: %v", err)
	}
	// Running jobs are not evicted.
	if err := w.admit("j3", 300); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("a job with running jobs holding the cache: %v, want RESOURCE_EXHAUSTED", err)
	}
	if w.rejected != 2 {
		t.Fatalf("%d refusals, want 2 (the streamed output, the running job)", w.rejected)
	}
}
