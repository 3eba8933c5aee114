package server

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	kvpb "github.com/bellows-kv/bellows/proto/bellows/kv/v1"
	"github.com/bellows-kv/bellows/storage-engine/blob"
	"github.com/bellows-kv/bellows/storage-engine/kv"
	"github.com/bellows-kv/bellows/storage-engine/region"
)

// keyed is ctx carrying idempotency key id, as a request arrives.
func keyed(ctx context.Context, id string) context.Context {
	return metadata.NewIncomingContext(ctx, metadata.Pairs(RequestIDHeader, id))
}

// moveRegion releases owner's region and waits until next (waiting for
// it) has claimed it.
func moveRegion(t *testing.T, owner, next *Store) {
	t.Helper()
	if err := owner.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the next owner to claim the released region", func() bool {
		_, err := next.Assignments()[0].Engine()
		return err == nil
	})
}

// A keyed write applied by store A, then retried at store B after the
// region moved from A to B (released, claimed), is answered with A's commit
// timestamp and not applied again: a concurrent writer's later value stays
// the newest, and the key has exactly the two versions. The key reused for
// another request is still refused at B, and a delete keyed the same way
// is deduplicated too.
func TestKeyedWriteRetriedAfterTheRegionMovedIsNotAppliedAgain(t *testing.T) {
	ctx := context.Background()
	a, nextOwner := oneRegionStore(t, nil)
	kvA := NewKV(a, nil, nil)
	name := a.Assignments()[0].Name()
	put := &kvpb.PutRequest{Key: []byte("k"), Value: []byte("retried")}
	first, err := kvA.Put(keyed(ctx, "put-1"), put)
	if err != nil {
		t.Fatal(err)
	}
	del := &kvpb.DeleteRequest{Key: []byte("gone")}
	if _, err := kvA.Put(ctx, &kvpb.PutRequest{Key: []byte("gone"), Value: []byte("v")}); err != nil {
		t.Fatal(err)
	}
	firstDel, err := kvA.Delete(keyed(ctx, "del-1"), del)
	if err != nil {
		t.Fatal(err)
	}

	b := nextOwner(5 * time.Millisecond)
	moveRegion(t, a, b)
	kvB := NewKV(b, nil, nil)

	// A concurrent writer (no key) writes k after the first copy.
	later, err := kvB.Put(ctx, &kvpb.PutRequest{Key: []byte("k"), Value: []byte("later")})
	if err != nil {
		t.Fatal(err)
	}
	again, err := kvB.Put(keyed(ctx, "put-1"), put)
	if err != nil {
		t.Fatal(err)
	}
	if again.CommitTs != first.CommitTs || again.Region != name {
		t.Fatalf("retry at the new owner: ts %d region %s; want the first answer, ts %d region %s", again.CommitTs, again.Region, first.CommitTs, name)
	}
	e := engine(t, b)
	for _, c := range []struct {
		ts   uint64
		want string
	}{{first.CommitTs - 1, ""}, {first.CommitTs, "retried"}, {later.CommitTs - 1, "retried"}, {later.CommitTs, "later"}, {kv.MaxTimestamp, "later"}} {
		v, ok, err := e.Get([]byte("k"), c.ts)
		if err != nil {
			t.Fatal(err)
		}
		if got := map[bool]string{true: string(v)}[ok]; got != c.want {
			t.Fatalf("k at %d: %q, want %q (first %d, later %d)", c.ts, got, c.want, first.CommitTs, later.CommitTs)
		}
	}
	if _, err := kvB.Put(keyed(ctx, "put-1"), &kvpb.PutRequest{Key: []byte("k"), Value: []byte("other")}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("the key reused for another request at the new owner: %v, want INVALID_ARGUMENT", err)
	}
	// The delete's retry after a re-put of the key: not applied again.
	if _, err := kvB.Put(ctx, &kvpb.PutRequest{Key: []byte("gone"), Value: []byte("back")}); err != nil {
		t.Fatal(err)
	}
	againDel, err := kvB.Delete(keyed(ctx, "del-1"), del)
	if err != nil {
		t.Fatal(err)
	}
	if againDel.CommitTs != firstDel.CommitTs {
		t.Fatalf("delete retried at the new owner: ts %d, want %d", againDel.CommitTs, firstDel.CommitTs)
	}
	if v, ok, err := e.Get([]byte("gone"), kv.MaxTimestamp); err != nil || !ok || string(v) != "back" {
		t.Fatalf("gone after the retried delete: %q %v %v, want back", v, ok, err)
	}

	// And on to a third store: B hands over what it took over.
	c := nextOwner(5 * time.Millisecond)
	moveRegion(t, b, c)
	third, err := NewKV(c, nil, nil).Put(keyed(ctx, "put-1"), put)
	if err != nil || third.CommitTs != first.CommitTs {
		t.Fatalf("retry at the third owner: %v, %v; want ts %d", third, err, first.CommitTs)
	}
}

