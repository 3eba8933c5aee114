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
