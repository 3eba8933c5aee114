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