// A release whose handover of the keys fails still releases the region
// (availability over the dedupe window): the next owner claims it, and a
// retry there is applied again, the documented limit.
func TestReleaseHandsOverNoKeysWhenTheWriteFails(t *testing.T) {
	ctx := context.Background()
	a, nextOwner := oneRegionStore(t, nil)
	name := a.Assignments()[0].Name()
	put := &kvpb.PutRequest{Key: []byte("k"), Value: []byte("v")}
	first, err := NewKV(a, nil, nil).Put(keyed(ctx, "put-1"), put)
	if err != nil {
		t.Fatal(err)
	}
	// A directory where the object goes: writing it fails.
	root := strings.TrimPrefix(a.opts.Region.Bucket.URL(), "file://")
	blocker := filepath.Join(root, filepath.FromSlash(region.AppliedRequestsKey(name)), "x")
	if err := os.MkdirAll(blocker, 0o755); err != nil {
		t.Fatal(err)
	}
	b := nextOwner(5 * time.Millisecond)
	moveRegion(t, a, b)
	again, err := NewKV(b, nil, nil).Put(keyed(ctx, "put-1"), put)
	if err != nil {
		t.Fatal(err)
	}
	if again.CommitTs == first.CommitTs {
		t.Fatalf("retry at the new owner answered %d without the handed-over keys", again.CommitTs)
	}
}

// The keys handed over keep their applied-at times: those beyond the window
// by then are not taken over, and the rest age out as if applied here.
func TestHandedOverKeysKeepTheirAge(t *testing.T) {
	ctx := context.Background()
	now := time.Unix(1000, 0)
	clock := func() time.Time { return now }
	from := dedupe{MaxAge: time.Minute, now: clock}
	for i, id := range []string{"old", "young"} {
		if _, _, err := from.do(ctx, "r", id, []byte(id), func() (uint64, error) { return uint64(i + 1), nil }); err != nil {
			t.Fatal(err)
		}
		now = now.Add(40 * time.Second)
	}
	recs := from.export("r") // at 1080: old is 80s old, young 40s
	if len(recs) != 1 || recs[0].ID != "young" {
		t.Fatalf("exported %+v, want only young", recs)
	}
	recs = append(recs, appliedRecord{ID: "stale", Digest: "0000000000000001", CommitTS: 9, AppliedAt: time.Unix(900, 0).UnixNano()})
	to := dedupe{MaxAge: time.Minute, now: clock}
	to.seed("r", recs)
	if ts, dup, err := to.do(ctx, "r", "young", []byte("young"), func() (uint64, error) { return 99, nil }); err != nil || !dup || ts != 2 {
		t.Fatalf("young at the next owner: %d, dup=%t, %v; want 2, dup", ts, dup, err)
	}
	if _, dup, _ := to.do(ctx, "r", "stale", []byte("x"), func() (uint64, error) { return 98, nil }); dup {
		t.Fatal("a key beyond the window was taken over")
	}
	now = now.Add(30 * time.Second) // young is 70s old
	if _, dup, _ := to.do(ctx, "r", "young", []byte("young"), func() (uint64, error) { return 97, nil }); dup {
		t.Fatal("young did not age out at the next owner")
	}
}

// A release hands over a keyed write that was still being applied when the
// region stopped taking writes: settle waits for it (bounded by its
// context), so it is exported applied.
func TestSettleWaitsForKeyedWritesInProgress(t *testing.T) {
	ctx := context.Background()
	var d dedupe
	started, release := make(chan struct{}), make(chan struct{})
	go func() {
		_, _, _ = d.do(ctx, "r", "slow", []byte("slow"), func() (uint64, error) { close(started); <-release; return 5, nil })
	}()
	<-started
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if d.settle(short, "r") {
		t.Fatal("settled with a write in progress")
	}
	close(release)
	if !d.settle(ctx, "r") {
		t.Fatal("did not settle")
	}
	if recs := d.export("r"); len(recs) != 1 || recs[0].ID != "slow" || recs[0].CommitTS != 5 {
		t.Fatalf("exported %+v, want slow at 5", recs)
	}
}

