package manifest

import (
	"reflect"
	"strings"
	"testing"
)

func parentManifest() Manifest {
	return Manifest{
		Number: 7, Owner: "s0", WALID: "w", FlushedTS: 500, ExactFromTS: 90, NextFileNum: 9, WALMinSegment: 4,
		Files: []FileMeta{
			{Num: 1, Key: "sst/1.sst", Smallest: []byte("a"), Largest: []byte("c"), MinTS: 1, MaxTS: 100},
			{Num: 2, Key: "sst/2.sst", Smallest: []byte("b"), Largest: []byte("q"), MinTS: 101, MaxTS: 200},
			{Num: 3, Key: "sst/3.sst", Smallest: []byte("m"), Largest: []byte("z"), MinTS: 201, MaxTS: 300, Home: "grandparent"},
		},
		Locks: []TxnLock{{Key: []byte("b"), StartTS: 10, Primary: []byte("x")}, {Key: []byte("n"), StartTS: 10, Primary: []byte("x")}},
		TxnOutcomes: []TxnOutcome{
			{StartTS: 10, Primary: []byte("x"), CommitTS: 0},
			{StartTS: 11, Primary: []byte("c"), CommitTS: 40},
		},
	}
}

// A daughter names the parent's files that may hold its keys, by reference
// to where each object lives, and no other; it takes the locks of its keys
// and the outcomes of its primaries; its clock and read horizon start at
// the parent's; it has no owner, WAL or file numbers of its own yet.
func TestDeriveASplitsDaughters(t *testing.T) {
	p := Parent{Name: "p", Manifest: parentManifest()}
	left, err := Derive(p, nil, []byte("m"))
	if err != nil {
		t.Fatal(err)
	}
	right, err := Derive(p, []byte("m"), nil)
	if err != nil {
		t.Fatal(err)
	}
	homes := func(m Manifest) []string {
		var out []string
		for _, f := range m.Files {
			out = append(out, f.Home+"/"+f.Key)
		}
		return out
	}
	if got, want := homes(left), []string{"p/sst/1.sst", "p/sst/2.sst"}; !reflect.DeepEqual(got, want) {
		t.Errorf("left files %v, want %v", got, want)
	}
	if got, want := homes(right), []string{"p/sst/2.sst", "grandparent/sst/3.sst"}; !reflect.DeepEqual(got, want) {
		t.Errorf("right files %v, want %v (a reference keeps its home: one hop)", got, want)
	}
	if len(left.Locks) != 1 || string(left.Locks[0].Key) != "b" || len(right.Locks) != 1 || string(right.Locks[0].Key) != "n" {
		t.Errorf("locks: left %+v right %+v, want each its own key's", left.Locks, right.Locks)
	}
	if len(left.TxnOutcomes) != 1 || string(left.TxnOutcomes[0].Primary) != "c" || len(right.TxnOutcomes) != 1 || string(right.TxnOutcomes[0].Primary) != "x" {
		t.Errorf("outcomes: left %+v right %+v, want each by its primary's range", left.TxnOutcomes, right.TxnOutcomes)
	}
	for _, d := range []Manifest{left, right} {
		if d.FlushedTS != 500 || d.ExactFromTS != 90 || d.Number != 0 || d.Owner != "" || d.WALID != "" || d.WALMinSegment != 0 || d.NextFileNum != 1 {
			t.Errorf("daughter %+v: want flushed 500, exact from 90, unclaimed, a new WAL and file numbers", d)
		}
		if !reflect.DeepEqual(d.Parents, []ParentRef{{Name: "p", Manifest: 7}}) {
			t.Errorf("parents %+v", d.Parents)
		}
	}
	again, _ := Derive(p, nil, []byte("m"))
	if !reflect.DeepEqual(again, left) {
		t.Error("deriving twice gave two manifests: a crash between deriving and committing would change the daughter")
	}
	if !left.InRange([]byte("lzz")) || left.InRange([]byte("m")) || !right.InRange([]byte("m")) || !right.InRange([]byte("\xff\xff")) {
		t.Error("InRange disagrees with [start, end)")
	}
}

func TestDeriveRefusesRangesOutsideTheParent(t *testing.T) {
	pm := parentManifest()
	pm.Start, pm.End = []byte("c"), []byte("p")
	p := Parent{Name: "p", Manifest: pm}
	for _, c := range []struct{ start, end string }{{"a", "d"}, {"d", ""}, {"d", "q"}, {"f", "f"}, {"g", "e"}} {
		var end []byte
		if c.end != "" {
			end = []byte(c.end)
		}
		_, err := Derive(p, []byte(c.start), end)
		if err == nil || !strings.Contains(err.Error(), "not within the parent's") {
			t.Errorf("Derive [%q, %q) of [c, p): %v, want a refusal naming both ranges", c.start, c.end, err)
		}
	}
	if _, err := Derive(Parent{Name: "p", Manifest: Manifest{}}, nil, []byte("m")); err == nil {
		t.Error("deriving from a parent with no manifest was accepted")
	}
}

