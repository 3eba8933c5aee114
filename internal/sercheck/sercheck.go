// Package sercheck finds dependency cycles in a recorded history of
// list-append transactions, as Elle does (Kingsbury and Alvaro, "Elle:
// inferring isolation anomalies from experimental observations"): from the
// values transactions read and wrote, never from the system's timestamps.
//
// # The workload it checks
//
// Every key holds a list of elements; a transaction appends to a key by
// reading it and writing the list it read plus one element, unique in the
// history. A read of a key returns its whole list, so the longest list any
// committed transaction read or wrote of a key orders every append to it:
// the key's version order, which a checker of registers cannot know. A scan
// of a range reads every key of the history's key set in that range, those
// it did not return as the empty list (absent): so an insert into a
// scanned range is a write of the range's predicate, and phantoms show up
// as anti-dependencies like any other.
//
// # What it derives
//
// For committed transactions T1 ≠ T2:
//
//   - ww: T2 appended the element right after T1's in a key's order;
//   - wr: T2 read a list of a key whose last element T1 appended;
//   - rw: T1 read a list of a key, and T2 appended the element that
//     follows it in the key's order (T1 did not see T2's write).
//
// A cycle of ww edges is G0 (dirty write), of ww and wr edges G1c
// (circular information flow), and one with an rw edge G2 (anti-dependency
// cycle: write skew, or with scans, a phantom). Snapshot isolation allows
// G2 and forbids G0 and G1c; serializability forbids all three. It also
// reports what makes the history impossible to order: two lists of a key
// neither of which is a prefix of the other (an append lost, or a dirty
// read), an element no committed transaction appended (G1a: an aborted
// or unknown transaction's write read).
package sercheck

import (
	"fmt"
	"slices"
	"sort"
	"strings"
)

// Txn is one transaction as its client saw it. Reads holds, per key, the
// list it read (a scan's keys included, absent ones as empty lists);
// Appends, per key, the element it appended (after reading the key).
// Committed transactions take part in the graph, and so do those whose
// commit's outcome the client did not learn (Unknown) once a committed
// transaction read one of their elements (nothing aborted is ever read, so
// that proves the commit); an unknown one never read is left out, as if
// it had aborted.
type Txn struct {
	ID        string
	Committed bool
	Unknown   bool
	Reads     map[string][]int
	Appends   map[string]int
}

// Kind is an anomaly's class.
type Kind string

// The anomalies Check reports.
const (
	G0           Kind = "G0"  // a cycle of write dependencies
	G1c          Kind = "G1c" // a cycle of write and read dependencies
	G2           Kind = "G2"  // a cycle with an anti-dependency
	G1a          Kind = "G1a" // an element no committed transaction appended was read
	Incompatible Kind = "incompatible-order"
)

// Anomaly is one finding: its kind and what shows it.
type Anomaly struct {
	Kind  Kind
	Cycle []string // the transactions of a cycle, in order (G0, G1c, G2)
	What  string
}

func (a Anomaly) String() string { return fmt.Sprintf("%s: %s", a.Kind, a.What) }

// Report is what Check found.
type Report struct {
	Anomalies []Anomaly
	// Committed is the number of committed transactions, Edges the
	// dependencies between them (ww, wr, rw).
	Committed int
	Edges     map[string]int
	// ProvenUnknown counts the transactions of unknown outcome that a
	// committed one read from (counted in Committed too).
	ProvenUnknown int
}

// Count is how many anomalies of kind k the report holds.
func (r Report) Count(k Kind) int {
	n := 0
	for _, a := range r.Anomalies {
		if a.Kind == k {
			n++
		}
	}
	return n
}

type edge struct {
	to   int
	kind string // "ww", "wr" or "rw"
}

// Check derives the dependency graph of txns and reports its anomalies.
func Check(txns []Txn) Report {
	rep := Report{Edges: map[string]int{}}
	read := map[int]bool{}
	for _, t := range txns {
		if t.Committed {
			for _, l := range t.Reads {
				for _, e := range l {
					read[e] = true
				}
			}
		}
	}
	var committed []*Txn
	for i := range txns {
		t := &txns[i]
		proven := false
		for _, e := range t.Appends {
			proven = proven || t.Unknown && read[e]
		}
		if t.Committed || proven {
			committed = append(committed, t)
		}
		if proven {
			rep.ProvenUnknown++
		}
	}
	rep.Committed = len(committed)
	writer := map[int]int{} // element → index in committed
	for i, t := range committed {
		for _, e := range t.Appends {
			writer[e] = i
		}
	}
	order := map[string][]int{}
	observe := func(k string, l []int, who string) {
		cur := order[k]
		short, long := l, cur
		if len(l) > len(cur) {
			short, long = cur, l
		}
		if !slices.Equal(short, long[:len(short)]) {
			rep.Anomalies = append(rep.Anomalies, Anomaly{Kind: Incompatible, What: fmt.Sprintf("key %s: %s saw %v, incompatible with %v", k, who, l, cur)})
			return
		}
		order[k] = long
	}
	for _, t := range committed {
		for _, k := range sortedKeys(t.Reads) {
			observe(k, t.Reads[k], t.ID)
		}
		for _, k := range sortedKeys(t.Appends) {
			observe(k, append(slices.Clone(t.Reads[k]), t.Appends[k]), t.ID)
		}
	}
	for _, k := range sortedKeys(order) {
		for _, e := range order[k] {
			if _, ok := writer[e]; !ok {
				rep.Anomalies = append(rep.Anomalies, Anomaly{Kind: G1a, What: fmt.Sprintf("key %s holds element %d, which no committed transaction appended", k, e)})
			}
		}
	}
	pos := map[int]int{} // element → its index in its key's order
	for _, l := range order {
		for i, e := range l {
			pos[e] = i
		}
	}
	graph := make([][]edge, len(committed))
	add := func(from, to int, kind string) {
		if from == to {
			return
		}
		graph[from] = append(graph[from], edge{to: to, kind: kind})
		rep.Edges[kind]++
	}
	for i, t := range committed {
		for k, e := range t.Appends {
			if p := pos[e]; p > 0 {
				if w, ok := writer[order[k][p-1]]; ok {
					add(w, i, "ww")
				}
			}
		}
		for k, l := range t.Reads {
			if len(l) > 0 {
				if w, ok := writer[l[len(l)-1]]; ok {
					add(w, i, "wr")
				}
			}
			if next := order[k]; len(next) > len(l) {
				if w, ok := writer[next[len(l)]]; ok {
					add(i, w, "rw")
				}
			}
		}
	}
	for _, scc := range components(graph) {
		if len(scc) < 2 {
			continue
		}
		rep.Anomalies = append(rep.Anomalies, classify(committed, graph, scc))
	}
	return rep
}

