package wal

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// appendAll appends each record to l and waits for it.
func appendAll(t *testing.T, l *Log, records ...string) {
	t.Helper()
	for _, r := range records {
		if err := l.Append([]byte(r)).Wait(); err != nil {
			t.Fatal(err)
		}
	}
}

func numbered(prefix string, n int) []string {
	var rs []string
	for i := range n {
		rs = append(rs, fmt.Sprintf("%s-%03d", prefix, i))
	}
	return rs
}

func fileSize(t *testing.T, path string) int64 {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}

// The open segment's file is allocated a chunk ahead of its writes, so an
// acknowledged write does not grow it; a closed segment is cut to its
// records, and replay reads them with nothing reported torn.
func TestASegmentIsAllocatedAheadAndCutToItsRecordsWhenClosed(t *testing.T) {
	if preallocateChunk <= 0 {
		t.Skip("segments are not allocated ahead on this platform")
	}
	dir := t.TempDir()
	l, err := Open(Options{Dir: dir, Mode: ModeSync})
	if err != nil {
		t.Fatal(err)
	}
	first := l.CurrentSegment()
	appendAll(t, l, "a-0", "a-1")
	if got := fileSize(t, filepath.Join(dir, SegmentName(first))); got != preallocateChunk {
		t.Fatalf("open segment %d is %d bytes, want the chunk of %d allocated ahead", first, got, preallocateChunk)
	}
	// A unit larger than a chunk is allocated whole.
	big := strings.Repeat("b", int(preallocateChunk)+10)
	appendAll(t, l, big)
	if got := fileSize(t, filepath.Join(dir, SegmentName(first))); got != 2*preallocateChunk {
		t.Fatalf("open segment %d is %d bytes after %d written, want %d", first, got, 2*(headerLen+3)+headerLen+len(big), 2*preallocateChunk)
	}
	second := l.Rotate()
	appendAll(t, l, "c-0")
	if got, want := fileSize(t, filepath.Join(dir, SegmentName(first))), int64(2*(headerLen+3)+headerLen+len(big)); got != want {
		t.Fatalf("closed segment %d is %d bytes, want its records' %d", first, got, want)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if got, want := fileSize(t, filepath.Join(dir, SegmentName(second))), int64(headerLen+3); got != want {
		t.Fatalf("segment %d closed with the log is %d bytes, want %d", second, got, want)
	}
	got, st := replayAll(t, dir)
	if len(got) != 4 || got[0] != "a-0" || got[3] != "c-0" || st.TruncatedBytes != 0 {
		t.Fatalf("replayed %d records (%+v), want a-0, a-1, the big one, c-0 and nothing torn", len(got), st)
	}
}

// A store that dies with a segment open leaves its records followed by the
// zeros allocated ahead. Replay reads the records, cuts the zeros from
// every segment that has them (one may be older than the newest, in a
// directory replayed by no one in between), and reports nothing torn; a
// record cut in half before the zeros is a torn tail as before.
func TestACrashLeavesZerosThatReplayCutsAsTheEnd(t *testing.T) {
	if preallocateChunk <= 0 {
		t.Skip("segments are not allocated ahead on this platform")
	}
	dir := t.TempDir()
	l, err := Open(Options{Dir: dir, Mode: ModeSync})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	seg := l.CurrentSegment()
	appendAll(t, l, numbered("r", 3)...)
	// The crash: the file as the writer left it, before any Close.
	b, err := os.ReadFile(filepath.Join(dir, SegmentName(seg)))
	if err != nil {
		t.Fatal(err)
	}
	own := 3 * (headerLen + len("r-000"))
	if len(b) != int(preallocateChunk) || !Unwritten(b[own:]) {
		t.Fatalf("the open segment is %d bytes, zeros after its records: %v", len(b), Unwritten(b[own:]))
	}
	crashed := t.TempDir()
	for _, s := range []uint64{1, 2} {
		if err := os.WriteFile(filepath.Join(crashed, SegmentName(s)), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, st := replayAll(t, crashed)
	if len(got) != 6 || st.TruncatedBytes != 0 {
		t.Fatalf("replayed %v (%+v), want r-000..r-002 twice and nothing torn", got, st)
	}
	for _, s := range []uint64{1, 2} {
		if got := fileSize(t, filepath.Join(crashed, SegmentName(s))); got != int64(own) {
			t.Fatalf("replay left segment %d at %d bytes, want %d", s, got, own)
		}
	}

	torn := append([]byte(nil), b...)
	copy(torn[own:], b[:headerLen+2]) // half a record, then zeros
	if err := os.WriteFile(filepath.Join(crashed, SegmentName(3)), torn, 0o644); err != nil {
		t.Fatal(err)
	}
	if got, st := replayAll(t, crashed); len(got) != 9 || st.TruncatedSeg != 3 || st.TruncatedBytes == 0 {
		t.Fatalf("replayed %d records (%+v), want 9 and segment 3's torn tail reported", len(got), st)
	}
}

// BenchmarkSyncedAppend is one writer's acknowledged 128-byte append in
// ModeSync, into a segment file grown by each write and into one allocated
// ahead.
func BenchmarkSyncedAppend(b *testing.B) {
	rec := make([]byte, 128)
	chunk := preallocateChunk
	defer func() { preallocateChunk = chunk }()
	for _, c := range []struct {
		name  string
		chunk int64
	}{{"grown-by-each-write", 0}, {"allocated-ahead", chunk}} {
		b.Run(c.name, func(b *testing.B) {
			preallocateChunk = c.chunk
			l, err := Open(Options{Dir: b.TempDir(), Mode: ModeSync})
			if err != nil {
				b.Fatal(err)
			}
			defer l.Close()
			b.ResetTimer()
			for range b.N {
				if err := l.Append(rec).Wait(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
