package walarchive

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bellows-kv/bellows/storage-engine/blob"
	"github.com/bellows-kv/bellows/storage-engine/wal"
)

func openBucket(t *testing.T) *blob.Bucket {
	t.Helper()
	b, err := blob.Open(context.Background(), "file://"+t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b
}

func openLog(t *testing.T, dir string) *wal.Log {
	t.Helper()
	l, err := wal.Open(wal.Options{Dir: dir, Mode: wal.ModeAsync, HoldUntilArchived: true})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func readAll(t *testing.T, b *blob.Bucket, walID string) ([]string, error) {
	t.Helper()
	s, err := LoadStream(context.Background(), b, "r", walID)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	err = Read(context.Background(), b, s, 0, func(p []byte) error {
		got = append(got, string(p))
		return nil
	})
	return got, err
}

// Records shipped across rotations, a removal the archive had not allowed
// yet, a process that stops between ships and a Shipper resumed from the
// bucket all come back exactly once, in order; a segment leaves the volume
// only once it is sealed in the archive, and the stream records its
// frontier and, at the end, that it is final.
func TestShippedRecordsComeBackOnceInOrderAcrossARestart(t *testing.T) {
	ctx := context.Background()
	bucket := openBucket(t)
	dir := t.TempDir()
	l := openLog(t, dir)
	s, err := Resume(ctx, bucket, "r", "w1", dir, 7, l)
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	appendN := func(l *wal.Log, n int) {
		for range n {
			rec := fmt.Sprintf("record-%04d", len(want))
			want = append(want, rec)
			l.Append([]byte(rec))
		}
	}
	appendN(l, 10)
	if _, err := s.Ship(ctx, 100, false); err != nil {
		t.Fatal(err)
	}
	appendN(l, 5)
	first := l.Rotate() - 1
	appendN(l, 5)
	// The region flushed everything: the log may drop segment first, but
	// the archive has not sealed it yet.
	if err := l.RemoveBefore(first + 1); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, wal.SegmentName(first))); err != nil {
		t.Fatalf("segment %d left the volume before it was archived: %v", first, err)
	}
	st, err := s.Ship(ctx, 200, false)
	if err != nil {
		t.Fatal(err)
	}
	if st.PendingBytes != 0 {
		t.Fatalf("%d bytes pending after a ship with no appends racing it", st.PendingBytes)
	}
	if _, err := os.Stat(filepath.Join(dir, wal.SegmentName(first))); !os.IsNotExist(err) {
		t.Fatalf("segment %d stayed on the volume after it was sealed and released: %v", first, err)
	}
	appendN(l, 3) // written, never shipped by this process
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}

	// A restart: the same WAL directory, a new log and Shipper.
	l2 := openLog(t, dir)
	defer l2.Close()
	s2, err := Resume(ctx, bucket, "r", "w1", dir, 50, l2)
	if err != nil {
		t.Fatal(err)
	}
	appendN(l2, 4)
	if _, err := s2.Ship(ctx, 300, false); err != nil {
		t.Fatal(err)
	}
	got, err := readAll(t, bucket, "w1")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("archive holds\n%v\nwant\n%v", got, want)
	}
	meta, err := LoadStream(ctx, bucket, "r", "w1")
	if err != nil {
		t.Fatal(err)
	}
	if meta.FromTS != 7 || meta.TS != 300 || meta.Final {
		t.Fatalf("stream %+v; want fromTS 7 (the first tenure's), ts 300, not final", meta)
	}
	if err := l2.Close(); err != nil && !errors.Is(err, wal.ErrClosed) {
		t.Fatal(err)
	}
	if _, err := s2.Ship(ctx, 400, true); err != nil {
		t.Fatal(err)
	}
	if meta, _ = LoadStream(ctx, bucket, "r", "w1"); !meta.Final {
		t.Fatalf("stream %+v after the final ship; want final", meta)
	}
}

// Each kind of hole is found and named: a part missing inside a segment,
// a whole segment missing, a segment sealed at another size.
func TestReadRefusesEachKindOfHole(t *testing.T) {
	s := Stream{Region: "r", WALID: "w"}
	for _, tc := range []struct {
		name  string
		parts []part
		says  string
	}{
		{"a part missing", []part{{seg: 1, off: 0, size: 10}, {seg: 1, off: 20, size: 5}}, "bytes 10 to 20 missing"},
		{"a segment missing", []part{{seg: 1, size: 10}, {seg: 1, sealed: true, size: 10}, {seg: 3, size: 4}}, "segments 2 to 2 are missing"},
		{"an unsealed segment followed", []part{{seg: 1, size: 10}, {seg: 2, size: 4}}, "never sealed"},
		{"sealed at another size", []part{{seg: 1, size: 10}, {seg: 1, sealed: true, size: 12}}, "sealed at 12 bytes"},
	} {
		err := checkContiguous(s, tc.parts)
		if !errors.Is(err, ErrGap) || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%s: %v; want ErrGap saying %q", tc.name, err, tc.says)
		}
	}
	ok := []part{{seg: 4, size: 10}, {seg: 4, off: 10, size: 3}, {seg: 4, sealed: true, size: 13}, {seg: 5, sealed: true}, {seg: 6, size: 2}}
	if err := checkContiguous(s, ok); err != nil {
		t.Errorf("a contiguous stream: %v", err)
	}
}