// classify finds a cycle in the strongly connected component scc, with as
// few anti-dependencies as the component allows (none if its ww and wr
// edges alone close one), and names its kind.
func classify(txns []*Txn, graph [][]edge, scc []int) Anomaly {
	in := map[int]bool{}
	for _, v := range scc {
		in[v] = true
	}
	for _, allowed := range []map[string]bool{{"ww": true}, {"ww": true, "wr": true}, {"ww": true, "wr": true, "rw": true}} {
		if cyc, kinds := findCycle(graph, in, allowed); cyc != nil {
			kind := G2
			switch {
			case !allowed["wr"]:
				kind = G0
			case !allowed["rw"]:
				kind = G1c
			}
			ids := make([]string, len(cyc))
			parts := make([]string, len(cyc))
			for i, v := range cyc {
				ids[i] = txns[v].ID
				parts[i] = fmt.Sprintf("%s -%s->", txns[v].ID, kinds[i])
			}
			return Anomaly{Kind: kind, Cycle: ids, What: strings.Join(parts, " ") + " " + ids[0]}
		}
	}
	panic("sercheck: a strongly connected component without a cycle")
}

// findCycle is a cycle within in using only allowed edge kinds (BFS from
// each vertex back to itself, so the cycle is a shortest one), with the
// kind of each edge; nil when there is none.
func findCycle(graph [][]edge, in map[int]bool, allowed map[string]bool) ([]int, []string) {
	starts := make([]int, 0, len(in))
	for v := range in {
		starts = append(starts, v)
	}
	sort.Ints(starts)
	for _, s := range starts {
		type via struct {
			from int
			kind string
		}
		prev := map[int]via{}
		queue := []int{s}
		for len(queue) > 0 {
			v := queue[0]
			queue = queue[1:]
			for _, e := range graph[v] {
				if !in[e.to] || !allowed[e.kind] {
					continue
				}
				if e.to == s {
					// Walk back from v to s.
					cyc, kinds := []int{v}, []string{e.kind}
					for u := v; u != s; {
						p := prev[u]
						cyc, kinds = append(cyc, p.from), append(kinds, p.kind)
						u = p.from
					}
					// Walked backwards, kinds[i] left cyc[i+1] for
					// cyc[i] (kinds[0]: v's edge back to s); reversed,
					// kinds[i] leaves cyc[i].
					slices.Reverse(cyc)
					slices.Reverse(kinds)
					return cyc, kinds
				}
				if _, seen := prev[e.to]; !seen && e.to != s {
					prev[e.to] = via{from: v, kind: e.kind}
					queue = append(queue, e.to)
				}
			}
		}
	}
	return nil, nil
}

// components are the strongly connected components of graph (Tarjan's
// algorithm, iterative).
func components(graph [][]edge) [][]int {
	n := len(graph)
	index, low := make([]int, n), make([]int, n)
	for i := range index {
		index[i] = -1
	}
	onStack := make([]bool, n)
	var stack []int
	var out [][]int
	next := 0
	type frame struct{ v, i int }
	for root := range n {
		if index[root] >= 0 {
			continue
		}
		calls := []frame{{root, 0}}
		index[root], low[root] = next, next
		next++
		stack = append(stack, root)
		onStack[root] = true
		for len(calls) > 0 {
			f := &calls[len(calls)-1]
			if f.i < len(graph[f.v]) {
				w := graph[f.v][f.i].to
				f.i++
				switch {
				case index[w] < 0:
					index[w], low[w] = next, next
					next++
					stack = append(stack, w)
					onStack[w] = true
					calls = append(calls, frame{w, 0})
				case onStack[w]:
					low[f.v] = min(low[f.v], index[w])
				}
				continue
			}
			v := f.v
			calls = calls[:len(calls)-1]
			if len(calls) > 0 {
				u := calls[len(calls)-1].v
				low[u] = min(low[u], low[v])
			}
			if low[v] == index[v] {
				var scc []int
				for {
					w := stack[len(stack)-1]
					stack = stack[:len(stack)-1]
					onStack[w] = false
					scc = append(scc, w)
					if w == v {
						break
					}
				}
				out = append(out, scc)
			}
		}
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