// A release or split writes the region's keys once: when the final flush
// saved them (saveApplied) and no keyed write came since, the handover
// does not write the same object again while writes are refused; a keyed
// write since, and it does.
func TestHandoverSkipsKeysTheFinalFlushSaved(t *testing.T) {
	ctx := context.Background()
	a, _ := oneRegionStore(t, nil)
	kvA := NewKV(a, nil, nil)
	as := a.Assignments()[0]
	name := as.Name()
	if _, err := kvA.Put(keyed(ctx, "put-1"), &kvpb.PutRequest{Key: []byte("k"), Value: []byte("v")}); err != nil {
		t.Fatal(err)
	}
	bucket := a.opts.Region.Bucket
	key := region.AppliedRequestsKey(name)
	a.saveApplied(ctx, name, false)
	if ok, err := bucket.Exists(ctx, key); err != nil || !ok {
		t.Fatalf("the flush's save wrote no %s: %v %v", key, ok, err)
	}
	// Gone, to see whether the handover writes it again.
	if err := bucket.Delete(ctx, key); err != nil {
		t.Fatal(err)
	}
	if err := a.handOver(as)(ctx); err != nil {
		t.Fatal(err)
	}
	if ok, _ := bucket.Exists(ctx, key); ok {
		t.Fatalf("the handover wrote %s again although the flush had saved every key", key)
	}
	a.saveApplied(ctx, name, false) // the object back, as the flush left it
	if _, err := kvA.Put(keyed(ctx, "put-2"), &kvpb.PutRequest{Key: []byte("k2"), Value: []byte("v")}); err != nil {
		t.Fatal(err)
	}
	if err := a.handOver(as)(ctx); err != nil {
		t.Fatal(err)
	}
	// Only the new key, as the tail beside the object; a reader takes both.
	if ok, _ := bucket.Exists(ctx, region.AppliedRequestsTailKey(name)); !ok {
		t.Fatal("the handover after a new keyed write wrote no tail")
	}
	recs, err := readAppliedRequests(ctx, bucket, name)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 2 {
		t.Fatalf("the handover after a new keyed write left %d keys, want both", len(recs))
	}
}

// The object written from the cached encodings is byte for byte the one
// json.Marshal writes, so every reader (readAppliedRequests, a store of
// an older version) reads it as before; and a key added after an export
// is in the next one.
func TestEncodedHandoverObjectIsTheMarshalledOne(t *testing.T) {
	ctx := context.Background()
	d := &dedupe{}
	apply := func(id string, ts uint64) {
		if _, _, err := d.do(ctx, "r/1", id, []byte("req "+id), func() (uint64, error) { return ts, nil }); err != nil {
			t.Fatal(err)
		}
	}
	apply(`plain-1`, 7)
	apply(`needs "escaping" \ and <html> é`, 8)
	first, _, _, _ := d.exportEncoded("r/1", false)
	apply(`after-the-first-export`, 9)
	b := testBucket(t)
	now := time.Unix(1790000000, 123)
	name := "r/1"
	recs, gen, _, full := d.exportEncoded(name, false)
	if len(recs) != len(first)+1 || gen != 3 {
		t.Fatalf("second export: %d records at gen %d, want %d at gen 3", len(recs), gen, len(first)+1)
	}
	if err := writeAppliedEncoded(ctx, b, name, recs, full, now); err != nil {
		t.Fatal(err)
	}
	got, err := b.ReadAll(ctx, region.AppliedRequestsKey(name))
	if err != nil {
		t.Fatal(err)
	}
	want, err := json.Marshal(appliedRequests{Region: name, ReleasedAt: now.UnixNano(), Applied: d.export(name)})
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != string(want) {
		t.Fatalf("encoded object:\n%s\nwant json.Marshal's:\n%s", got, want)
	}
	back, err := readAppliedRequests(ctx, b, name)
	if err != nil || len(back) != 3 || back[1].ID != `needs "escaping" \ and <html> é` || back[2].CommitTS != 9 {
		t.Fatalf("read back %+v, %v", back, err)
	}
}

