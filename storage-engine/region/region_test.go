package region

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/bellows-kv/bellows/storage-engine/blob"
	"github.com/bellows-kv/bellows/storage-engine/blockcache"
	"github.com/bellows-kv/bellows/storage-engine/kv"
	"github.com/bellows-kv/bellows/storage-engine/manifest"
	"github.com/bellows-kv/bellows/storage-engine/sstable"
	"github.com/bellows-kv/bellows/storage-engine/wal"
)

func testOptions(t testing.TB, dir string) Options {
	t.Helper()
	b, err := blob.Open(context.Background(), "file://"+dir+"/bucket")
	if err != nil {
		t.Fatal(err)
	}
	return Options{
		Name:         "r1",
		Bucket:       b,
		WALDir:       dir + "/wal",
		MaxValueSize: 1 << 10,
		BlockCache:   blockcache.New(1 << 20),
		SST:          sstable.WriterOptions{BlockSize: 512, Compression: sstable.S2Compression},
	}
}

func mustOpen(t testing.TB, opts Options) *Region {
	t.Helper()
	r, err := Open(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestBadInputIsRejectedAndNothingIsWritten(t *testing.T) {
	dir := t.TempDir()
	opts := testOptions(t, dir)
	r := mustOpen(t, opts)
	big := bytes.Repeat([]byte("k"), MaxKeySize+1)
	cases := []struct {
		name string
		do   func() error
		want error
	}{
		{"empty key put", func() error { _, err := r.Put(nil, []byte("v")); return err }, ErrEmptyKey},
		{"empty key delete", func() error { _, err := r.Delete([]byte{}); return err }, ErrEmptyKey},
		{"empty key get", func() error { _, _, err := r.Get(nil, kv.MaxTimestamp); return err }, ErrEmptyKey},
		{"key over 64 KiB", func() error { _, err := r.Put(big, []byte("v")); return err }, ErrKeyTooLarge},
		{"value over the maximum", func() error { _, err := r.Put([]byte("k"), make([]byte, 1<<10+1)); return err }, ErrValueTooLarge},
		{"empty batch", func() error { _, err := r.Apply(new(Batch)); return err }, ErrEmptyBatch},
		{"one bad op spoils the batch", func() error {
			_, err := r.Apply(new(Batch).Put([]byte("good"), []byte("v")).Put(nil, []byte("v")))
			return err
		}, ErrEmptyKey},
	}
	for _, c := range cases {
		err := c.do()
		if !errors.Is(err, c.want) {
			t.Errorf("%s: err = %v, want %v", c.name, err, c.want)
		}
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	for name, do := range map[string]func() error{
		"put":      func() error { _, err := r.Put([]byte("k"), []byte("v")); return err },
		"get":      func() error { _, _, err := r.Get([]byte("k"), kv.MaxTimestamp); return err },
		"scan":     func() error { _, err := r.Scan(nil, nil, 0, kv.MaxTimestamp); return err },
		"flush":    func() error { return r.Flush(context.Background()) },
		"compact":  func() error { _, err := r.Compact(context.Background(), true); return err },
		"snapshot": func() error { _, err := r.Snapshot(); return err },
		"close":    r.Close,
	} {
		if err := do(); !errors.Is(err, ErrClosed) {
			t.Errorf("%s after close: err = %v, want ErrClosed", name, err)
		}
	}
	// Nothing reached the WAL: a reopened region is empty.
	r = mustOpen(t, opts)
	defer r.Close()
	rows, err := r.Scan(nil, nil, 0, kv.MaxTimestamp)
	if err != nil || len(rows) != 0 {
		t.Fatalf("after rejected writes the region holds %d rows (%v)", len(rows), err)
	}
}

func TestFlippedByteInSSTNamesFileAndBlock(t *testing.T) {
	dir := t.TempDir()
	opts := testOptions(t, dir)
	r := mustOpen(t, opts)
	for i := 0; i < 400; i++ {
		if _, err := r.Put([]byte(fmt.Sprintf("key%04d", i)), bytes.Repeat([]byte{byte(i)}, 40)); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	m := r.Manifest()
	r.Close()
	if len(m.Files) != 1 {
		t.Fatalf("want one SST, have %d", len(m.Files))
	}
	path := filepath.Join(dir, "bucket", "regions", "r1", m.Files[0].Key)
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	// Flip a byte in the middle of the second data block.
	rd, err := sstable.Open(bytes.NewReader(data), int64(len(data)), "x", nil)
	if err != nil {
		t.Fatal(err)
	}
	h, err := rd.BlockHandle(1)
	if err != nil {
		t.Fatal(err)
	}
	victim, err := rd.BlockLastUserKey(1)
	if err != nil {
		t.Fatal(err)
	}
	intact, err := rd.BlockLastUserKey(0)
	if err != nil {
		t.Fatal(err)
	}
	data[h.Offset+h.Length/2] ^= 0xff
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}

	r = mustOpen(t, opts)
	defer r.Close()
	_, _, err = r.Get(victim, kv.MaxTimestamp)
	if !errors.Is(err, sstable.ErrCorruption) {
		t.Fatalf("Get in the damaged block: err = %v, want corruption", err)
	}
	var ce *sstable.CorruptionError
	if !errors.As(err, &ce) || ce.File != ObjectKey("r1", m.Files[0].Key) || ce.Block != "data block 1" {
		t.Errorf("error %q: want a corruption of data block 1 in %s", err, ObjectKey("r1", m.Files[0].Key))
	}
	if _, err := r.Scan(nil, nil, 0, kv.MaxTimestamp); !errors.Is(err, sstable.ErrCorruption) {
		t.Fatalf("a scan across the damaged block: err = %v, want corruption", err)
	}
	if v, ok, err := r.Get(intact, kv.MaxTimestamp); err != nil || !ok || len(v) != 40 {
		t.Fatalf("a key in an intact block: %v %v %v", v, ok, err)
	}
}

func TestTruncatedWALTailRecoversToLastIntactBatch(t *testing.T) {
	dir := t.TempDir()
	opts := testOptions(t, dir)
	r := mustOpen(t, opts)
	for i := 0; i < 10; i++ {
		if _, err := r.Apply(new(Batch).Put([]byte(fmt.Sprintf("a%d", i)), []byte("v")).Put([]byte(fmt.Sprintf("b%d", i)), []byte("v"))); err != nil {
			t.Fatal(err)
		}
	}
	r.Close()
	segs, _ := wal.Segments(opts.WALDir)
	last := filepath.Join(opts.WALDir, wal.SegmentName(segs[len(segs)-1]))
	info, _ := os.Stat(last)
	if err := os.Truncate(last, info.Size()-3); err != nil {
		t.Fatal(err)
	}
	r = mustOpen(t, opts)
	defer r.Close()
	rows, err := r.Scan(nil, nil, 0, kv.MaxTimestamp)
	if err != nil {
		t.Fatal(err)
	}
	// Nine whole batches; the torn tenth is gone entirely, not half-applied.
	if len(rows) != 18 {
		t.Fatalf("recovered %d rows, want 18", len(rows))
	}
	for _, row := range rows {
		if strings.HasSuffix(string(row.Key), "9") {
			t.Fatalf("row %s of the torn batch survived", row.Key)
		}
	}
	// The region keeps working after recovery.
	if _, err := r.Put([]byte("after"), []byte("v")); err != nil {
		t.Fatal(err)
	}
}

func mustGet(t *testing.T, r *Region, key, want string) {
	t.Helper()
	v, ok, err := r.Get([]byte(key), kv.MaxTimestamp)
	if err != nil || !ok || string(v) != want {
		t.Fatalf("get %s = %q, %v, %v; want %q", key, v, ok, err, want)
	}
}

// A second store (another WAL) may not claim a region its owner still holds:
// the owner's unflushed writes exist only in the owner's WAL. Once the owner
// releases it, the second store claims it with every acknowledged write.
func TestSecondOpenerWaitsForTheOwnerToRelease(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	opts := testOptions(t, dir)
	opts.Owner = "store-a"
	first := mustOpen(t, opts)
	if _, err := first.Put([]byte("flushed"), []byte("v1")); err != nil {
		t.Fatal(err)
	}
	if err := first.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := first.Put([]byte("unflushed"), []byte("v2")); err != nil {
		t.Fatal(err)
	}
	opts2 := opts
	opts2.Owner = "store-b"
	opts2.WALDir = dir + "/wal2" // another pod
	_, err := Open(ctx, opts2)
	var owned *manifest.OwnedError
	var re *Error
	if !errors.Is(err, ErrOwned) || !errors.As(err, &owned) || owned.Owner != "store-a" || !errors.As(err, &re) || re.Region != "r1" {
		t.Fatalf("second opener: err = %v, want ErrOwned naming the region and store-a", err)
	}
	// The owner is untouched by the refused attempt.
	if _, err := first.Put([]byte("after-refusal"), []byte("v3")); err != nil {
		t.Fatalf("owner put after a refused takeover: %v", err)
	}
	if err := first.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := first.Put([]byte("late"), []byte("x")); !errors.Is(err, ErrClosed) {
		t.Fatalf("put after release: err = %v, want ErrClosed", err)
	}
	if segs, err := wal.Segments(opts.WALDir); err != nil || len(segs) != 0 {
		t.Fatalf("released WAL still has segments %v (%v)", segs, err)
	}
	second := mustOpen(t, opts2)
	defer second.Close()
	mustGet(t, second, "flushed", "v1")
	mustGet(t, second, "unflushed", "v2")
	mustGet(t, second, "after-refusal", "v3")
}

// A forced takeover fences the old owner: its ownership check notices the new
// manifest and it refuses writes without waiting for its own next commit.
func TestForcedTakeoverFencesTheStaleOwner(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	opts := testOptions(t, dir)
	opts.OwnershipCheckInterval = 5 * time.Millisecond
	first := mustOpen(t, opts)
	defer first.Close()
	if _, err := first.Put([]byte("k"), []byte("v1")); err != nil {
		t.Fatal(err)
	}
	if err := first.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	opts2 := opts
	opts2.WALDir = dir + "/wal2"
	opts2.ForceTakeover = true
	second := mustOpen(t, opts2)
	defer second.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := first.Put([]byte("k"), []byte("stale"))
		if errors.Is(err, ErrFenced) {
			break
		}
		if err != nil || time.Now().After(deadline) {
			t.Fatalf("stale owner put: err = %v, want ErrFenced within 10s", err)
		}
		runtime.Gosched()
	}
	if err := first.Flush(ctx); !errors.Is(err, ErrFenced) {
		t.Fatalf("stale flush: err = %v, want ErrFenced", err)
	}
	if _, err := second.Put([]byte("k"), []byte("v3")); err != nil {
		t.Fatal(err)
	}
	if err := second.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	mustGet(t, second, "k", "v3")
}

// Writes a forced takeover forfeited stay forfeited: when the region later
// comes back to the old WAL, that WAL's old segments are not replayed.
func TestForfeitedWritesDoNotReturnWithTheRegion(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	opts := testOptions(t, dir)
	first := mustOpen(t, opts)
	if _, err := first.Put([]byte("k"), []byte("kept")); err != nil {
		t.Fatal(err)
	}
	if err := first.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := first.Put([]byte("k"), []byte("forfeited")); err != nil {
		t.Fatal(err)
	}
	first.Close() // a crash: the write is only in the first WAL
	opts2 := opts
	opts2.WALDir = dir + "/wal2"
	opts2.ForceTakeover = true
	second := mustOpen(t, opts2)
	mustGet(t, second, "k", "kept")
	if err := second.Release(ctx); err != nil {
		t.Fatal(err)
	}
	again := mustOpen(t, opts)
	defer again.Close()
	mustGet(t, again, "k", "kept")
}

// One WAL directory, one open region: a second handle on the same directory
// would interleave two logs.
func TestWALDirectoryIsExclusive(t *testing.T) {
	dir := t.TempDir()
	opts := testOptions(t, dir)
	r := mustOpen(t, opts)
	if _, err := Open(context.Background(), opts); !errors.Is(err, wal.ErrDirLocked) {
		t.Fatalf("second open of one WAL dir: err = %v, want wal.ErrDirLocked", err)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	r = mustOpen(t, opts) // the same WAL again: a restart
	r.Close()
}

func TestOpenSnapshotKeepsOldVersionsThroughMajorCompaction(t *testing.T) {
	dir := t.TempDir()
	opts := testOptions(t, dir)
	opts.Retention.MaxVersions = 1
	r := mustOpen(t, opts)
	defer r.Close()
	ctx := context.Background()
	r.Put([]byte("k"), []byte("old"))
	r.Put([]byte("gone"), []byte("x"))
	snap, _ := r.Snapshot()
	r.Put([]byte("k"), []byte("new"))
	r.Delete([]byte("gone"))
	r.Flush(ctx)
	if _, err := r.Compact(ctx, true); err != nil {
		t.Fatal(err)
	}
	if v, ok, _ := snap.Get([]byte("k")); !ok || string(v) != "old" {
		t.Fatalf("snapshot read %q,%v after major compaction, want old", v, ok)
	}
	if v, ok, _ := snap.Get([]byte("gone")); !ok || string(v) != "x" {
		t.Fatalf("snapshot lost a key deleted after it: %q,%v", v, ok)
	}
	snap.Close()
	if _, err := r.Compact(ctx, true); err != nil {
		t.Fatal(err)
	}
	// Without the snapshot, the major compaction drops the old version and
	// the tombstone with what it deleted.
	m := r.Manifest()
	if len(m.Files) != 1 || m.Files[0].Entries != 1 || m.Files[0].Deletions != 0 {
		t.Fatalf("after major compaction: %+v; want one file with only k=new", m.Files)
	}
}

// A batch's request (its idempotency key) travels in its WAL record: a
// reopen that replays the WAL hands out, once, the requests of the newest
// KeepReplayedRequests batches and transactions it replayed, with their
// commit timestamps; keyed and unkeyed batches replay their values alike;
// a record without a request (the format before requests) still decodes.
func TestReplayHandsOutTheNewestRequestsOfReplayedWrites(t *testing.T) {
	dir := t.TempDir()
	opts := testOptions(t, dir)
	opts.KeepReplayedRequests = 2
	r, err := Open(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	keyed := func(k, v, id string) uint64 {
		t.Helper()
		ts, err := r.Apply(new(Batch).Put([]byte(k), []byte(v)).WithRequest(&Request{ID: id, Fingerprint: uint64(len(id))}))
		if err != nil {
			t.Fatal(err)
		}
		return ts
	}
	first := keyed("a", "1", "req-a")
	if _, err := r.Put([]byte("b"), []byte("2")); err != nil {
		t.Fatal(err)
	}
	txn, err := r.CommitTxn(context.Background(), first, new(Batch).Put([]byte("c"), []byte("3")).WithRequest(&Request{ID: "req-c", Fingerprint: 7}))
	if err != nil {
		t.Fatal(err)
	}
	last := keyed("d", "4", "req-dd")
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	r, err = Open(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	want := []AppliedRequest{{Request{"req-c", 7}, txn}, {Request{"req-dd", 6}, last}}
	if got := r.TakeReplayedRequests(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("replayed requests %v; want the newest 2, %v", got, want)
	}
	if got := r.TakeReplayedRequests(); got != nil {
		t.Fatalf("taken twice: %v", got)
	}
	for k, v := range map[string]string{"a": "1", "b": "2", "c": "3", "d": "4"} {
		if got, _, err := r.Get([]byte(k), kv.MaxTimestamp); err != nil || string(got) != v {
			t.Fatalf("%s after the replay: %q, %v; want %q", k, got, err, v)
		}
	}
	// Encoded without a request, a record decodes as before requests.
	var b Batch
	b.Put([]byte("x"), []byte("y"))
	ts, dec, err := decodeBatch(b.encode(nil, 42))
	if err != nil || ts != 42 || dec.req != nil || len(dec.ops) != 1 {
		t.Fatalf("an unkeyed record: ts %d, %+v, %v", ts, dec, err)
	}
}
