package sercheck

import (
	"strings"
	"testing"
)

func committed(id string, reads map[string][]int, appends map[string]int) Txn {
	return Txn{ID: id, Committed: true, Reads: reads, Appends: appends}
}

// Write skew (each reads x and y from one snapshot and appends to one of
// them) is a G2 cycle of two anti-dependencies; its serial version is no
// cycle.
func TestWriteSkewIsG2AndItsSerialVersionIsNot(t *testing.T) {
	skew := []Txn{
		committed("T1", map[string][]int{"x": nil, "y": nil}, map[string]int{"x": 1}),
		committed("T2", map[string][]int{"x": nil, "y": nil}, map[string]int{"y": 2}),
	}
	r := Check(skew)
	if r.Count(G2) != 1 || len(r.Anomalies) != 1 || r.Edges["rw"] != 2 {
		t.Fatalf("write skew: %v, edges %v; want one G2 of two rw edges", r.Anomalies, r.Edges)
	}
	if w := r.Anomalies[0].What; w != "T1 -rw-> T2 -rw-> T1" {
		t.Fatalf("the cycle reads %q", w)
	}
	serial := []Txn{
		committed("T1", map[string][]int{"x": nil, "y": nil}, map[string]int{"x": 1}),
		committed("T2", map[string][]int{"x": {1}, "y": nil}, map[string]int{"y": 2}),
	}
	if r := Check(serial); len(r.Anomalies) != 0 || r.Edges["wr"] != 1 {
		t.Fatalf("the serial history: %v, edges %v; want none, one wr", r.Anomalies, r.Edges)
	}
}

// A phantom: two transactions scan a range (every key of it read, absent
// ones as empty) and each inserts a key into it; neither saw the other's.
func TestAPhantomIsG2(t *testing.T) {
	r := Check([]Txn{
		committed("T1", map[string][]int{"p1": nil, "p2": nil}, map[string]int{"p1": 1}),
		committed("T2", map[string][]int{"p1": nil, "p2": nil}, map[string]int{"p2": 2}),
		{ID: "aborted", Reads: map[string][]int{"p1": nil}, Appends: map[string]int{"p1": 9}},
	})
	if r.Count(G2) != 1 || r.Committed != 2 {
		t.Fatalf("phantom: %v; want one G2 of the two committed", r.Anomalies)
	}
}

// Dependency cycles without anti-dependencies are G1c (with a read) and
// G0 (writes only); a lost append and a read of an aborted write make the
// history impossible to order.
func TestG0G1cAndUnorderableHistories(t *testing.T) {
	g1c := Check([]Txn{
		committed("T1", map[string][]int{"x": nil, "y": {2}}, map[string]int{"x": 1}),
		committed("T2", map[string][]int{"x": {1}, "y": nil}, map[string]int{"y": 2}),
	})
	if g1c.Count(G1c) != 1 || len(g1c.Anomalies) != 1 {
		t.Fatalf("circular information flow: %v; want one G1c", g1c.Anomalies)
	}
	// Each appended to x after the other and to y before it.
	g0 := Check([]Txn{
		committed("T1", map[string][]int{"x": nil, "y": {2}}, map[string]int{"x": 1, "y": 3}),
		committed("T2", map[string][]int{"x": {1}, "y": nil}, map[string]int{"x": 4, "y": 2}),
	})
	if g0.Count(G0) != 1 {
		t.Fatalf("dirty writes: %v; want a G0", g0.Anomalies)
	}
	lost := Check([]Txn{
		committed("T1", map[string][]int{"x": nil}, map[string]int{"x": 1}),
		committed("T2", map[string][]int{"x": nil}, map[string]int{"x": 2}),
	})
	if lost.Count(Incompatible) != 1 || !strings.Contains(lost.Anomalies[0].What, "key x") {
		t.Fatalf("a lost append: %v; want an incompatible order of x", lost.Anomalies)
	}
	dirty := Check([]Txn{
		{ID: "aborted", Reads: map[string][]int{"x": nil}, Appends: map[string]int{"x": 7}},
		committed("T2", map[string][]int{"x": {7}}, nil),
	})
	if dirty.Count(G1a) != 1 {
		t.Fatalf("a read of an aborted write: %v; want G1a", dirty.Anomalies)
	}
}

// A transaction whose outcome is unknown counts as committed once another
// read its element, and is left out while none did.
func TestAnUnknownCommitCountsOnceRead(t *testing.T) {
	r := Check([]Txn{
		{ID: "unknown", Unknown: true, Reads: map[string][]int{"x": nil}, Appends: map[string]int{"x": 1}},
		{ID: "unread", Unknown: true, Reads: map[string][]int{"y": nil}, Appends: map[string]int{"y": 5}},
		committed("T2", map[string][]int{"x": {1}}, map[string]int{"x": 2}),
	})
	if len(r.Anomalies) != 0 || r.Committed != 2 || r.ProvenUnknown != 1 || r.Edges["ww"] != 1 {
		t.Fatalf("%v, %d committed (%d proven), edges %v; want the read one proven, no anomaly", r.Anomalies, r.Committed, r.ProvenUnknown, r.Edges)
	}
}