// A prune interrupted inside a segment (some of its parts deleted, its seal
// not yet) leaves a stream a restore from after that segment still reads,
// and one from before it refuses.
func TestAnInterruptedPruneLeavesAReadableStream(t *testing.T) {
	s := Stream{Region: "r", WALID: "w"}
	parts := []part{{seg: 2, off: 10, size: 5}, {seg: 2, sealed: true, size: 15, maxTS: 100}, {seg: 3, size: 7}, {seg: 3, sealed: true, size: 7, maxTS: 200}, {seg: 4, size: 3}}
	if rest := parts[len(skippable(parts, 150)):]; checkContiguous(s, rest) != nil || rest[0].seg != 3 {
		t.Fatalf("from 150 the stream reads from segment 3: %v, %v", rest, checkContiguous(s, rest))
	}
	if err := checkContiguous(s, parts[len(skippable(parts, 50)):]); !errors.Is(err, ErrGap) {
		t.Fatalf("from 50 the pruned bytes are needed: %v, want ErrGap", err)
	}
}

// The frontier a ship records may lie below the records it shipped (the
// region computes it a clock offset behind now), so the first quiet ship
// after one that shipped records the new frontier: a burst's last records
// are covered one interval after it, not only at the next idle refresh
// (a minute by default), which a change feed and a restore to "now"
// would wait for. Later quiet ships write nothing until the idle refresh.
func TestTheShipAfterABurstRecordsTheFrontierThatCoversIt(t *testing.T) {
	ctx := context.Background()
	bucket := openBucket(t)
	for _, durable := range []bool{false, true} {
		walID := fmt.Sprintf("w-durable-%t", durable)
		dir := t.TempDir()
		l := openLog(t, dir)
		var s *Shipper
		var err error
		if durable {
			if s, _, err = Durable(ctx, bucket, "r", walID, dir, 0, 1, 0); err == nil {
				s.Attach(l)
			}
		} else {
			s, err = Resume(ctx, bucket, "r", walID, dir, 0, l)
		}
		if err != nil {
			t.Fatal(err)
		}
		s.IdleRefresh = 12
		frontier := func() uint64 {
			meta, err := LoadStream(ctx, bucket, "r", walID)
			if err != nil {
				t.Fatal(err)
			}
			return meta.TS
		}
		l.Append([]byte("burst"))
		if durable {
			// The durable writer commits to the stream itself.
			if err := s.Commit(0, 0, []byte("burst")); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := s.Ship(ctx, 100, false); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Ship(ctx, 200, false); err != nil { // quiet: nothing new
			t.Fatal(err)
		}
		if got := frontier(); got != 200 {
			t.Errorf("durable %t: after a burst and a quiet ship the frontier is %d, want 200 (the quiet ship's)", durable, got)
		}
		if _, err := s.Ship(ctx, 300, false); err != nil { // quiet again: no write until the idle refresh
			t.Fatal(err)
		}
		if got := frontier(); got != 200 {
			t.Errorf("durable %t: a second quiet ship wrote the frontier %d; want it left at 200 until the idle refresh", durable, got)
		}
		_ = l.Close()
	}
}

// A reader following a stream with ReadAfter's cursor gets each record
// once, in order, across ships, a sealed segment and the next one, and
// sees the fence a takeover puts after them.
func TestReadAfterFollowsAStreamFromItsCursor(t *testing.T) {
	ctx := context.Background()
	bucket := openBucket(t)
	dir := t.TempDir()
	l := openLog(t, dir)
	defer l.Close()
	s, err := Resume(ctx, bucket, "r", "w", dir, 0, l)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	appendN := func(k int) {
		for range k {
			l.Append([]byte(fmt.Sprintf("record-%02d", n)))
			n++
		}
	}
	var got []string
	var c Cursor
	follow := func(want int) bool {
		t.Helper()
		meta, err := LoadStream(ctx, bucket, "r", "w")
		if err != nil {
			t.Fatal(err)
		}
		before := len(got)
		next, _, fenced, err := ReadAfter(ctx, bucket, meta, c, 0, func(_ uint64, p []byte) error {
			got = append(got, string(p))
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		c = next
		if len(got)-before != want {
			t.Fatalf("a read from the cursor got %d records, want %d: %q", len(got)-before, want, got[before:])
		}
		return fenced
	}
	appendN(3)
	if _, err := s.Ship(ctx, 10, false); err != nil {
		t.Fatal(err)
	}
	follow(3)
	appendN(2)
	if _, err := s.Ship(ctx, 20, false); err != nil {
		t.Fatal(err)
	}
	follow(2)
	l.Rotate()
	appendN(2)
	if _, err := s.Ship(ctx, 30, false); err != nil {
		t.Fatal(err)
	}
	follow(2)
	if follow(0) {
		t.Fatal("a fence reported before any")
	}
	if _, _, err := Fence(ctx, bucket, "r", "w", 9); err != nil {
		t.Fatal(err)
	}
	if !follow(0) {
		t.Fatal("the takeover's fence was not reported")
	}
	all, err := readAll(t, bucket, "w")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(got, ",") != strings.Join(all, ",") || len(all) != n {
		t.Fatalf("followed %q, the stream holds %q (%d appended)", got, all, n)
	}
}
