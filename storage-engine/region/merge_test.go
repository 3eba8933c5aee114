package region

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/bellows-kv/bellows/storage-engine/kv"
	"github.com/bellows-kv/bellows/storage-engine/manifest"
)

// mergeFixture is a split's two daughters l and r of the fixture's parent
// p, still referencing p's files, each written to afterwards in turns (so
// their files' timestamps interleave), with deletes and an overwrite in r
// compacted away in r: p's files still hold those keys' old versions.
type mergeFixture struct {
	*splitFixture
	k    []byte // the split key: l is [, k), r is [k, ∞)
	l, r *Region
	// before is a timestamp after the split and before the overwrites:
	// a historical read there sees the old values.
	before   uint64
	beforeAt map[string]string
}

func newMergeFixture(t *testing.T) *mergeFixture {
	t.Helper()
	f := &mergeFixture{splitFixture: newSplitFixture(t, 1200)}
	k, err := f.p.SplitKey()
	if err != nil {
		t.Fatal(err)
	}
	f.k = k
	final, err := f.p.PrepareSplit(bg)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.p.Retire(bg); err != nil {
		t.Fatal(err)
	}
	f.l = mustOpen(t, f.daughterOptions("l", final.Number, nil, k))
	f.r = mustOpen(t, f.daughterOptions("r", final.Number, k, nil))
	t.Cleanup(func() { _ = f.l.Close(); _ = f.r.Close() })
	// Both sides' new files interleave in time.
	put := func(d *Region, key, val string) uint64 {
		ts, err := d.Put([]byte(key), []byte(val))
		if err != nil {
			t.Fatal(err)
		}
		f.acked[key] = val
		return ts
	}
	for round := range 3 {
		for _, d := range []*Region{f.l, f.r} {
			lo, _ := d.Range()
			for i := range 20 {
				put(d, fmt.Sprintf("%s-new%d-%02d", max(string(lo), "user"), round, i), fmt.Sprintf("n%d", round))
			}
			if err := d.Flush(bg); err != nil {
				t.Fatal(err)
			}
		}
	}
	f.beforeAt = map[string]string{}
	for k, v := range f.acked {
		f.beforeAt[k] = v
	}
	f.before = max(f.l.lastTS, f.r.lastTS)
	// In r: deletes and an overwrite of keys p's files hold, then a major
	// compaction, which drops the deleted keys from r's files; p's files
	// keep them. In l: one overwrite, flushed.
	var inR []string
	for key, v := range f.acked {
		if v != "" && !f.l.inRange([]byte(key)) && strings.HasPrefix(key, "user0") {
			inR = append(inR, key)
		}
	}
	if len(inR) < 3 {
		t.Fatalf("only %d keys of p in r", len(inR))
	}
	for _, key := range inR[:2] {
		if _, err := f.r.Delete([]byte(key)); err != nil {
			t.Fatal(err)
		}
		f.acked[key] = ""
	}
	put(f.r, inR[2], "over-r")
	put(f.l, "user000001", "over-l")
	for _, d := range []*Region{f.l, f.r} {
		if err := d.Flush(bg); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := f.r.Compact(bg, true); err != nil {
		t.Fatal(err)
	}
	return f
}

// mergedOptions are the options of the region merging f's l and r at their
// final manifests.
func (f *mergeFixture) mergedOptions(nl, nr uint64) Options {
	o := f.opts
	o.Name = "m"
	o.WALDir = f.dir + "/wal-m"
	o.DeriveFrom = &DeriveFrom{Parents: []manifest.ParentRef{{Name: "l", Manifest: nl}, {Name: "r", Manifest: nr}}}
	return o
}

// checkAt checks that d reads want at ts for every key.
func checkAt(t *testing.T, d *Region, want map[string]string, ts uint64) {
	t.Helper()
	for k, v := range want {
		got, ok, err := d.Get([]byte(k), ts)
		if err != nil {
			t.Fatalf("%s: Get(%q) at %d: %v", d.Name(), k, ts, err)
		}
		if v == "" && ok || v != "" && (!ok || string(got) != v) {
			t.Fatalf("%s: Get(%q) at %d = %q, %v; want %q", d.Name(), k, ts, got, ok, v)
		}
	}
}

// Two adjacent regions merge into one that serves both halves, newest and
// historical, scans across the old boundary, never shows a key one parent
// deleted that an ancestor's file the other shares still holds, and whose
// first compaction is a major one into its own prefix.
func TestMergedRegionServesBothParentsAndCompactsIntoItsOwnPrefix(t *testing.T) {
	f := newMergeFixture(t)
	// l still references p's files, which hold r's keys (among them those
	// r deleted): PrepareMerge compacts them away first.
	if len(f.l.filesOutside([]byte{}, f.k)) == 0 {
		t.Fatal("the fixture's left region has no file past its range: the test would not exercise the compaction before a merge")
	}
	fl, err := f.l.PrepareMerge(bg, nil, f.k)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.l.Put([]byte("user000001"), []byte("late")); !errors.Is(err, ErrSplitting) {
		t.Fatalf("a write after PrepareMerge: %v, want ErrSplitting (retry at the merged region)", err)
	}
	fr, err := f.r.PrepareMerge(bg, f.k, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, fm := range fl.Files {
		if bytes.Compare(fm.Largest, f.k) >= 0 || fm.Home != "" {
			t.Fatalf("the left parent's final manifest names %s [%q, %q] home %q: want only its own files within its range", fm.Key, fm.Smallest, fm.Largest, fm.Home)
		}
	}
	for _, d := range []*Region{f.l, f.r} {
		if err := d.Retire(bg); err != nil {
			t.Fatal(err)
		}
	}
	m := mustOpen(t, f.mergedOptions(fl.Number, fr.Number))
	defer m.Close()
	if lo, hi := m.Range(); len(lo) != 0 || hi != nil {
		t.Fatalf("merged range [%q, %q), want everything", lo, hi)
	}
	mf := m.Manifest()
	if !mf.MergedRuns || len(mf.Files) != len(fl.Files)+len(fr.Files) {
		t.Fatalf("merged manifest: %d files (parents %d + %d), merged runs %v", len(mf.Files), len(fl.Files), len(fr.Files), mf.MergedRuns)
	}
	for i, fm := range mf.Files {
		if want := map[bool]string{true: "l", false: "r"}[i < len(fl.Files)]; fm.Home != want {
			t.Fatalf("file %d of the merged region is %s's, want %s's: the left parent's run, then the right's", i, fm.Home, want)
		}
	}
	// The runs interleave in time: a check of every file in time order
	// would fail; per key span it holds.
	if err := checkTables(m.current.tables, mf.FlushedTS, true, inTime); err == nil {
		t.Fatal("the merged files are in time order across runs: the fixture does not interleave its parents' writes")
	}
	if err := m.checkInvariants(); err != nil {
		t.Fatal(err)
	}
	checkDaughter(t, m, f.acked)
	checkAt(t, m, f.beforeAt, f.before)
	// A scan across the old boundary, both ways.
	rows, err := m.Scan([]byte("user0003"), []byte("user0009"), 0, kv.MaxTimestamp)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) == 0 || bytes.Compare(rows[0].Key, f.k) >= 0 || bytes.Compare(rows[len(rows)-1].Key, f.k) < 0 {
		t.Fatalf("a scan across the old boundary %q returns %d rows from %q: want keys on both sides", f.k, len(rows), rows)
	}
	// The clock starts above both parents'.
	ts, err := m.Put([]byte("user000002"), []byte("after"))
	if err != nil {
		t.Fatal(err)
	}
	f.acked["user000002"] = "after"
	if ts <= max(fl.FlushedTS, fr.FlushedTS) {
		t.Fatalf("merged region committed at %d, not after its parents' %d and %d", ts, fl.FlushedTS, fr.FlushedTS)
	}
	if err := m.Flush(bg); err != nil {
		t.Fatal(err)
	}
	// Its first compaction, asked as a minor one, is a major one over
	// every file, into its own prefix; the parents' files stay.
	parents := len(sstObjects(t, m, "l")) + len(sstObjects(t, m, "r"))
	info, err := m.Compact(bg, false)
	if err != nil {
		t.Fatal(err)
	}
	if info == nil || !info.Major {
		t.Fatalf("the merged region's first compaction: %+v, want a major one", info)
	}
	mf = m.Manifest()
	if mf.MergedRuns || len(mf.Files) != 1 || mf.Files[0].Home != "" {
		t.Fatalf("after the first compaction: %d files %+v, merged runs %v; want one of its own", len(mf.Files), mf.Files, mf.MergedRuns)
	}
	if len(sstObjects(t, m, "m")) != 1 || len(sstObjects(t, m, "l"))+len(sstObjects(t, m, "r")) != parents {
		t.Fatal("the compaction did not write into the merged region's prefix, or deleted a parent's file")
	}
	if err := m.checkInvariants(); err != nil {
		t.Fatal(err)
	}
	checkDaughter(t, m, f.acked)
	checkAt(t, m, f.beforeAt, f.before)
	// Minor compactions again after that.
	for i := range 3 {
		if _, err := m.Put([]byte(fmt.Sprintf("user1%05d", i)), []byte("x")); err != nil {
			t.Fatal(err)
		}
		f.acked[fmt.Sprintf("user1%05d", i)] = "x"
		if err := m.Flush(bg); err != nil {
			t.Fatal(err)
		}
	}
	if info, err := m.Compact(bg, false); err != nil || info == nil || info.Major {
		t.Fatalf("a later compaction: %+v %v, want a minor one", info, err)
	}
	checkDaughter(t, m, f.acked)
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	m = mustOpen(t, f.mergedOptions(fl.Number, fr.Number))
	checkDaughter(t, m, f.acked)
	for _, name := range []string{"l", "r"} {
		o := f.opts
		o.Name, o.WALDir = name, f.dir+"/wal-"+name
		if _, err := Open(bg, o); !errors.Is(err, ErrRetired) {
			t.Fatalf("reopening the retired parent %s: %v, want ErrRetired", name, err)
		}
	}
}

// A merge's commit point is the region map's: a crash before it leaves
// both parents, which reopen with every acknowledged write and take writes
// again; after it the merged region derives the same manifest however
// often it is opened.
func TestMergeCrashesBeforeOrAfterTheMapCommitLoseNothing(t *testing.T) {
	reopen := func(f *mergeFixture, name string) *Region {
		o := f.opts
		o.Name, o.WALDir = name, f.dir+"/wal-"+name
		return mustOpen(t, o)
	}
	t.Run("after one parent stopped: undone", func(t *testing.T) {
		f := newMergeFixture(t)
		if _, err := f.l.PrepareMerge(bg, nil, f.k); err != nil {
			t.Fatal(err)
		}
		_ = f.l.Close() // the crash
		_ = f.r.Close()
		for _, name := range []string{"l", "r"} {
			d := reopen(f, name)
			checkDaughter(t, d, f.acked)
			lo, _ := d.Range()
			if _, err := d.Put([]byte(max(string(lo), "user")+"-after"), []byte("after")); err != nil {
				t.Fatalf("%s after an undone merge refuses writes: %v", name, err)
			}
			_ = d.Close()
		}
	})
	t.Run("after both final flushes: undone", func(t *testing.T) {
		f := newMergeFixture(t)
		for _, c := range []struct {
			d          *Region
			start, end []byte
		}{{f.l, nil, f.k}, {f.r, f.k, nil}} {
			if _, err := c.d.PrepareMerge(bg, c.start, c.end); err != nil {
				t.Fatal(err)
			}
		}
		_ = f.l.Close()
		_ = f.r.Close()
		for _, name := range []string{"l", "r"} {
			d := reopen(f, name)
			checkDaughter(t, d, f.acked)
			_ = d.Close()
		}
	})
	t.Run("after the map commit: finished", func(t *testing.T) {
		f := newMergeFixture(t)
		fl, err := f.l.PrepareMerge(bg, nil, f.k)
		if err != nil {
			t.Fatal(err)
		}
		fr, err := f.r.PrepareMerge(bg, f.k, nil)
		if err != nil {
			t.Fatal(err)
		}
		_ = f.l.Close() // crash before either retired
		_ = f.r.Close()
		m := mustOpen(t, f.mergedOptions(fl.Number, fr.Number))
		first := m.Manifest()
		_ = m.Close() // and again, after deriving
		m = mustOpen(t, f.mergedOptions(fl.Number, fr.Number))
		defer m.Close()
		if got := m.Manifest(); len(got.Files) != len(first.Files) || got.FlushedTS != first.FlushedTS || got.Number != first.Number+1 {
			t.Fatalf("reopened: %d files flushed to %d at %d; first open had %d files flushed to %d at %d",
				len(got.Files), got.FlushedTS, got.Number, len(first.Files), first.FlushedTS, first.Number)
		}
		checkDaughter(t, m, f.acked)
		checkAt(t, m, f.beforeAt, f.before)
	})
}

// Transactions prepared in either parent survive the merge: both parents'
// locks and outcomes are the merged region's, and the commit completes
// there.
func TestMergeKeepsBothParentsLocksAndOutcomes(t *testing.T) {
	f := newMergeFixture(t)
	left, right := "user000010", "user001190"
	if f.r.inRange([]byte(left)) || !f.r.inRange([]byte(right)) {
		t.Fatalf("split key %q does not separate %s and %s", f.k, left, right)
	}
	startTS := max(f.l.lastTS, f.r.lastTS) + 1
	prepL := prewrite(t, f.l, startTS, left, time.Minute, left, "tl")
	prepR := prewrite(t, f.r, startTS, left, time.Minute, right, "tr")
	// A transaction decided at r as its primary's region.
	start2 := startTS + 1
	prep2 := prewrite(t, f.r, start2, right+"x", time.Minute, right+"x", "t2")
	if err := f.r.CommitLocks(bg, start2, prep2+1, keys(right+"x"), true, "req-2"); err != nil {
		t.Fatal(err)
	}
	fl, err := f.l.PrepareMerge(bg, nil, f.k)
	if err != nil {
		t.Fatal(err)
	}
	fr, err := f.r.PrepareMerge(bg, f.k, nil)
	if err != nil {
		t.Fatal(err)
	}
	m := mustOpen(t, f.mergedOptions(fl.Number, fr.Number))
	defer m.Close()
	var locked []string
	for _, l := range m.Locks() {
		locked = append(locked, string(l.Key))
	}
	if fmt.Sprint(locked) != fmt.Sprint([]string{left, right}) {
		t.Fatalf("merged locks on %v, want both parents' (%s, %s)", locked, left, right)
	}
	if outs := m.TxnOutcomes(); len(outs) != 1 || outs[0].StartTS != start2 {
		t.Fatalf("merged outcomes %+v, want r's of the transaction at %d", outs, start2)
	}
	commitTS := max(prepL, prepR, m.lastTS) + 1
	if err := m.CommitLocks(bg, startTS, commitTS, keys(left, right), true, ""); err != nil {
		t.Fatal(err)
	}
	for key, want := range map[string]string{left: "tl", right: "tr", right + "x": "t2"} {
		if got, err := getAt(t, m, key, kv.MaxTimestamp); err != nil || got != want {
			t.Fatalf("%s after the commit: %q %v, want %q", key, got, err, want)
		}
	}
}

// Regions created whole (the initial regions: their manifests record no
// range; the store routed their keys) record their range in the map at
// their final flush, and merge like any.
func TestRegionsCreatedWholeMerge(t *testing.T) {
	dir := t.TempDir()
	base := testOptions(t, dir)
	base.DisableAutoCompaction = true
	open := func(name string) *Region {
		o := base
		o.Name, o.WALDir = name, dir+"/wal-"+name
		return mustOpen(t, o)
	}
	a, b := open("a"), open("b")
	defer a.Close()
	defer b.Close()
	acked := map[string]string{}
	for i := range 200 {
		d, k := a, fmt.Sprintf("g%04d", i)
		if i%2 == 1 {
			d, k = b, fmt.Sprintf("p%04d", i)
		}
		if _, err := d.Put([]byte(k), []byte(k)); err != nil {
			t.Fatal(err)
		}
		acked[k] = k
		if i%50 == 49 {
			if err := d.Flush(bg); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, err := b.PrepareMerge(bg, []byte("p"), []byte("p01")); err == nil || !strings.Contains(err.Error(), "outside the region's range") {
		t.Fatalf("merging a region whose files hold keys outside the range the map gives: %v, want a refusal", err)
	}
	b.Close()
	b = open("b")
	fa, err := a.PrepareMerge(bg, nil, []byte("p"))
	if err != nil {
		t.Fatal(err)
	}
	fb, err := b.PrepareMerge(bg, []byte("p"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if string(fa.End) != "p" || string(fb.Start) != "p" || fb.End != nil {
		t.Fatalf("final manifests' ranges: a [%q, %q), b [%q, %q)", fa.Start, fa.End, fb.Start, fb.End)
	}
	o := base
	o.Name, o.WALDir = "m", dir+"/wal-m"
	o.DeriveFrom = &DeriveFrom{Parents: []manifest.ParentRef{{Name: "a", Manifest: fa.Number}, {Name: "b", Manifest: fb.Number}}}
	m := mustOpen(t, o)
	defer m.Close()
	checkDaughter(t, m, acked)
	if err := m.checkInvariants(); err != nil {
		t.Fatal(err)
	}
}
