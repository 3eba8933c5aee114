package region

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bellows-kv/bellows/storage-engine/compaction"
	"github.com/bellows-kv/bellows/storage-engine/hlc"
	"github.com/bellows-kv/bellows/storage-engine/kv"
)

// manualClock is a physical clock that moves only when told.
type manualClock struct{ now atomic.Int64 }

func newManualClock() *manualClock {
	c := &manualClock{}
	c.now.Store(time.Now().UnixNano())
	return c
}

func (c *manualClock) read() time.Time         { return time.Unix(0, c.now.Load()) }
func (c *manualClock) advance(d time.Duration) { c.now.Add(int64(d)) }

func putExpiring(t *testing.T, r *Region, key, value string, ttl time.Duration) uint64 {
	t.Helper()
	ts, err := r.Apply(new(Batch).PutExpiring([]byte(key), []byte(value), ttl))
	if err != nil {
		t.Fatalf("put %s with ttl %v: %v", key, ttl, err)
	}
	return ts
}

// wantKeys checks what a read of the latest sees, forward and reverse: the
// keys live, and Get of each key in gone finds nothing.
func wantKeys(t *testing.T, r *Region, when string, live []string, gone ...string) {
	t.Helper()
	for _, reverse := range []bool{false, true} {
		it, err := r.NewIterator(nil, nil, kv.MaxTimestamp)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		ok := it.First()
		if reverse {
			ok = it.Last()
		}
		for ; ok; ok = map[bool]func() bool{false: it.Next, true: it.Prev}[reverse]() {
			got = append(got, string(it.Key())+"="+string(it.Value()))
		}
		if err := it.Err(); err != nil {
			t.Fatal(err)
		}
		it.Close()
		if reverse {
			for i, j := 0, len(got)-1; i < j; i, j = i+1, j-1 {
				got[i], got[j] = got[j], got[i]
			}
		}
		if len(got) != len(live) {
			t.Fatalf("%s: scan (reverse %t) = %q, want %q", when, reverse, got, live)
		}
		for i := range got {
			if got[i] != live[i] {
				t.Fatalf("%s: scan (reverse %t) = %q, want %q", when, reverse, got, live)
			}
		}
	}
	for _, k := range gone {
		if v, ok, err := r.Get([]byte(k), kv.MaxTimestamp); err != nil || ok {
			t.Fatalf("%s: get %s = %q, %t, %v; want nothing (expired)", when, k, v, ok, err)
		}
	}
}

// An expired key is never read: not by a get or a scan of the latest once
// the store's clock passes its expiry (though nothing was written since),
// not at any read timestamp at or after it, from the memstore, the WAL
// replayed, or a file; a read before its expiry, and a snapshot older
// than it, still see it. A condition finds it absent.
func TestAnExpiredKeyIsNeverRead(t *testing.T) {
	clock := newManualClock()
	opts := testOptions(t, t.TempDir())
	opts.Clock = hlc.New(clock.read, 0)
	r := mustOpen(t, opts)
	defer func() { r.Close() }()

	short := putExpiring(t, r, "a", "short", 10*time.Second)
	if _, err := r.Put([]byte("b"), []byte("plain")); err != nil {
		t.Fatal(err)
	}
	putExpiring(t, r, "c", "long", time.Hour)
	expiry := short + uint64(10*time.Second)
	wantKeys(t, r, "before the expiry", []string{"a=short", "b=plain", "c=long"})
	if v, ok, err := r.Get([]byte("a"), expiry-1); err != nil || !ok || string(v) != "short" {
		t.Fatalf("get a just before its expiry: %q, %t, %v", v, ok, err)
	}
	snap, err := r.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	defer snap.Close()

	clock.advance(11 * time.Second)
	check := func(when string) {
		t.Helper()
		wantKeys(t, r, when, []string{"b=plain", "c=long"}, "a")
		if v, ok, err := r.Get([]byte("a"), expiry); err != nil || ok {
			t.Fatalf("%s: get a at its expiry: %q, %t, %v; want nothing", when, v, ok, err)
		}
		if v, ok, err := r.Get([]byte("a"), expiry-1); err != nil || !ok || string(v) != "short" {
			t.Fatalf("%s: get a before its expiry: %q, %t, %v; want short", when, v, ok, err)
		}
		if v, ok, err := snap.Get([]byte("a")); err != nil || !ok || string(v) != "short" {
			t.Fatalf("%s: a snapshot older than the expiry reads a: %q, %t, %v; want short", when, v, ok, err)
		}
	}
	check("after the expiry, in the memstore")
	if _, err := r.Apply(new(Batch).Put([]byte("a"), []byte("again")).If(Condition{Key: []byte("a"), Absent: true})); err != nil {
		t.Fatalf("put a if absent, a expired: %v", err)
	}
	if _, err := r.Apply(new(Batch).Delete([]byte("a"))); err != nil {
		t.Fatal(err)
	}
	wantKeys(t, r, "after a new write and delete", []string{"b=plain", "c=long"}, "a")

	snap.Close()
	r.Close()
	r = mustOpen(t, opts)
	snap, err = r.SnapshotAt(expiry - 1)
	if err != nil {
		t.Fatal(err)
	}
	check("after the WAL's replay")
	if err := r.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	check("from a file")
	clock.advance(time.Hour)
	wantKeys(t, r, "after both expiries", []string{"b=plain"}, "a", "c")
}

