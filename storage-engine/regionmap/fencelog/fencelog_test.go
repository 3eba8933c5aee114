package fencelog

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/bellows-kv/bellows/storage-engine/blob"
)

func testLog(t *testing.T, head bool) Log {
	t.Helper()
	b, err := blob.Open(context.Background(), "file://"+t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return Log{Bucket: b, Prefix: "log/", Head: head, Retention: time.Hour,
		Written: func(data []byte) (time.Time, error) {
			ns, err := strconv.ParseInt(string(data), 10, 64)
			return time.Unix(0, ns), err
		}}
}

// grow creates n objects on top of e, each stamped with the time it was
// written, and returns the last.
func grow(t *testing.T, l Log, e Entry, n int) Entry {
	t.Helper()
	for range n {
		var err error
		if e, err = l.Create(context.Background(), e, []byte(strconv.FormatInt(time.Now().UnixNano(), 10)), nil); err != nil {
			t.Fatal(err)
		}
	}
	return e
}

// Whatever the head names at or below the newest, before and after a
// collection (which leaves the floor above a head it passed), the
// existence checks forward find the newest object.
func TestTheNewestIsFoundFromAnyHead(t *testing.T) {
	ctx := context.Background()
	l := testLog(t, true)
	if e, err := l.Newest(ctx); err != nil || e.N != 0 {
		t.Fatalf("an empty log: %d %v", e.N, err)
	}
	last := grow(t, l, Entry{}, 100)
	for _, head := range []uint64{1, 2, 37, 64, 65, 98, 99, 100} {
		if err := l.writeNumber(ctx, l.headKey(), head); err != nil {
			t.Fatal(err)
		}
		if e, err := l.Newest(ctx); err != nil || e.N != last.N || string(e.Data) != string(last.Data) {
			t.Fatalf("head %d: found %d, %v; want %d", head, e.N, err, last.N)
		}
	}
	if n, err := l.Collect(ctx, time.Now().Add(2*time.Hour), Policy{Keep: 10}); err != nil || n != 90 {
		t.Fatalf("collected %d, %v", n, err)
	}
	for _, head := range []uint64{5, 91, 100} {
		if err := l.writeNumber(ctx, l.headKey(), head); err != nil {
			t.Fatal(err)
		}
		if e, err := l.Newest(ctx); err != nil || e.N != last.N {
			t.Fatalf("head %d after collecting: found %d, %v; want %d", head, e.N, err, last.N)
		}
	}
}

// A create on a view that is not fresh checks what it built on: on the
// newest, it stands; on an object collected since, it is withdrawn and
// refused as taken; into a log whose first objects were collected, a
// first object is refused too.
func TestACreateOnAStaleViewIsChecked(t *testing.T) {
	ctx := context.Background()
	l := testLog(t, false)
	e := grow(t, l, Entry{}, 20)
	old := e
	old.Seen = time.Now().Add(-time.Hour)
	if e, err := l.Create(ctx, old, []byte(strconv.FormatInt(time.Now().UnixNano(), 10)), nil); err != nil || e.N != 21 {
		t.Fatalf("on the newest, viewed long ago: %d %v", e.N, err)
	}
	stale, err := l.Read(ctx, 5)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := l.Collect(ctx, time.Now().Add(2*time.Hour), Policy{Keep: 3}); err != nil || n != 18 {
		t.Fatalf("collected %d, %v", n, err)
	}
	if _, err := l.Create(ctx, stale, []byte("0"), nil); !errors.Is(err, ErrTaken) {
		t.Fatalf("on a collected object: %v, want ErrTaken", err)
	}
	if ok, _ := l.Exists(ctx, 6); ok {
		t.Fatal("the refused create's object stays")
	}
	if _, err := l.Create(ctx, Entry{}, []byte("0"), nil); !errors.Is(err, ErrTaken) {
		t.Fatalf("a first object into a collected log: %v, want ErrTaken", err)
	}
	if e, err := l.Newest(ctx); err != nil || e.N != 21 {
		t.Fatalf("newest %d, %v", e.N, err)
	}
}
