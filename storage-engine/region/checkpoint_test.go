package region

import (
	"errors"
	"testing"
	"time"

	"github.com/bellows-kv/bellows/storage-engine/manifest"
)

// A checkpoint at ts resolves every lock of a transaction started at or
// before ts (through the caller's resolver) and no other, flushes, and
// hands over a manifest whose files hold every version at or below ts.
func TestACheckpointResolvesTheLocksBelowItAndFlushes(t *testing.T) {
	r := mustOpen(t, testOptions(t, t.TempDir()))
	defer r.Close()
	if _, err := r.Put([]byte("a"), []byte("1")); err != nil {
		t.Fatal(err)
	}
	before := r.opts.Clock.Now()
	prewrite(t, r, before, "p", time.Minute, "p", "locked-before")
	ts := r.opts.Clock.Now()
	after := ts + 1_000
	prewrite(t, r, after, "q", time.Minute, "q", "locked-after")

	var met []uint64
	resolve := func(op func() error) error {
		for {
			err := op()
			var le *LockedError
			if !errors.As(err, &le) {
				return err
			}
			met = append(met, le.Lock.StartTS)
			if err := r.RollbackLocks(bg, le.Lock.StartTS, [][]byte{le.Key}, true); err != nil {
				return err
			}
		}
	}
	var got manifest.Manifest
	if err := r.Checkpoint(bg, ts, resolve, func(m manifest.Manifest) error { got = m; return nil }); err != nil {
		t.Fatal(err)
	}
	if len(met) != 1 || met[0] != before {
		t.Fatalf("the checkpoint at %d met the locks of %v; want only the transaction started at %d", ts, met, before)
	}
	if len(got.Locks) != 1 || got.Locks[0].StartTS != after {
		t.Fatalf("the checkpoint's manifest holds locks %+v; want only the one started at %d, after it", got.Locks, after)
	}
	if len(got.Files) == 0 || got.MaxTS() == 0 {
		t.Fatalf("the checkpoint flushed nothing: files %+v", got.Files)
	}
	if v, err := getAt(t, r, "a", ts); err != nil || v != "1" {
		t.Fatalf("a at the checkpoint: %q, %v", v, err)
	}
}
