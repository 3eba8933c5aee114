package region

import (
	"errors"
	"testing"
	"time"

	"github.com/bellows-kv/bellows/storage-engine/kv"
	"github.com/bellows-kv/bellows/storage-engine/wal"
	"github.com/bellows-kv/bellows/storage-engine/walarchive"
)

// A store that took a region over while its owner still runs (cut off, or
// paused past its lease) has every write the owner acknowledged, and the
// owner acknowledges nothing after: its next write fails at the fence.
func TestAnOwnerCutOffCannotAcknowledgeAfterATakeover(t *testing.T) {
	dir := t.TempDir()
	opts := testOptions(t, dir)
	opts.WALMode = wal.ModeAsync
	opts.WALInBucket = true
	opts.WALArchiveInterval = time.Hour // the frontier only; every record is in the stream already
	old := mustOpen(t, opts)
	for _, k := range []string{"a", "b", "c"} {
		if _, err := old.Put([]byte(k), []byte("v-"+k)); err != nil {
			t.Fatal(err)
		}
	}

	next := opts
	next.WALDir = t.TempDir()
	next.ForceTakeover = true
	r := mustOpen(t, next)
	defer func() { _ = r.Close() }()
	for _, k := range []string{"a", "b", "c"} {
		v, ok, err := r.Get([]byte(k), kv.MaxTimestamp)
		if err != nil || !ok || string(v) != "v-"+k {
			t.Fatalf("after the takeover %s reads %q, %v, %v: want v-%s", k, v, ok, err, k)
		}
	}
	if _, err := old.Put([]byte("d"), []byte("late")); !errors.Is(err, walarchive.ErrFenced) || !errors.Is(err, ErrFenced) {
		t.Fatalf("the old owner's write after the takeover: %v, want ErrFenced (the stream's, as the region's)", err)
	}
	if _, ok, _ := r.Get([]byte("d"), kv.MaxTimestamp); ok {
		t.Fatal("a write refused by the fence is visible at the new owner")
	}
	// The new owner flushed what it replayed: its own restart does not
	// need the fenced stream.
	if got := r.Recovery().ReplayedRecords; got != 3 {
		t.Fatalf("the takeover replayed %d records, want 3", got)
	}
	_ = old.Close()
	if _, err := r.Put([]byte("e"), []byte("new")); err != nil {
		t.Fatal(err)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	next.ForceTakeover = false
	r = mustOpen(t, next)
	for _, k := range []string{"a", "b", "c", "e"} {
		if _, ok, err := r.Get([]byte(k), kv.MaxTimestamp); err != nil || !ok {
			t.Fatalf("after the new owner's restart %s is missing (%v)", k, err)
		}
	}
}
