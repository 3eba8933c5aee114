package region

import (
	"errors"
	"testing"
	"time"

	"github.com/bellows-kv/bellows/storage-engine/kv"
)

// A write racing a release (or a split's final flush) is either refused or
// in the files the next owner claims. The flush that stops writes used to
// look only at the active memstore's entries: a write that had its
// timestamp and WAL record but had not inserted its versions yet left the
// memstore looking empty, the flush skipped it, the write was acknowledged,
// and the release deleted the WAL that held it. Here the write is held at
// exactly that point while the release decides what to flush.
func TestAWriteInFlightAtAReleaseIsKept(t *testing.T) {
	dir := t.TempDir()
	opts := testOptions(t, dir)
	r := mustOpen(t, opts)
	b := new(Batch).Put([]byte("in-flight"), []byte("v"))
	// The write path up to the memstore insert (applyLatched's first half).
	ts, seg, err := r.commitRecord(0, b.encodedLen(), b.encode, nil)
	if err != nil {
		t.Fatal(err)
	}
	released := make(chan error, 1)
	go func() { released <- r.Release(bg) }()
	// Once writes are refused, the release has chosen what to flush under
	// commitMu; taking it after that orders the insert after the choice.
	waitFor(t, "the release to refuse writes", func() bool { return errors.Is(r.checkOpen(), ErrClosed) })
	r.commitMu.Lock()
	//lint:ignore SA2001 taking the lock is the point: it orders the insert after the release's choice
	r.commitMu.Unlock()
	for _, o := range b.ops {
		seg.Add(kv.InternalKey{UserKey: o.key, TS: ts, Kind: o.kind}, o.value)
	}
	seg.EndWrite()
	r.vis.done(ts) // acknowledged
	if err := <-released; err != nil {
		t.Fatal(err)
	}
	next := opts
	next.WALDir = dir + "/wal-next"
	n := mustOpen(t, next)
	defer n.Close()
	if _, ok, err := n.Get([]byte("in-flight"), kv.MaxTimestamp); err != nil || !ok {
		t.Fatalf("a write acknowledged during the release is not at the next owner (%v)", err)
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond) // polling interval, not synchronisation
	}
}
