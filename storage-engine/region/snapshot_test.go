package region

import (
	"context"
	"errors"
	"fmt"
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

// With retention keeping one version, a disk compaction drops the versions
// a read at an older timestamp needs: such a read is refused as too old,
// instead of answering "not found" or a stale value, unless a snapshot
// pinned its timestamp before; a pin below what was dropped is refused;
// and a restart (the next owner) refuses the same reads.
func TestReadsBelowWhatRetentionDroppedAreRefusedUnlessPinned(t *testing.T) {
	ctx := context.Background()
	opts := inMemoryOptions(t, memstore.None)
	opts.DisableAutoCompaction = true
	r, err := Open(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { r.Close() }()
	var ts [3]uint64
	for i := range ts {
		if ts[i], err = r.Put([]byte("k"), []byte(fmt.Sprintf("v%d", i+1))); err != nil {
			t.Fatal(err)
		}
		if err := r.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if v, _, err := r.Get([]byte("k"), ts[0]); err != nil || string(v) != "v1" {
		t.Fatalf("before any compaction, read at %d = %q, %v; want v1", ts[0], v, err)
	}
	pin, err := r.SnapshotAt(ts[1])
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Compact(ctx, true); err != nil {
		t.Fatal(err)
	}
	refused := func(when string, read func() error) {
		t.Helper()
		var e *SnapshotTooOldError
		if err := read(); !errors.Is(err, ErrSnapshotTooOld) || !errors.As(err, &e) || e.ExactFrom != ts[2] {
			t.Fatalf("%s: %v; want a snapshot-too-old error exact from %d", when, err, ts[2])
		}
	}
	refused("a read below what the compaction judged", func() error { _, _, err := r.Get([]byte("k"), ts[0]); return err })
	refused("a scan there", func() error { _, err := r.Scan(nil, nil, 0, ts[0]); return err })
	refused("a pin there", func() error { _, err := r.SnapshotAt(ts[0]); return err })
	refused("a watch's catch-up after a dropped version", func() error {
		return FeedOf(r).Changes(ctx, nil, nil, ts[1], func(Change) error { return nil })
	})
	var after []string
	if err := FeedOf(r).Changes(ctx, nil, nil, ts[2], func(c Change) error { after = append(after, string(c.Value)); return nil }); err != nil || len(after) != 0 {
		t.Fatalf("a catch-up from the oldest exact timestamp: %v, %v; want nothing newer", after, err)
	}
	if v, _, err := r.Get([]byte("k"), ts[1]); err != nil || string(v) != "v2" {
		t.Fatalf("read at the pinned %d = %q, %v; want v2", ts[1], v, err)
	}
	if v, _, err := r.Get([]byte("k"), ts[2]); err != nil || string(v) != "v3" {
		t.Fatalf("read at %d = %q, %v; want v3", ts[2], v, err)
	}
	pin.Close()
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if r, err = Open(ctx, opts); err != nil {
		t.Fatal(err)
	}
	refused("after a restart", func() error { _, _, err := r.Get([]byte("k"), ts[1]); return err })
	if v, _, err := r.Get([]byte("k"), ts[2]); err != nil || string(v) != "v3" {
		t.Fatalf("after a restart, read at %d = %q, %v; want v3", ts[2], v, err)
	}
}

// In-memory compactions that keep one version refuse older reads the same
// way; keeping every version (the default) refuses none.
func TestInMemoryCompactionsRefuseReadsBelowTheirHorizon(t *testing.T) {
	for _, maxVersions := range []int{1, 0} {
		t.Run(fmt.Sprintf("maxVersions=%d", maxVersions), func(t *testing.T) {
			opts := inMemoryOptions(t, memstore.Eager)
			opts.Retention.MaxVersions = maxVersions
			r, err := Open(context.Background(), opts)
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			first, err := r.Put([]byte("k"), []byte("v1"))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := r.Put([]byte("k"), []byte("v2")); err != nil {
				t.Fatal(err)
			}
			// Overwrite hot keys until an in-memory compaction has judged
			// the first write (at most 50 rounds; each fills segments).
			for i := 0; i < 50 && r.ExactFrom() <= first; i++ {
				putHot(t, r, 50, 20)
			}
			_, _, err = r.Get([]byte("k"), first)
			if maxVersions == 0 {
				if err != nil || r.ExactFrom() != 0 {
					t.Fatalf("keeping every version: read at %d: %v, exact from %d; want no refusal", first, err, r.ExactFrom())
				}
				return
			}
			if r.ExactFrom() <= first {
				t.Fatalf("no in-memory compaction judged the first write in 50 rounds (exact from %d)", r.ExactFrom())
			}
			if !errors.Is(err, ErrSnapshotTooOld) {
				t.Fatalf("read at %d below the horizon %d: %v; want snapshot too old", first, r.ExactFrom(), err)
			}
		})
	}
}