// A write with a time to live that is not positive is refused, naming the
// key, and commits nothing.
func TestANonPositiveTTLIsRefused(t *testing.T) {
	r := mustOpen(t, testOptions(t, t.TempDir()))
	defer r.Close()
	for _, ttl := range []time.Duration{0, -time.Second} {
		_, err := r.Apply(new(Batch).Put([]byte("x"), []byte("1")).PutExpiring([]byte("k"), []byte("v"), ttl))
		if !errors.Is(err, ErrInvalidTTL) {
			t.Fatalf("ttl %v: %v; want ErrInvalidTTL", ttl, err)
		}
	}
	if _, ok, _ := r.Get([]byte("x"), kv.MaxTimestamp); ok {
		t.Fatal("a refused batch wrote x")
	}
}

// A major compaction drops a value expired below its GC horizon, unless a
// pinned snapshot reads it; a value still live stays.
func TestACompactionDropsExpiredValuesNoSnapshotReads(t *testing.T) {
	ctx := context.Background()
	clock := newManualClock()
	opts := testOptions(t, t.TempDir())
	opts.Clock = hlc.New(clock.read, 0)
	opts.DisableAutoCompaction = true
	opts.Retention = compaction.Retention{GCTTL: time.Minute}
	r := mustOpen(t, opts)
	defer r.Close()

	pinnedTS := putExpiring(t, r, "pinned", "p", time.Second)
	putExpiring(t, r, "gone", "g", time.Second)
	putExpiring(t, r, "live", "l", 24*time.Hour)
	if _, err := r.Put([]byte("plain"), []byte("v")); err != nil {
		t.Fatal(err)
	}
	snap, err := r.SnapshotAt(pinnedTS)
	if err != nil {
		t.Fatal(err)
	}
	defer snap.Close()
	if err := r.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	clock.advance(time.Hour)
	info, err := r.Compact(ctx, true)
	if err != nil {
		t.Fatal(err)
	}
	// "gone" is dropped; "pinned" (read by the snapshot) is kept.
	if info.Stats.DroppedExpired != 1 || info.Stats.OutputVersions != 3 {
		t.Fatalf("compaction stats %+v; want 1 expired version dropped, 3 kept", info.Stats)
	}
	if v, ok, err := snap.Get([]byte("pinned")); err != nil || !ok || string(v) != "p" {
		t.Fatalf("the pinned snapshot reads %q, %t, %v; want p", v, ok, err)
	}
	wantKeys(t, r, "after the compaction", []string{"live=l", "plain=v"}, "gone", "pinned")

	snap.Close()
	info, err = r.Compact(ctx, true)
	if err != nil {
		t.Fatal(err)
	}
	if info.Stats.DroppedExpired != 1 || info.Stats.OutputVersions != 2 {
		t.Fatalf("compaction stats once the snapshot closed %+v; want 1 expired version dropped, 2 kept", info.Stats)
	}
	wantKeys(t, r, "after the second compaction", []string{"live=l", "plain=v"}, "gone", "pinned")
}

// A transaction's expiring write keeps its kind through its lock, a
// restart (the lock replayed from the WAL) and the commit: it expires its
// TTL after the commit timestamp.
func TestAnExpiringWriteOfATransactionExpiresAfterItsCommit(t *testing.T) {
	opts := testOptions(t, t.TempDir())
	opts.Clock = hlc.New(nil, 0)
	r := mustOpen(t, opts)
	startTS := opts.Clock.Now()
	b := new(Batch).PutExpiring([]byte("x"), []byte("txn"), time.Millisecond).Put([]byte("y"), []byte("plain"))
	prep, err := r.Prewrite(context.Background(), startTS, []byte("x"), b, time.Now().Add(time.Minute), "")
	if err != nil {
		t.Fatal(err)
	}
	r.Close()
	r = mustOpen(t, opts)
	defer r.Close()
	commitTS := prep + 1
	if err := r.CommitLocks(context.Background(), startTS, commitTS, keys("x", "y"), true, ""); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		key  string
		ts   uint64
		want string
	}{
		{"x", commitTS, "txn"},
		{"x", commitTS + uint64(time.Millisecond) - 1, "txn"},
		{"x", commitTS + uint64(time.Millisecond), "<none>"},
		{"y", commitTS + uint64(time.Hour), "plain"},
	} {
		if got, err := getAt(t, r, c.key, c.ts); err != nil || got != c.want {
			t.Fatalf("%s at %d = %q, %v; want %q", c.key, c.ts, got, err, c.want)
		}
	}
}