// A final flush's save writes only the keys applied since the last whole
// save (the tail), and a reader takes the union of both objects, so the
// next owner finds every key; a table seeded since its last whole save
// (keys applied long before) writes whole again.
func TestTheFinalSaveWritesTheTailAndReadersTakeBoth(t *testing.T) {
	ctx := context.Background()
	clock := time.Unix(1000, 0)
	d := &dedupe{now: func() time.Time { return clock }}
	apply := func(id string) {
		clock = clock.Add(time.Second)
		if _, _, err := d.do(ctx, "r", id, []byte(id), func() (uint64, error) { return uint64(clock.Unix()), nil }); err != nil {
			t.Fatal(err)
		}
	}
	b := testBucket(t)
	save := func(tail bool) (int, bool) {
		clock = clock.Add(time.Millisecond) // after the last key applied
		recs, gen, at, full := d.exportEncoded("r", tail)
		if err := writeAppliedEncoded(ctx, b, "r", recs, full, clock); err != nil {
			t.Fatal(err)
		}
		d.markSaved("r", gen, at, full)
		return len(recs), full
	}
	if n, full := save(true); !full || n != 0 {
		t.Fatalf("a table never saved: a tail of %d (full %v), want a whole save", n, full)
	}
	apply("a")
	apply("b")
	if n, full := save(false); !full || n != 2 {
		t.Fatalf("whole save: %d keys (full %v), want 2", n, full)
	}
	apply("c")
	if n, full := save(true); full || n != 1 {
		t.Fatalf("final save after a whole one: %d keys (full %v), want the tail of 1", n, full)
	}
	if d.unsaved("r") {
		t.Fatal("the tail saved every key, yet the table says some are unsaved (a split would write them again)")
	}
	got, err := readAppliedRequests(ctx, b, "r")
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]bool{}
	for _, r := range got {
		ids[r.ID] = true
	}
	if len(ids) != 3 || !ids["a"] || !ids["b"] || !ids["c"] {
		t.Fatalf("read back %v, want a, b and c", ids)
	}
	// Seeded with a key applied before the whole save: only a whole save
	// holds it.
	d.seed("r", []appliedRecord{{ID: "old", Digest: "0000000000000001", CommitTS: 1, AppliedAt: time.Unix(1001, 0).UnixNano()}})
	if n, full := save(true); !full || n != 4 {
		t.Fatalf("final save after seeding: %d keys (full %v), want a whole save of 4", n, full)
	}
}

// BenchmarkSaveAppliedKeys is the idempotency keys' save of a flush with
// a full table (dedupeMaxEntries keys): whole, as every flush writes it
// while writes go on (the encodings cached from the previous save), and
// the tail of 100 keys that a split's or release's final flush writes
// while writes are refused.
func BenchmarkSaveAppliedKeys(b *testing.B) {
	ctx := context.Background()
	d := &dedupe{}
	n := 0
	apply := func() {
		id := fmt.Sprintf("%016x-ycsb-client-%d", uint64(n)*0x9e3779b97f4a7c15, n)
		ts := uint64(n)
		if _, _, err := d.do(ctx, "r", id, []byte(id), func() (uint64, error) { return ts, nil }); err != nil {
			b.Fatal(err)
		}
		n++
	}
	for range dedupeMaxEntries {
		apply()
	}
	bk := testBucket(b)
	save := func(tail bool) {
		recs, gen, at, full := d.exportEncoded("r", tail)
		if err := writeAppliedEncoded(ctx, bk, "r", recs, full, time.Now()); err != nil {
			b.Fatal(err)
		}
		d.markSaved("r", gen, at, full)
	}
	save(false)
	b.Run("whole", func(b *testing.B) {
		for range b.N {
			save(false)
		}
	})
	b.Run("final-tail-of-100", func(b *testing.B) {
		for range b.N {
			b.StopTimer()
			save(false)
			for range 100 {
				apply()
			}
			b.StartTimer()
			save(true)
		}
	})
}

// testBucket is a file bucket in a temporary directory.
func testBucket(tb testing.TB) *blob.Bucket {
	tb.Helper()
	b, err := blob.Open(context.Background(), "file://"+tb.TempDir())
	if err != nil {
		tb.Fatal(err)
	}
	return b
}
