package sicheck

import (
	"strings"
	"testing"
)

func seed() Txn {
	return Txn{ID: "seed", StartTS: 1, CommitTS: 2, Outcome: Committed, Writes: map[string]string{"x": "x0", "y": "y0"}}
}

// Each kind of violation is found, and named; a valid history has none.
func TestCheck(t *testing.T) {
	for _, c := range []struct {
		name string
		txns []Txn
		want string // "" : no violation
	}{
		{"valid: serial transfers and a snapshot reader", []Txn{seed(),
			{ID: "t1", StartTS: 3, CommitTS: 4, Outcome: Committed, Reads: map[string]string{"x": "x0"}, Writes: map[string]string{"x": "x1"}},
			{ID: "t2", StartTS: 5, CommitTS: 6, Outcome: Committed, Reads: map[string]string{"x": "x1"}, Writes: map[string]string{"x": "x2"}},
			{ID: "r", StartTS: 4, Outcome: ReadOnly, Reads: map[string]string{"x": "x1", "y": "y0"}},
		}, ""},
		{"valid: write skew is allowed under SI", []Txn{seed(),
			{ID: "a", StartTS: 3, CommitTS: 5, Outcome: Committed, Reads: map[string]string{"x": "x0", "y": "y0"}, Writes: map[string]string{"x": "xa"}},
			{ID: "b", StartTS: 4, CommitTS: 6, Outcome: Committed, Reads: map[string]string{"x": "x0", "y": "y0"}, Writes: map[string]string{"y": "yb"}},
		}, ""},
		{"lost update", []Txn{seed(),
			{ID: "a", StartTS: 3, CommitTS: 5, Outcome: Committed, Writes: map[string]string{"x": "xa"}},
			{ID: "b", StartTS: 4, CommitTS: 6, Outcome: Committed, Writes: map[string]string{"x": "xb"}},
		}, "overlap"},
		{"aborted read", []Txn{seed(),
			{ID: "a", StartTS: 3, Outcome: Aborted, Writes: map[string]string{"x": "xa"}},
			{ID: "r", StartTS: 9, Outcome: ReadOnly, Reads: map[string]string{"x": "xa"}},
		}, "aborted"},
		{"future read", []Txn{seed(),
			{ID: "a", StartTS: 3, CommitTS: 8, Outcome: Committed, Writes: map[string]string{"x": "xa"}},
			{ID: "r", StartTS: 5, Outcome: ReadOnly, Reads: map[string]string{"x": "xa"}},
		}, "committed later"},
		{"stale read", []Txn{seed(),
			{ID: "a", StartTS: 3, CommitTS: 4, Outcome: Committed, Writes: map[string]string{"x": "xa"}},
			{ID: "r", StartTS: 5, Outcome: ReadOnly, Reads: map[string]string{"x": "x0"}},
		}, "newer write"},
		{"fractured read across keys", []Txn{seed(),
			{ID: "a", StartTS: 3, CommitTS: 4, Outcome: Committed, Writes: map[string]string{"x": "xa", "y": "ya"}},
			{ID: "r", StartTS: 5, Outcome: ReadOnly, Reads: map[string]string{"x": "xa", "y": "y0"}},
		}, "newer write"},
		{"value from nowhere", []Txn{seed(), {ID: "r", StartTS: 5, Outcome: ReadOnly, Reads: map[string]string{"x": "zz"}}}, "no transaction wrote"},
		{"duplicate value", []Txn{seed(), {ID: "a", StartTS: 3, CommitTS: 4, Outcome: Committed, Writes: map[string]string{"x": "x0"}}}, "unique"},
		{"unknown outcome may be read", []Txn{seed(),
			{ID: "a", StartTS: 3, Outcome: Unknown, Writes: map[string]string{"x": "xa"}},
			{ID: "r", StartTS: 9, Outcome: ReadOnly, Reads: map[string]string{"x": "xa"}},
		}, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			errs := Check(c.txns, 0)
			if c.want == "" {
				if len(errs) != 0 {
					t.Fatalf("violations in a valid history: %v", errs)
				}
				return
			}
			if len(errs) == 0 || !strings.Contains(errs[0].Error(), c.want) {
				t.Fatalf("got %v, want a violation saying %q", errs, c.want)
			}
		})
	}
}
