package region

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/bellows-kv/bellows/storage-engine/compaction"
	"github.com/bellows-kv/bellows/storage-engine/kv"
	"github.com/bellows-kv/bellows/storage-engine/manifest"
	"github.com/bellows-kv/bellows/storage-engine/wal"
)

// splitFixture is a parent region "p" holding keys user000000… in several
// files, with overwrites and deletes, and the acknowledged state.
type splitFixture struct {
	dir   string
	opts  Options
	p     *Region
	acked map[string]string // "" = deleted
}

func newSplitFixture(t *testing.T, n int) *splitFixture {
	t.Helper()
	f := &splitFixture{dir: t.TempDir(), acked: map[string]string{}}
	f.opts = testOptions(t, f.dir)
	f.opts.Name = "p"
	f.opts.WALDir = f.dir + "/wal-p"
	f.opts.DisableAutoCompaction = true
	// Acknowledged at the WAL's interval: a split flushes everything
	// anyway, and Close (the tests' crash) writes what is queued.
	f.opts.WALMode = wal.ModeAsync
	f.opts.WALSyncInterval = time.Millisecond
	f.p = mustOpen(t, f.opts)
	for i := range n {
		k, v := fmt.Sprintf("user%06d", i), fmt.Sprintf("v%d", i)
		if _, err := f.p.Put([]byte(k), []byte(v)); err != nil {
			t.Fatal(err)
		}
		f.acked[k] = v
		if i%7 == 3 { // an overwrite, in a later file than the first version
			defer func() {
				if _, err := f.p.Put([]byte(k), []byte(v+"'")); err != nil {
					t.Fatal(err)
				}
				f.acked[k] = v + "'"
			}()
		}
		if i%11 == 5 {
			defer func() {
				if _, err := f.p.Delete([]byte(k)); err != nil {
					t.Fatal(err)
				}
				f.acked[k] = ""
			}()
		}
		if i%(n/4) == n/4-1 {
			if err := f.p.Flush(bg); err != nil {
				t.Fatal(err)
			}
		}
	}
	return f
}

// daughterOptions are the options of daughter name of the split of f's
// parent at final manifest m into [start, end).
func (f *splitFixture) daughterOptions(name string, m uint64, start, end []byte) Options {
	o := f.opts
	o.Name = name
	o.WALDir = f.dir + "/wal-" + name
	o.DeriveFrom = &DeriveFrom{Parents: []manifest.ParentRef{{Name: "p", Manifest: m}}, Start: start, End: end}
	return o
}

