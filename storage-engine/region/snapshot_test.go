package region

import (
	"context"
	"testing"

	"github.com/bellows-kv/bellows/storage-engine/memstore"
)

// A snapshot pinned at a timestamp ahead of the region's clock (a
// transaction's start, taken from another store's clock) keeps the
// version a read at it needs through in-memory and disk compactions that
// keep one version, until it closes.
func TestSnapshotAtKeepsItsVersionsThroughCompactions(t *testing.T) {
	ctx := context.Background()
	opts := inMemoryOptions(t, memstore.Eager)
	opts.DisableAutoCompaction = true
	r, err := Open(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	first, err := r.Put([]byte("k"), []byte("v1"))
	if err != nil {
		t.Fatal(err)
	}
	start := first + 1000 // ahead of the clock
	if err := r.ReadableAt(start); err != nil {
		t.Fatal(err)
	}
	s, err := r.SnapshotAt(start)
	if err != nil {
		t.Fatal(err)
	}
	for round := range 3 {
		putHot(t, r, 50, 200) // in-memory compactions
		if _, err := r.Put([]byte("k"), []byte("v-later")); err != nil {
			t.Fatal(err)
		}
		if err := r.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		if round > 0 {
			if _, err := r.Compact(ctx, true); err != nil {
				t.Fatal(err)
			}
		}
	}
	if v, ok, err := r.Get([]byte("k"), start); err != nil || !ok || string(v) != "v1" {
		t.Fatalf("read at the pinned start = %q, %v, %v; want v1", v, ok, err)
	}
	s.Close()
	if got := r.Snapshots(); len(got) != 0 {
		t.Fatalf("snapshots after Close: %v", got)
	}
}
