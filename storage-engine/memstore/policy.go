package memstore

import "fmt"

// Policy is the in-memory compaction policy of Accordion (VLDB 2018, §3.2)
// as HBase ships it (MemoryCompactionPolicy).
type Policy string

// The policies.
const (
	// None: one skiplist, flushed to disk whole (HBase's DefaultMemStore).
	None Policy = "None"
	// Basic flattens every segment pushed into the pipeline and merges the
	// pipeline's indexes into one when it holds more than S segments;
	// it never drops a version.
	Basic Policy = "Basic"
	// Eager compacts the pipeline into one segment at every in-memory
	// flush, dropping the versions retention does not need.
	Eager Policy = "Eager"
	// Adaptive compacts when the measured share of redundant keys exceeds
	// R, with a probability t that grows with the memstore, and otherwise
	// acts as Basic.
	Adaptive Policy = "Adaptive"
)

// Action is what an in-memory flush does to the pipeline after flattening
// the segment it pushed.
type Action int

// The actions, as HBase's MemStoreCompactionStrategy.Action.
const (
	// Flatten: nothing more (the pipeline has room).
	Flatten Action = iota
	// Merge every pipeline segment's index into one; drop nothing.
	Merge
	// Compact every pipeline segment into one, dropping versions.
	Compact
)

func (a Action) String() string {
	switch a {
	case Flatten:
		return "flatten"
	case Merge:
		return "merge"
	case Compact:
		return "compact"
	}
	return fmt.Sprintf("Action(%d)", int(a))
}

// adaptiveState is Adaptive's memory between in-memory flushes of one
// memstore; a disk flush starts a new memstore, and so resets it (the
// paper's reset of t on disk flush).
type adaptiveState struct {
	// t is the probability of compacting when redundancy is high: the
	// paper's throttle, starting at 0.5 and growing 2% per in-memory flush;
	// HBase's compactionProbability, also moved ±2% by whether the last
	// compaction was worth it.
	t float64
	// u is the share of unique keys measured by the newest merge or
	// compaction; uKnown is false until there was one.
	u      float64
	uKnown bool
}

const (
	adaptiveInitialT = 0.5
	adaptiveStep     = 0.02
)

func newAdaptiveState() adaptiveState { return adaptiveState{t: adaptiveInitialT} }

// decide is the policy decision after an in-memory flush has pushed and
// flattened a segment: segments is the pipeline's length now, s the bound
// S, r the redundancy threshold R, and draw a uniform number in [0, 1)
// (Adaptive's coin). dropsNothing says retention could drop no version of
// the pipeline (its horizon is below every version there: a retention
// that keeps every version, or a GC window longer than the pipeline's
// age): then a compaction would only copy the data, so Eager and Adaptive
// act as Basic. It advances Adaptive's t. Pure apart from st; the
// datadriven tests in testdata/policy drive it.
func decide(p Policy, segments, s int, r float64, st *adaptiveState, draw float64, dropsNothing bool) Action {
	if dropsNothing && (p == Eager || p == Adaptive) {
		p = Basic
	}
	switch p {
	case Eager:
		return Compact
	case Adaptive:
		st.t = min(1, st.t*(1+adaptiveStep))
		if st.uKnown && 1-st.u > r && draw < st.t {
			return Compact
		}
	case None:
		return Flatten
	}
	if segments > s {
		return Merge
	}
	return Flatten
}

// learn records the outcome of a merge or compaction that turned in
// versions of uniques distinct keys into out: it sets u to the share of
// unique keys among the input versions (a compaction keeps every key, so
// its input is what measures the workload) and, for
// a compaction, moves t up if the compaction dropped more than R of its
// input and down otherwise (HBase's AdaptiveMemStoreCompactionStrategy).
func (st *adaptiveState) learn(a Action, in, out, uniques int, r float64) {
	if in > 0 {
		st.u, st.uKnown = float64(uniques)/float64(in), true
	}
	if a != Compact || in == 0 {
		return
	}
	if float64(in-out)/float64(in) > r {
		st.t = min(1, st.t*(1+adaptiveStep))
	} else {
		st.t *= 1 - adaptiveStep
	}
}
