package walarchive

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"

	"github.com/bellows-kv/bellows/storage-engine/blob"
	"github.com/bellows-kv/bellows/storage-engine/wal"
)

// newDurableLog is a log in a new directory whose replica is region r's
// durable stream from WAL w1, claimed by manifest 1, from minSegment.
func newDurableLog(t *testing.T, ctx context.Context, bucket *blob.Bucket, minSegment uint64) *wal.Log {
	t.Helper()
	dir := t.TempDir()
	s, first, err := Durable(ctx, bucket, "r", "w1", dir, 0, 1, minSegment)
	if err != nil {
		t.Fatal(err)
	}
	return openDurable(t, ctx, s, first, dir)
}

// openDurable opens a log in dir whose replica is region r's durable stream
// from WAL walID.
func openDurable(t *testing.T, ctx context.Context, s3 *Shipper, first uint64, dir string) *wal.Log {
	t.Helper()
	l, err := wal.Open(wal.Options{Dir: dir, Mode: wal.ModeAsync, MinSegment: first, HoldUntilArchived: true, Replica: s3})
	if err != nil {
		t.Fatal(err)
	}
	s3.Attach(l)
	return l
}

// A writer appends from several goroutines, rotating its segments, while
// another process fences its stream at a random moment. Every record the
// log acknowledged is in the stream, in order, before the fence; every
// append after the fence fails with ErrFenced; and a later tenure of the
// same WAL directory goes on after the fence, its records read back too.
func TestAFenceStopsTheWriterAndKeepsEveryAcknowledgedRecord(t *testing.T) {
	for seed := range uint64(12) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			ctx := context.Background()
			rng := rand.New(rand.NewPCG(seed, 1))
			bucket := openBucket(t)
			dir := t.TempDir()
			s, first, err := Durable(ctx, bucket, "r", "w1", dir, 0, 1, 3)
			if err != nil {
				t.Fatal(err)
			}
			if first != 3 {
				t.Fatalf("a new stream starts at the log's minimum segment: got %d, want 3", first)
			}
			l := openDurable(t, ctx, s, first, dir)

			var (
				mu    sync.Mutex
				acked []string
				after int // acknowledged after the fence returned: must stay 0
			)
			fenced := make(chan struct{})
			var wg sync.WaitGroup
			for w := range 4 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := 0; ; i++ {
						rec := fmt.Sprintf("w%d-%04d", w, i)
						began := false // after the fence returned
						select {
						case <-fenced:
							began = true
						default:
						}
						err := l.Append([]byte(rec)).Wait()
						if began && err == nil {
							mu.Lock()
							after++
							mu.Unlock()
						}
						if err != nil {
							if !errors.Is(err, ErrFenced) {
								t.Errorf("append failed with %v, want ErrFenced", err)
							}
							return
						}
						mu.Lock()
						acked = append(acked, rec)
						mu.Unlock()
						if i%7 == 0 {
							l.Rotate()
						}
					}
				}()
			}
			// Fence after a random number of acknowledgements.
			want := 20 + rng.IntN(200)
			for {
				mu.Lock()
				n := len(acked)
				mu.Unlock()
				if n >= want {
					break
				}
				if err := l.Written(); err != nil {
					break
				}
			}
			if _, _, err := Fence(ctx, bucket, "r", "w1", 2); err != nil {
				t.Fatal(err)
			}
			close(fenced)
			wg.Wait()
			_ = l.Close()
			if after != 0 {
				t.Fatalf("%d appends were acknowledged after the fence", after)
			}
			got, err := readAll(t, bucket, "w1")
			if err != nil {
				t.Fatal(err)
			}
			for _, rec := range acked {
				if !slices.Contains(got, rec) {
					t.Fatalf("acknowledged record %s is not in the stream (%d acknowledged, %d in the stream)", rec, len(acked), len(got))
				}
			}
			checkPerWriterOrder(t, got)

			// A later tenure of the same directory (the region moved back).
			s2, first2, err := Durable(ctx, bucket, "r", "w1", dir, 0, 3, 1)
			if err != nil {
				t.Fatal(err)
			}
			l2 := openDurable(t, ctx, s2, first2, dir)
			if err := l2.Append([]byte("later")).Wait(); err != nil {
				t.Fatalf("the next tenure cannot write after the fence: %v", err)
			}
			if _, err := s2.Ship(ctx, 1, true); err != nil {
				t.Fatal(err)
			}
			_ = l2.Close()
			got2, err := readAll(t, bucket, "w1")
			if err != nil {
				t.Fatalf("a fenced stream with a later tenure does not read: %v", err)
			}
			if len(got2) != len(got)+1 || got2[len(got2)-1] != "later" {
				t.Fatalf("after the next tenure the stream reads %d records ending %q, want %d ending \"later\"", len(got2), got2[len(got2)-1], len(got)+1)
			}
		})
	}
}

func checkPerWriterOrder(t *testing.T, got []string) {
	t.Helper()
	last := map[string]string{}
	for _, rec := range got {
		w := rec[:2]
		if prev, ok := last[w]; ok && prev >= rec {
			t.Fatalf("stream out of order: %s after %s", rec, prev)
		}
		last[w] = rec
	}
}

