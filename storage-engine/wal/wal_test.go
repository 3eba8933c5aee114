package wal

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
)

func replayAll(t *testing.T, dir string) ([]string, ReplayStats) {
	t.Helper()
	var got []string
	st, err := Replay(dir, 0, func(_ uint64, p []byte) error {
		got = append(got, string(p))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return got, st
}

func TestGroupCommitKeepsAppendOrderAcrossRotations(t *testing.T) {
	for _, mode := range []Mode{ModeSync, ModeAsync} {
		t.Run(mode.String(), func(t *testing.T) {
			dir := t.TempDir()
			l, err := Open(Options{Dir: dir, Mode: mode})
			if err != nil {
				t.Fatal(err)
			}
			var mu sync.Mutex // serialises Append so the expected order is known
			var want []string
			var wg sync.WaitGroup
			for w := 0; w < 8; w++ {
				wg.Add(1)
				go func(w int) {
					defer wg.Done()
					for i := 0; i < 200; i++ {
						rec := fmt.Sprintf("w%d-%d", w, i)
						mu.Lock()
						c := l.Append([]byte(rec))
						want = append(want, rec)
						if i%50 == 0 {
							l.Rotate()
						}
						mu.Unlock()
						if err := c.Wait(); err != nil {
							t.Error(err)
						}
					}
				}(w)
			}
			wg.Wait()
			size := l.Size()
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			got, st := replayAll(t, dir)
			if st.Bytes != size {
				t.Fatalf("replay read %d bytes, the log held %d", st.Bytes, size)
			}
			if len(got) != len(want) {
				t.Fatalf("replayed %d records, want %d", len(got), len(want))
			}
			for i := range want {
				if got[i] != want[i] {
					t.Fatalf("record %d = %q, want %q", i, got[i], want[i])
				}
			}
			if st.Segments < 2 {
				t.Fatalf("expected several segments, got %d", st.Segments)
			}
		})
	}
}

func TestTornTailIsTruncatedToLastIntactRecord(t *testing.T) {
	dir := t.TempDir()
	l, err := Open(Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 10; i++ {
		if err := l.Append([]byte(fmt.Sprintf("record-%d", i))).Wait(); err != nil {
			t.Fatal(err)
		}
	}
	seg := l.CurrentSegment()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, SegmentName(seg))
	info, _ := os.Stat(path)
	// Cut the last record in half, as a crash mid-write would.
	if err := os.Truncate(path, info.Size()-4); err != nil {
		t.Fatal(err)
	}
	got, st := replayAll(t, dir)
	if len(got) != 9 || got[8] != "record-8" {
		t.Fatalf("replayed %v, want record-0..record-8", got)
	}
	if st.TruncatedBytes == 0 || st.TruncatedSeg != seg {
		t.Fatalf("stats %+v should report the truncated tail", st)
	}
	// The truncation is persistent: a second replay sees a clean log and a
	// new log appends after it.
	if got, st := replayAll(t, dir); len(got) != 9 || st.TruncatedBytes != 0 {
		t.Fatalf("second replay: %d records, %+v", len(got), st)
	}
	l2, err := Open(Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if err := l2.Append([]byte("after")).Wait(); err != nil {
		t.Fatal(err)
	}
	l2.Close()
	if got, _ := replayAll(t, dir); len(got) != 10 || got[9] != "after" {
		t.Fatalf("after reopen: %v", got)
	}
}

func TestCorruptionInClosedSegmentIsAnError(t *testing.T) {
	dir := t.TempDir()
	l, _ := Open(Options{Dir: dir})
	first := l.CurrentSegment()
	l.Append([]byte("aaaaaaaa")).Wait()
	l.Rotate()
	l.Append([]byte("bbbbbbbb")).Wait()
	l.Close()
	path := filepath.Join(dir, SegmentName(first))
	b, _ := os.ReadFile(path)
	b[len(b)-1] ^= 1
	os.WriteFile(path, b, 0o644)
	if _, err := Replay(dir, 0, func(uint64, []byte) error { return nil }); err == nil {
		t.Fatal("damage in a closed segment must not be silently truncated")
	}
}

func TestAppendAfterCloseFails(t *testing.T) {
	l, _ := Open(Options{Dir: t.TempDir()})
	l.Close()
	if err := l.Append([]byte("x")).Wait(); err != ErrClosed {
		t.Fatalf("err = %v, want ErrClosed", err)
	}
}

func TestRemoveBefore(t *testing.T) {
	dir := t.TempDir()
	l, _ := Open(Options{Dir: dir})
	l.Append([]byte("a")).Wait()
	n := l.Rotate()
	l.Append([]byte("b")).Wait()
	if err := l.RemoveBefore(n); err != nil {
		t.Fatal(err)
	}
	l.Close()
	if got, _ := replayAll(t, dir); len(got) != 1 || got[0] != "b" {
		t.Fatalf("after RemoveBefore: %v", got)
	}
}

func TestNumberingNeverRestartsBelowMinSegment(t *testing.T) {
	// A crash after every flushed segment was removed, before the next one
	// was created, leaves an empty directory; replay starts at the
	// manifest's segment 9, so new writes must not go to segment 1.
	dir := t.TempDir()
	l, err := Open(Options{Dir: dir, MinSegment: 9})
	if err != nil {
		t.Fatal(err)
	}
	if got := l.CurrentSegment(); got != 9 {
		t.Fatalf("first segment %d, want 9", got)
	}
	l.Append([]byte("x")).Wait()
	l.Close()
	var got []string
	if _, err := Replay(dir, 9, func(_ uint64, p []byte) error { got = append(got, string(p)); return nil }); err != nil || len(got) != 1 {
		t.Fatalf("replay from 9: %v, %v", got, err)
	}
}

func TestSizeCountsAppendsAndRemovals(t *testing.T) {
	dir := t.TempDir()
	l, err := Open(Options{Dir: dir, Mode: ModeSync})
	if err != nil {
		t.Fatal(err)
	}
	rec := make([]byte, 100)
	if err := l.Append(rec).Wait(); err != nil {
		t.Fatal(err)
	}
	first := l.Rotate()
	if err := l.Append(rec).Wait(); err != nil {
		t.Fatal(err)
	}
	if got, want := l.Size(), int64(2*(headerLen+100)); got != want || l.Appended() != want {
		t.Fatalf("Size after two appends = %d, want %d", got, want)
	}
	if err := l.RemoveBefore(first); err != nil {
		t.Fatal(err)
	}
	if got, want := l.Size(), int64(headerLen+100); got != want {
		t.Fatalf("Size after removing the first segment = %d, want %d", got, want)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	// A reopened log counts what is on disk.
	l, err = Open(Options{Dir: dir, Mode: ModeSync})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if got, want := l.Size(), int64(headerLen+100); got != want {
		t.Fatalf("Size after reopening = %d, want %d", got, want)
	}
}

// An async append is acknowledged before the writer writes it, so a flush
// can remove segments the writer has not created yet: they must go too,
// once written, and stop counting in Size at once.
func TestRemoveBeforeReachesSegmentsTheWriterHasNotWritten(t *testing.T) {
	dir := t.TempDir()
	l, err := Open(Options{Dir: dir, Mode: ModeAsync})
	if err != nil {
		t.Fatal(err)
	}
	rec := make([]byte, 256<<10)
	var last uint64
	for i := 0; i < 64; i++ {
		if err := l.Append(rec).Wait(); err != nil {
			t.Fatal(err)
		}
		last = l.Rotate()
	}
	if err := l.RemoveBefore(last); err != nil {
		t.Fatal(err)
	}
	if got := l.Size(); got != 0 {
		t.Fatalf("Size after removing every segment with records = %d, want 0", got)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	segs, err := Segments(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(segs) != 1 || segs[0] != last {
		t.Fatalf("segments left %v; want only %d", segs, last)
	}
}