// mergeParents are two adjacent parents [a, m) and [m, ∞) whose files hold
// only their own keys (one of the left's is a reference to an ancestor).
func mergeParents() (Parent, Parent) {
	l := Manifest{
		Number: 4, FlushedTS: 300, ExactFromTS: 20, NextFileNum: 5, End: []byte("m"), Start: []byte("a"),
		Files: []FileMeta{
			{Num: 1, Key: "sst/1.sst", Smallest: []byte("a"), Largest: []byte("f"), MinTS: 1, MaxTS: 100, Home: "gp"},
			{Num: 4, Key: "sst/4.sst", Smallest: []byte("b"), Largest: []byte("l"), MinTS: 250, MaxTS: 300},
		},
		Locks:       []TxnLock{{Key: []byte("c"), StartTS: 10, Primary: []byte("x")}},
		TxnOutcomes: []TxnOutcome{{StartTS: 11, Primary: []byte("d"), CommitTS: 40}},
	}
	r := Manifest{
		Number: 9, FlushedTS: 280, ExactFromTS: 60, NextFileNum: 3, Start: []byte("m"),
		Files: []FileMeta{
			{Num: 2, Key: "sst/2.sst", Smallest: []byte("m"), Largest: []byte("q"), MinTS: 101, MaxTS: 260},
			{Num: 3, Key: "sst/3.sst", Smallest: []byte("n"), Largest: []byte("z"), MinTS: 261, MaxTS: 400},
		},
		Locks:       []TxnLock{{Key: []byte("x"), StartTS: 10, Primary: []byte("x")}},
		TxnOutcomes: []TxnOutcome{{StartTS: 10, Primary: []byte("x")}},
	}
	return Parent{Name: "l", Manifest: l}, Parent{Name: "r", Manifest: r}
}

// A merge's region lists the left parent's files and then the right's, all
// by reference; takes both parents' locks and outcomes; starts its clock
// above both and its exact reads at the later horizon; names both parents;
// and is marked as holding two runs, which its first compaction unifies.
func TestDeriveFromTwoParentsConcatenatesTheirRuns(t *testing.T) {
	l, r := mergeParents()
	m, err := DeriveFrom([]Parent{l, r}, []byte("a"), nil)
	if err != nil {
		t.Fatal(err)
	}
	var homes []string
	for _, f := range m.Files {
		homes = append(homes, f.Home+"/"+f.Key)
	}
	if want := []string{"gp/sst/1.sst", "l/sst/4.sst", "r/sst/2.sst", "r/sst/3.sst"}; !reflect.DeepEqual(homes, want) {
		t.Errorf("files %v, want %v", homes, want)
	}
	if len(m.Locks) != 2 || string(m.Locks[0].Key) != "c" || string(m.Locks[1].Key) != "x" {
		t.Errorf("locks %+v, want both parents'", m.Locks)
	}
	if len(m.TxnOutcomes) != 2 || string(m.TxnOutcomes[0].Primary) != "d" || string(m.TxnOutcomes[1].Primary) != "x" {
		t.Errorf("outcomes %+v, want both parents'", m.TxnOutcomes)
	}
	if m.FlushedTS != 400 || m.ExactFromTS != 60 || !m.MergedRuns || m.Number != 0 || m.NextFileNum != 1 || m.WALID != "" {
		t.Errorf("merged %+v: want flushed 400 (the right's newest file), exact from 60, merged runs, unclaimed", m)
	}
	if !reflect.DeepEqual(m.Parents, []ParentRef{{"l", 4}, {"r", 9}}) {
		t.Errorf("parents %+v", m.Parents)
	}
	again, _ := DeriveFrom([]Parent{l, r}, []byte("a"), nil)
	if !reflect.DeepEqual(again, m) {
		t.Error("deriving twice gave two manifests")
	}
	// A daughter of the merged region before its first compaction keeps
	// the mark: its files are still two runs.
	m.Number = 1
	d, err := Derive(Parent{Name: "mr", Manifest: m}, []byte("k"), nil)
	if err != nil || !d.MergedRuns || len(d.Files) != 3 {
		t.Errorf("daughter of a merged region: %d files, merged runs %v, %v", len(d.Files), d.MergedRuns, err)
	}
	if s, _ := Derive(Parent{Name: "p", Manifest: parentManifest()}, nil, []byte("m")); s.MergedRuns {
		t.Error("a split's daughter is marked as merged")
	}
}

// A merge is refused when its parents are not adjacent, in key order, or
// when a file of one holds keys of the other's range: those keys may have
// been deleted or rewritten in the other since, and would show again.
func TestDeriveFromRefusesParentsThatDoNotMergeCleanly(t *testing.T) {
	l, r := mergeParents()
	for name, c := range map[string]struct {
		parents []Parent
		start   string
		want    string
	}{
		"right first":   {[]Parent{r, l}, "m", "not adjacent"},
		"none":          {nil, "a", "no parent"},
		"outside":       {[]Parent{l, r}, "0", "not within the parent's"},
		"uncommitted":   {[]Parent{l, {Name: "r", Manifest: Manifest{Start: []byte("m")}}}, "a", "no committed manifest"},
		"a gap between": {[]Parent{l, func() Parent { g := r; g.Manifest.Start = []byte("n"); return g }()}, "a", "not adjacent"},
		"leaking file": {[]Parent{func() Parent {
			x := l
			x.Manifest.Files = append([]FileMeta{{Num: 1, Key: "sst/1.sst", Smallest: []byte("a"), Largest: []byte("p"), Home: "gp"}}, x.Manifest.Files[1:]...)
			return x
		}(), r}, "a", "file sst/1.sst of l holds keys"},
	} {
		_, err := DeriveFrom(c.parents, []byte(c.start), nil)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error saying %q", name, err, c.want)
		}
	}
}
