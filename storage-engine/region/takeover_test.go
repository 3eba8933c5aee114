package region

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/bellows-kv/bellows/storage-engine/blob"
	"github.com/bellows-kv/bellows/storage-engine/kv"
	"github.com/bellows-kv/bellows/storage-engine/manifest"
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
	checkTakenOver(t, r, "after the takeover")
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

// A store that claims a region taken over from a dead owner and then fails
// before it has flushed what it replayed (its open gives up: the claim is
// given back) passes the dead owner's stream on with the region: the next
// opener replays it, and no write the dead owner acknowledged is lost. The
// next opener's flush then drops the fenced stream from the manifest.
func TestATakeoverThatFailsBeforeItsFlushPassesTheDeadOwnersStreamOn(t *testing.T) {
	dir := t.TempDir()
	opts := testOptions(t, dir)
	opts.WALMode = wal.ModeAsync
	opts.WALInBucket = true
	opts.WALArchiveInterval = time.Hour
	dead := mustOpen(t, opts)
	for _, k := range []string{"a", "b", "c"} {
		if _, err := dead.Put([]byte(k), []byte("v-"+k)); err != nil {
			t.Fatal(err)
		}
	}
	// dead is abandoned unflushed: its node is gone.

	// The failing taker reads the bucket slowly, so that its open is
	// cancelled between its claim and the end of its replay.
	slowURL, err := blob.WithCostModel("file://"+dir+"/bucket", blob.CostModel{Latency: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	slow, err := blob.Open(ctx, slowURL)
	if err != nil {
		t.Fatal(err)
	}
	taker := opts
	taker.Bucket = slow
	taker.WALDir = t.TempDir()
	taker.ForceTakeover = true
	manifests := opts.Bucket.Prefixed(BucketPrefix(opts.Name))
	first, err := manifest.Load(ctx, manifests)
	if err != nil {
		t.Fatal(err)
	}
	openCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	opened := make(chan error, 1)
	go func() {
		r, err := Open(openCtx, taker)
		if err == nil {
			_ = r.Close()
		}
		opened <- err
	}()
	for {
		m, err := manifest.Load(ctx, manifests)
		if err != nil {
			t.Fatal(err)
		}
		if m.Number > first.Number {
			break // claimed
		}
		select {
		case err := <-opened:
			t.Fatalf("the taker's open ended before its claim: %v", err)
		case <-time.After(2 * time.Millisecond):
		}
	}
	cancel()
	if err := <-opened; err == nil {
		t.Fatal("the taker's open succeeded although it was cancelled after its claim; the test needs it to fail")
	}

	next := opts
	next.WALDir = t.TempDir()
	next.ForceTakeover = true
	r := mustOpen(t, next)
	defer func() { _ = r.Close() }()
	checkTakenOver(t, r, "after a failed takeover and the next,")
	m, err := manifest.Load(ctx, manifests)
	if err != nil {
		t.Fatal(err)
	}
	if len(m.TakenOverWALs) != 0 {
		t.Fatalf("after the next owner's flush the manifest still names taken-over streams %v", m.TakenOverWALs)
	}
	if _, err := dead.Put([]byte("z"), []byte("late")); err == nil {
		t.Fatal("the dead owner acknowledged a write after two takeovers")
	}
	_ = dead.Close()
}

// checkTakenOver fails t unless r reads the dead owner's writes a, b and c
// (v-a, v-b, v-c).
func checkTakenOver(t *testing.T, r *Region, when string) {
	t.Helper()
	for _, k := range []string{"a", "b", "c"} {
		v, ok, err := r.Get([]byte(k), kv.MaxTimestamp)
		if err != nil || !ok || string(v) != "v-"+k {
			t.Fatalf("%s %s reads %q, %v, %v: want v-%s", when, k, v, ok, err, k)
		}
	}
}