// A stream fenced before its writer wrote anything keeps the writer from
// starting at all.
func TestAStreamFencedBeforeItsFirstRecordCannotStart(t *testing.T) {
	ctx := context.Background()
	bucket := openBucket(t)
	if _, _, err := Fence(ctx, bucket, "r", "w1", 2); err != nil {
		t.Fatal(err)
	}
	if _, _, err := Durable(ctx, bucket, "r", "w1", t.TempDir(), 0, 1, 1); !errors.Is(err, ErrFenced) {
		t.Fatalf("Durable on a stream fenced before it began: %v, want ErrFenced", err)
	}
}

// A writer that started but committed nothing yet (its stream has only its
// stream.json) is fenced at its first segment.
func TestAStartedWriterWithNoRecordIsFencedAtItsFirstSegment(t *testing.T) {
	ctx := context.Background()
	bucket := openBucket(t)
	l := newDurableLog(t, ctx, bucket, 5)
	defer l.Close()
	seg, off, err := Fence(ctx, bucket, "r", "w1", 2)
	if err != nil {
		t.Fatal(err)
	}
	if seg != 5 || off != 0 {
		t.Fatalf("fenced at %d/%d, want 5/0", seg, off)
	}
	if err := l.Append([]byte("x")).Wait(); !errors.Is(err, ErrFenced) {
		t.Fatalf("append after the fence: %v, want ErrFenced", err)
	}
}

// A stream shipped behind its log (Local mode) is fenced too: its shipper's
// next part fails instead of writing past the fence.
func TestAFenceStopsAShipperBehindItsLog(t *testing.T) {
	ctx := context.Background()
	bucket := openBucket(t)
	dir := t.TempDir()
	l := openLog(t, dir)
	defer l.Close()
	s, err := Resume(ctx, bucket, "r", "w1", dir, 0, l)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Append([]byte("a")).Wait(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Ship(ctx, 1, false); err != nil {
		t.Fatal(err)
	}
	if _, _, err := Fence(ctx, bucket, "r", "w1", 2); err != nil {
		t.Fatal(err)
	}
	if err := l.Append([]byte("b")).Wait(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Ship(ctx, 2, false); !errors.Is(err, ErrFenced) {
		t.Fatalf("a ship past the fence: %v, want ErrFenced", err)
	}
	got, err := readAll(t, bucket, "w1")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, []string{"a"}) {
		t.Fatalf("stream reads %q, want [a]", got)
	}
}

// A writer whose claim came before the fence's, and which starts only after
// the fence (its region's open was slow), is refused; a later tenure, whose
// claim is after the fence's, is not.
func TestAWriterStartingAfterTheFenceIsRefused(t *testing.T) {
	ctx := context.Background()
	bucket := openBucket(t)
	dir := t.TempDir()
	s, first, err := Durable(ctx, bucket, "r", "w1", dir, 0, 1, 1)
	if err != nil {
		t.Fatal(err)
	}
	l := openDurable(t, ctx, s, first, dir)
	if err := l.Append([]byte("a")).Wait(); err != nil {
		t.Fatal(err)
	}
	l.Rotate()
	if err := l.Append([]byte("b")).Wait(); err != nil {
		t.Fatal(err)
	}
	_ = l.Close()
	if _, _, err := Fence(ctx, bucket, "r", "w1", 4); err != nil {
		t.Fatal(err)
	}
	if _, _, err := Durable(ctx, bucket, "r", "w1", dir, 0, 3, 1); !errors.Is(err, ErrFenced) {
		t.Fatalf("a writer claimed by manifest 3 after a fence by 4: %v, want ErrFenced", err)
	}
	if _, _, err := Durable(ctx, bucket, "r", "w1", dir, 0, 5, 1); err != nil {
		t.Fatalf("a later tenure (manifest 5): %v", err)
	}
}

// A reader that stops partway (its callback fails) gets its callback's
// error back, having seen a prefix of the stream in order, while the reads
// ahead of it are still in flight.
func TestAReaderThatStopsPartwayGetsItsErrorAfterAnOrderedPrefix(t *testing.T) {
	ctx := context.Background()
	bucket := openBucket(t)
	l := newDurableLog(t, ctx, bucket, 1)
	const n = 3 * readAhead
	for i := range n {
		if err := l.Append([]byte(fmt.Sprintf("w0-%04d", i))).Wait(); err != nil {
			t.Fatal(err)
		}
		if i%5 == 4 {
			l.Rotate()
		}
	}
	_ = l.Close()
	got, err := readAll(t, bucket, "w1")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != n {
		t.Fatalf("the stream reads %d records, want %d", len(got), n)
	}
	checkPerWriterOrder(t, got)

	st, err := LoadStream(ctx, bucket, "r", "w1")
	if err != nil {
		t.Fatal(err)
	}
	stop := errors.New("enough")
	var seen []string
	err = Read(ctx, bucket, st, 0, func(rec []byte) error {
		seen = append(seen, string(rec))
		if len(seen) == readAhead/2 {
			return stop
		}
		return nil
	})
	if !errors.Is(err, stop) {
		t.Fatalf("Read returned %v, want the callback's error", err)
	}
	if !slices.Equal(seen, got[:readAhead/2]) {
		t.Fatalf("the reader saw %v, want the stream's first %d records %v", seen, readAhead/2, got[:readAhead/2])
	}
}
