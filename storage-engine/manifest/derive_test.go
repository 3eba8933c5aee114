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
