package server

import (
	"fmt"
	"testing"
)

func TestSplitCutsScansAtRegionBoundaries(t *testing.T) {
	spans, err := SplitAt([]string{"g", "p"}) // region-000 [,g) region-001 [g,p) region-002 [p,)
	if err != nil {
		t.Fatal(err)
	}
	b := func(s string) []byte {
		if s == "<nil>" {
			return nil
		}
		return []byte(s)
	}
	for _, c := range []struct {
		start, end string
		want       string
	}{
		{"", "<nil>", "region-000[,g) region-001[g,p) region-002[p,<nil>)"},
		{"c", "h", "region-000[c,g) region-001[g,h)"},
		{"g", "p", "region-001[g,p)"},
		{"h", "<nil>", "region-001[h,p) region-002[p,<nil>)"},
		{"q", "z", "region-002[q,z)"},
		{"a", "b", "region-000[a,b)"},
	} {
		got := ""
		for i, p := range split(spans, b(c.start), b(c.end)) {
			if i > 0 {
				got += " "
			}
			end := "<nil>"
			if p.end != nil {
				end = string(p.end)
			}
			got += fmt.Sprintf("%s[%s,%s)", p.span.Name, p.start, end)
		}
		if got != c.want {
			t.Errorf("split [%q, %q) = %s, want %s", c.start, c.end, got, c.want)
		}
	}
}

func TestUncoveredFindsKeysOfOtherStoresRegions(t *testing.T) {
	all, err := SplitAt([]string{"g", "p", "t"})
	if err != nil {
		t.Fatal(err)
	}
	// This store serves region-000 [,g) and region-002 [p,t).
	kv := &KV{store: &Store{}}
	var live []*Assignment
	for _, sp := range (Owner{0, 2}).Owned(all) {
		live = append(live, &Assignment{Span: sp})
	}
	kv.store.snap.Store(newAssigned(live, nil))
	for _, c := range []struct {
		start, end string
		gap        string // "" covered
	}{
		{"a", "c", ""},
		{"", "g", ""},
		{"p", "t", ""},
		{"q", "s", ""},
		{"a", "h", "g"},
		{"h", "i", "h"},
		{"q", "", "t"},
		{"t", "", "t"},
	} {
		var end []byte
		if c.end != "" {
			end = []byte(c.end)
		}
		at, gap := kv.uncovered([]byte(c.start), end)
		if got := map[bool]string{true: string(at)}[gap]; got != c.gap || gap != (c.gap != "") {
			t.Errorf("uncovered [%q, %q) = %q, %t; want %q", c.start, c.end, at, gap, c.gap)
		}
	}
}
