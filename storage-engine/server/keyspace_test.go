package server

import "testing"

func TestSplitAndRoute(t *testing.T) {
	spans, err := SplitEvenly(4)
	if err != nil || len(spans) != 4 || string(spans[1].Start) != "\x40" || spans[3].End != nil {
		t.Fatalf("SplitEvenly(4) = %v, %v", spans, err)
	}
	spans, err = SplitAt([]string{"g", "p"})
	if err != nil || len(spans) != 3 {
		t.Fatal(spans, err)
	}
	s := &Store{}
	var live []*Assignment
	for _, sp := range spans {
		live = append(live, &Assignment{Span: sp})
	}
	s.snap.Store(newAssigned(live, nil))
	for key, want := range map[string]string{"a": "region-000", "g": "region-001", "oz": "region-001", "p": "region-002", "zzz": "region-002"} {
		if r := s.Route([]byte(key)); r == nil || r.Span.Name != want {
			t.Fatalf("Route(%q) = %v, want %s", key, r, want)
		}
	}
	if _, err := SplitAt([]string{"p", "g"}); err == nil {
		t.Fatal("unsorted split keys accepted")
	}
	if _, err := SplitEvenly(0); err == nil {
		t.Fatal("0 regions accepted")
	}
}

func TestOwner(t *testing.T) {
	all, _ := SplitEvenly(7)
	o, err := ParseOwner("1/3")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range o.Owned(all) {
		names = append(names, s.Name)
	}
	if len(names) != 2 || names[0] != "region-001" || names[1] != "region-004" {
		t.Fatalf("owner 1/3 of 7 regions: %v", names)
	}
	for _, bad := range []string{"3/3", "x/2", "1", "-1/2"} {
		if _, err := ParseOwner(bad); err == nil {
			t.Fatalf("ParseOwner(%q) accepted", bad)
		}
	}
}

// A store that gave a region away and later took back one of its
// daughters (a split elsewhere, then a move here) holds both: the released
// parent and the live daughter, with the same start. Requests go to the
// daughter; the parent answers only for keys no live region holds. (Before,
// the search over both could land on the parent, whose UNAVAILABLE
// "released to another store" the client retried until its deadline.)
func TestALiveRegionIsNotHiddenByAReleasedOneOverlappingIt(t *testing.T) {
	parent := &Assignment{Span: Span{Name: "region-001", Start: []byte{}, End: []byte("m")}}
	parent.released.Store(true)
	daughter := &Assignment{Span: Span{Name: "region-009", Start: []byte{}, End: []byte("g")}}
	for _, order := range [][]*Assignment{{parent}, {parent, parent}} {
		s := &Store{}
		s.snap.Store(newAssigned([]*Assignment{daughter}, order))
		if r := s.Route([]byte("a")); r != daughter {
			t.Fatalf("Route(a) = %s, want the live daughter region-009", r.Name())
		}
		if r := s.Route([]byte("h")); r != parent {
			t.Fatalf("Route(h) = %v, want the released parent, which says the region moved", r)
		}
		if r := s.Route([]byte("n")); r != nil {
			t.Fatalf("Route(n) = %s, want none", r.Name())
		}
	}
}

// A region the balancer placed is served by that ordinal while the cluster
// has it, by its slot's store otherwise.
func TestOwnerFollowsThePlacement(t *testing.T) {
	two := 2
	sp := Span{Name: "region-004", Slot: 0, Owner: &two}
	if !(Owner{2, 3}).Owns(sp) || (Owner{0, 3}).Owns(sp) {
		t.Fatal("a region placed on 2 of 3 stores is not served by store 2 alone")
	}
	if !(Owner{0, 2}).Owns(sp) {
		t.Fatal("a region placed on store 2 of a cluster shrunk to 2 is not back on its slot's store 0")
	}
}