// checkDaughter checks that d reads exactly the acknowledged keys of its
// range, refuses the others' keys, and scans only its own.
func checkDaughter(t *testing.T, d *Region, acked map[string]string) {
	t.Helper()
	var want []string
	for k, v := range acked {
		got, ok, err := d.Get([]byte(k), kv.MaxTimestamp)
		if !d.inRange([]byte(k)) {
			if !errors.Is(err, ErrKeyNotInRegion) {
				t.Fatalf("%s: Get(%q) of the sibling's half = %v, want ErrKeyNotInRegion", d.Name(), k, err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s: Get(%q): %v", d.Name(), k, err)
		}
		if v == "" {
			if ok {
				t.Fatalf("%s: deleted %q reads %q", d.Name(), k, got)
			}
			continue
		}
		if !ok || string(got) != v {
			t.Fatalf("%s: Get(%q) = %q, %v; want %q", d.Name(), k, got, ok, v)
		}
		want = append(want, k)
	}
	rows, err := d.Scan(nil, nil, 0, kv.MaxTimestamp)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != len(want) {
		t.Fatalf("%s: a whole scan returns %d rows, want the %d live keys of its range", d.Name(), len(rows), len(want))
	}
	for _, row := range rows {
		if !d.inRange(row.Key) || acked[string(row.Key)] != string(row.Value) {
			t.Fatalf("%s: scan returned %q=%q, not an acknowledged key of its range", d.Name(), row.Key, row.Value)
		}
	}
	// A reverse scan starts at the daughter's end, not at the end of the
	// files it shares with its sibling, whatever end it is given.
	for _, end := range [][]byte{nil, []byte("\xff")} {
		back, err := d.ScanReverse(nil, end, 0, kv.MaxTimestamp)
		if err != nil {
			t.Fatal(err)
		}
		slices.Reverse(back)
		if !slices.EqualFunc(back, rows, func(a, b KV) bool { return bytes.Equal(a.Key, b.Key) && bytes.Equal(a.Value, b.Value) }) {
			t.Fatalf("%s: a whole reverse scan to %q returns %d rows, not the forward scan's %d reversed", d.Name(), end, len(back), len(rows))
		}
		top, err := d.ScanReverse(nil, end, 3, kv.MaxTimestamp)
		if err != nil {
			t.Fatal(err)
		}
		if len(rows) >= 3 && (len(top) != 3 || !bytes.Equal(top[0].Key, rows[len(rows)-1].Key) || !bytes.Equal(top[2].Key, rows[len(rows)-3].Key)) {
			t.Fatalf("%s: a reverse scan with limit 3 returns %d rows from %q, want the 3 highest keys from %q", d.Name(), len(top), top[0].Key, rows[len(rows)-1].Key)
		}
	}
}

func sstObjects(t *testing.T, r *Region, region string) []string {
	t.Helper()
	objs, err := r.opts.Bucket.List(bg, BucketPrefix(region)+"sst/")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, o := range objs {
		if strings.HasSuffix(o.Key, ".sst") {
			out = append(out, o.Key)
		}
	}
	return out
}

// A split's daughters share the parent's files by reference (nothing is
// copied), each reads, writes and scans only its half, the next compaction
// of each rewrites only its half, and the parent cannot be opened again.
func TestSplitDaughtersShareTheParentsFilesAndServeTheirHalf(t *testing.T) {
	f := newSplitFixture(t, 4000)
	k, err := f.p.SplitKey()
	if err != nil {
		t.Fatal(err)
	}
	var below int
	for key := range f.acked {
		if key < string(k) {
			below++
		}
	}
	if below < len(f.acked)*35/100 || below > len(f.acked)*65/100 {
		t.Fatalf("split key %q leaves %d of %d keys below: not about half", k, below, len(f.acked))
	}
	final, err := f.p.PrepareSplit(bg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.p.Put([]byte("user000001"), []byte("late")); !errors.Is(err, ErrSplitting) || !errors.Is(err, ErrClosed) {
		t.Fatalf("a write after PrepareSplit: %v, want ErrSplitting (retry at the daughters)", err)
	}
	if v, ok, err := f.p.Get([]byte("user000002"), kv.MaxTimestamp); err != nil || !ok || string(v) != f.acked["user000002"] {
		t.Fatalf("a read after PrepareSplit: %q %v %v; reads continue until the parent retires", v, ok, err)
	}
	if err := f.p.Retire(bg); err != nil {
		t.Fatal(err)
	}
	parentFiles := sstObjects(t, f.p, "p")

	l := mustOpen(t, f.daughterOptions("l", final.Number, nil, k))
	defer l.Close()
	r := mustOpen(t, f.daughterOptions("r", final.Number, k, nil))
	defer r.Close()
	for _, d := range []*Region{l, r} {
		if objs := sstObjects(t, d, d.Name()); len(objs) != 0 {
			t.Fatalf("%s has files of its own after the split: %v; daughters must share the parent's", d.Name(), objs)
		}
		for _, fm := range d.Manifest().Files {
			if fm.Home != "p" {
				t.Fatalf("%s names %s with home %q, want a reference to p", d.Name(), fm.Key, fm.Home)
			}
		}
		if err := d.checkInvariants(); err != nil {
			t.Fatal(err)
		}
		checkDaughter(t, d, f.acked)
	}

	// Writes: each daughter takes its own keys and refuses the other's.
	if _, err := l.Put(k, []byte("x")); !errors.Is(err, ErrKeyNotInRegion) {
		t.Fatalf("left daughter took the split key: %v", err)
	}
	if _, err := r.Put([]byte("user000000"), []byte("x")); !errors.Is(err, ErrKeyNotInRegion) {
		t.Fatalf("right daughter took a left key: %v", err)
	}
	if _, err := r.Apply(new(Batch).Put(k, []byte("x")).Put([]byte("a"), []byte("y"))); !errors.Is(err, ErrKeyNotInRegion) {
		t.Fatalf("a batch with one key of the sibling: %v, want ErrKeyNotInRegion and nothing written", err)
	}
	if _, ok, _ := r.Get(k, kv.MaxTimestamp); ok && f.acked[string(k)] == "" {
		t.Fatal("a refused batch wrote its other key")
	}
	for _, d := range []*Region{l, r} {
		lo, _ := d.Range()
		key := max(string(lo), "user") + "-new"
		if _, err := d.Put([]byte(key), []byte("new")); err != nil {
			t.Fatal(err)
		}
		f.acked[key] = "new"
	}

	// The next major compaction of the left daughter rewrites only its
	// half, into its own prefix; the parent's files stay for the right.
	if err := l.Flush(bg); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Compact(bg, true); err != nil {
		t.Fatal(err)
	}
	m := l.Manifest()
	if len(m.Files) != 1 || m.Files[0].Home != "" {
		t.Fatalf("after a major compaction the left daughter names %+v, want one file of its own", m.Files)
	}
	if bytes.Compare(m.Files[0].Largest, k) >= 0 {
		t.Fatalf("the left daughter's compaction wrote keys up to %q, past its end %q", m.Files[0].Largest, k)
	}
	if got := sstObjects(t, l, "p"); len(got) != len(parentFiles) {
		t.Fatalf("the parent's files went from %d to %d when a daughter compacted: a reference was deleted", len(parentFiles), len(got))
	}
	checkDaughter(t, l, f.acked)
	checkDaughter(t, r, f.acked)
	if err := l.checkInvariants(); err != nil {
		t.Fatal(err)
	}

	// A daughter reopens from its own manifest; the parent never again.
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l = mustOpen(t, f.daughterOptions("l", final.Number, nil, k))
	checkDaughter(t, l, f.acked)
	if _, err := Open(bg, f.opts); !errors.Is(err, ErrRetired) {
		t.Fatalf("reopening the retired parent: %v, want ErrRetired", err)
	}
}

// The split's commit point is the region map's, outside the region: a
// crash before it leaves the parent, which reopens from its manifest and
// WAL with every acknowledged write and takes writes again (the split is
// undone); a crash after it, before the parent retired or while a daughter
// derived its manifest, leaves daughters that derive the same manifest
// from the parent's final one (the split is finished).
func TestSplitCrashesBeforeOrAfterTheMapCommitLoseNothing(t *testing.T) {
	t.Run("before the map commit: undone", func(t *testing.T) {
		f := newSplitFixture(t, 1000)
		if _, err := f.p.PrepareSplit(bg); err != nil {
			t.Fatal(err)
		}
		if err := f.p.Close(); err != nil { // the crash: no retire
			t.Fatal(err)
		}
		p := mustOpen(t, f.opts)
		defer p.Close()
		checkDaughter(t, p, f.acked)
		if _, err := p.Put([]byte("user000001"), []byte("after")); err != nil {
			t.Fatalf("the parent after an undone split refuses writes: %v", err)
		}
	})
	t.Run("after the map commit: finished", func(t *testing.T) {
		f := newSplitFixture(t, 1000)
		k, err := f.p.SplitKey()
		if err != nil {
			t.Fatal(err)
		}
		final, err := f.p.PrepareSplit(bg)
		if err != nil {
			t.Fatal(err)
		}
		if err := f.p.Close(); err != nil { // crash before Retire
			t.Fatal(err)
		}
		// The left daughter derives and commits, then "crashes"; it
		// derives again on reopen and finds its manifest 1.
		l := mustOpen(t, f.daughterOptions("l", final.Number, nil, k))
		first := l.Manifest()
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		l = mustOpen(t, f.daughterOptions("l", final.Number, nil, k))
		defer l.Close()
		if m := l.Manifest(); len(m.Files) != len(first.Files) || m.FlushedTS != first.FlushedTS || m.Number != first.Number+1 {
			t.Fatalf("reopened daughter: %d files flushed to %d at manifest %d; first open had %d files flushed to %d at %d",
				len(m.Files), m.FlushedTS, m.Number, len(first.Files), first.FlushedTS, first.Number)
		}
		r := mustOpen(t, f.daughterOptions("r", final.Number, k, nil))
		defer r.Close()
		checkDaughter(t, l, f.acked)
		checkDaughter(t, r, f.acked)
		// A daughter's clock starts above every timestamp the parent
		// issued.
		ts, err := r.Put([]byte("zzz"), []byte("v"))
		if err != nil {
			t.Fatal(err)
		}
		if ts <= final.FlushedTS {
			t.Fatalf("daughter committed at %d, not after the parent's last %d", ts, final.FlushedTS)
		}
	})
}

// A cross-region transaction prepared in the parent survives its split: each
// lock goes to the daughter holding its key, the outcome to the one holding
// the primary; the commit completes there; and a status check that reaches
// the wrong daughter (a stale route) is refused, not answered with a
// rollback of a transaction whose primary it does not hold.
func TestSplitPartitionsLocksAndOutcomes(t *testing.T) {
	f := newSplitFixture(t, 400)
	k, err := f.p.SplitKey()
	if err != nil {
		t.Fatal(err)
	}
	left, right := "user000010", "user000390"
	if left >= string(k) || right < string(k) {
		t.Fatalf("split key %q does not separate %s and %s", k, left, right)
	}
	startTS := uint64(time.Now().UnixNano())
	prep := prewrite(t, f.p, startTS, left, time.Minute, left, "tl", right, "tr")
	// An earlier transaction decided at the parent as a primary on the
	// right, so its outcome must travel to the right daughter.
	start2 := startTS + 1
	prep2 := prewrite(t, f.p, start2, right+"x", time.Minute, right+"x", "t2")
	if err := f.p.CommitLocks(bg, start2, prep2+1, keys(right+"x"), true, "req-2"); err != nil {
		t.Fatal(err)
	}
	final, err := f.p.PrepareSplit(bg)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.p.Retire(bg); err != nil {
		t.Fatal(err)
	}
	l := mustOpen(t, f.daughterOptions("l", final.Number, nil, k))
	defer l.Close()
	r := mustOpen(t, f.daughterOptions("r", final.Number, k, nil))
	defer r.Close()
	if ls := l.Locks(); len(ls) != 1 || string(ls[0].Key) != left {
		t.Fatalf("left daughter's locks: %+v, want the one on %s", ls, left)
	}
	if ls := r.Locks(); len(ls) != 1 || string(ls[0].Key) != right {
		t.Fatalf("right daughter's locks: %+v, want the one on %s", ls, right)
	}
	if outs := r.TxnOutcomes(); len(outs) != 1 || outs[0].StartTS != start2 {
		t.Fatalf("right daughter's outcomes: %+v, want the one of the transaction at %d", outs, start2)
	}
	if outs := l.TxnOutcomes(); len(outs) != 0 {
		t.Fatalf("left daughter's outcomes: %+v, want none", outs)
	}
	if _, err := r.CheckTxnStatus(bg, []byte(left), startTS, time.Now(), true); !errors.Is(err, ErrKeyNotInRegion) {
		t.Fatalf("a status check of a primary at the wrong daughter: %v, want ErrKeyNotInRegion", err)
	}
	if err := r.CommitLocks(bg, startTS, prep+1, keys(left), true, ""); !errors.Is(err, ErrKeyNotInRegion) {
		t.Fatalf("a commit of the primary at the wrong daughter: %v, want ErrKeyNotInRegion", err)
	}
	commitTS := max(prep, r.lastTS) + 1
	if err := l.CommitLocks(bg, startTS, commitTS, keys(left), true, ""); err != nil {
		t.Fatal(err)
	}
	if err := r.CommitLocks(bg, startTS, commitTS, keys(right), false, ""); err != nil {
		t.Fatal(err)
	}
	for d, key := range map[*Region]string{l: left, r: right} {
		want := map[string]string{left: "tl", right: "tr"}[key]
		if got, err := getAt(t, d, key, kv.MaxTimestamp); err != nil || got != want {
			t.Fatalf("%s after the commit: %q %v, want %q", key, got, err, want)
		}
	}
}

// The compaction job carries the region's range, so a worker merging a
// reference file writes only the daughter's keys.
func TestCompactionJobCarriesTheRange(t *testing.T) {
	f := newSplitFixture(t, 800)
	k, err := f.p.SplitKey()
	if err != nil {
		t.Fatal(err)
	}
	final, err := f.p.PrepareSplit(bg)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.p.Retire(bg); err != nil {
		t.Fatal(err)
	}
	var jobs []string
	o := f.daughterOptions("r", final.Number, k, nil)
	o.Executor = recordingExecutor{inner: compaction.Local{Bucket: o.Bucket}, f: func(start, end []byte, inputs []string) {
		jobs = append(jobs, fmt.Sprintf("[%s,%v) %d inputs under %s", start, end, len(inputs), strings.Split(inputs[0], "/sst/")[0]))
	}}
	r := mustOpen(t, o)
	defer r.Close()
	refs := len(r.Manifest().Files)
	if refs == 0 || refs > len(final.Files) {
		t.Fatalf("the daughter references %d of the parent's %d files", refs, len(final.Files))
	}
	if _, err := r.Compact(bg, true); err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("[%s,[]) %d inputs under regions/p", k, refs)
	if len(jobs) != 1 || jobs[0] != want {
		t.Fatalf("jobs = %q, want [%q]", jobs, want)
	}
	checkDaughter(t, r, f.acked)
}

// recordingExecutor runs jobs locally and tells f what each asked for.
type recordingExecutor struct {
	inner compaction.Executor
	f     func(start, end []byte, inputs []string)
}

func (e recordingExecutor) Execute(ctx context.Context, job compaction.Job) (compaction.Result, error) {
	e.f(job.Start, job.End, job.Inputs)
	return e.inner.Execute(ctx, job)
}

// WritesStoppedAt is zero while the region takes writes and, after
// PrepareSplit, the moment writes stopped: before its final flush, so a
// split's unavailability counted from it includes that flush.
func TestWritesStoppedAtMarksTheStartOfTheRefusal(t *testing.T) {
	f := newSplitFixture(t, 500)
	if at := f.p.WritesStoppedAt(); !at.IsZero() {
		t.Fatalf("WritesStoppedAt %v while the region takes writes", at)
	}
	before := time.Now()
	if _, err := f.p.PrepareSplit(bg); err != nil {
		t.Fatal(err)
	}
	after := time.Now()
	at := f.p.WritesStoppedAt()
	if at.Before(before) || at.After(after) {
		t.Fatalf("WritesStoppedAt %v, want within PrepareSplit [%v, %v]", at, before, after)
	}
	if _, err := f.p.Put([]byte("user000001"), []byte("late")); !errors.Is(err, ErrSplitting) {
		t.Fatalf("a write after PrepareSplit: %v, want ErrSplitting", err)
	}
	if got := f.p.WritesStoppedAt(); !got.Equal(at) {
		t.Fatalf("WritesStoppedAt moved from %v to %v", at, got)
	}
	if err := f.p.Retire(bg); err != nil {
		t.Fatal(err)
	}
}
