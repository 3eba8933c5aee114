package compaction

import "testing"

func TestSelectMinor(t *testing.T) {
	p := Policy{MinFiles: 3, MaxFiles: 5, Ratio: 1.2, MaxBytes: 1000}
	cases := []struct {
		name       string
		sizes      []int64
		start, end int
		ok         bool
	}{
		{"too few files", []int64{10, 10}, 0, 0, false},
		{"three equal files", []int64{10, 10, 10}, 0, 3, true},
		{"a big old file is left out of ratio", []int64{500, 10, 10, 10}, 1, 4, true},
		{"more files wins", []int64{10, 10, 10, 10, 10, 10}, 0, 5, true},
		{"same count: fewer bytes wins", []int64{40, 40, 40, 2000, 10, 10, 10}, 4, 7, true},
		{"files over the size cap are never picked", []int64{2000, 10, 2000, 10, 10}, 0, 0, false},
		{"window total over the cap", []int64{400, 400, 400}, 0, 0, false},
		{"nothing in ratio", []int64{1, 10, 100, 1000}, 0, 0, false},
	}
	for _, c := range cases {
		s, e, ok := SelectMinor(c.sizes, p)
		if ok != c.ok || (ok && (s != c.start || e != c.end)) {
			t.Errorf("%s: SelectMinor(%v) = [%d,%d) %v; want [%d,%d) %v", c.name, c.sizes, s, e, ok, c.start, c.end, c.ok)
		}
	}
}

func TestPolicyValidate(t *testing.T) {
	if err := DefaultPolicy().Validate(); err != nil {
		t.Fatal(err)
	}
	bad := []Policy{
		{MinFiles: 1, MaxFiles: 5, Ratio: 1, MaxBytes: 1},
		{MinFiles: 3, MaxFiles: 2, Ratio: 1, MaxBytes: 1},
		{MinFiles: 3, MaxFiles: 5, Ratio: 0, MaxBytes: 1},
		{MinFiles: 3, MaxFiles: 5, Ratio: 1, MaxBytes: 0},
	}
	for _, p := range bad {
		if p.Validate() == nil {
			t.Errorf("%+v accepted", p)
		}
	}
}
