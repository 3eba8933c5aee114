package sicheck

import (
	"strings"
	"testing"
	"time"
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

// ms is a client instant, in milliseconds after the history's origin.
func ms(n int) time.Duration { return time.Duration(n) * time.Millisecond }

// timed is a seed committed and acknowledged at client 1–2 ms.
func timedSeed() Txn {
	s := seed()
	s.Invoke, s.Complete = ms(1), ms(2)
	return s
}

// The real-time checks: each history below is consistent with the
// timestamps the system gave it (the timestamp checks find nothing, which
// each case also asserts), and only the clients' real-time order shows
// what is wrong, or that nothing is.
func TestCheckRealTime(t *testing.T) {
	for _, c := range []struct {
		name string
		txns []Txn
		want string // "" : no violation
		// untimedToo: the history without its client instants has
		// violations too (the check needs no clock, or another check
		// implies it).
		untimedToo bool
	}{
		{"skewed store: a snapshot behind a commit that finished before it began", []Txn{timedSeed(),
			// t1 commits at 100 on a store whose clock is right; t2 begins
			// afterwards on one whose clock is 10 behind, at 90, and
			// reads x as it was before t1, consistently with 90.
			{ID: "t1", StartTS: 95, CommitTS: 100, Outcome: Committed, Invoke: ms(10), Complete: ms(20),
				Reads: map[string]string{"x": "x0"}, Writes: map[string]string{"x": "x1"}},
			{ID: "t2", StartTS: 90, Outcome: ReadOnly, Invoke: ms(30), Complete: ms(40), Reads: map[string]string{"x": "x0"}},
		}, "stale snapshot: t2 (start 90) began at client 30ms and read \"x\" as \"x0\" from seed, but t1's newer write \"x1\" (commit 100) was committed by client 20ms", false},
		{"skewed store: a writer's snapshot behind", []Txn{timedSeed(),
			{ID: "t1", StartTS: 95, CommitTS: 100, Outcome: Committed, Invoke: ms(10), Complete: ms(20),
				Reads: map[string]string{"x": "x0"}, Writes: map[string]string{"x": "x1"}},
			{ID: "t2", StartTS: 90, CommitTS: 91, Outcome: Committed, Invoke: ms(30), Complete: ms(40),
				Reads: map[string]string{"x": "x0"}, Writes: map[string]string{"y": "y2"}},
		}, "stale snapshot: t2", false},
		{"skewed store: a scan's snapshot behind", []Txn{timedSeed(),
			{ID: "t1", StartTS: 95, CommitTS: 100, Outcome: Committed, Invoke: ms(10), Complete: ms(20), Writes: map[string]string{"y": "y1"}},
			{ID: "r", StartTS: 90, Outcome: ReadOnly, Invoke: ms(30), Complete: ms(40),
				Scans: []Scan{{Rows: map[string]string{"x": "x0", "y": "y0"}}}},
		}, "stale snapshot: r", false},
		{"fine: a snapshot that misses a transaction still committing when it began", []Txn{timedSeed(),
			{ID: "t1", StartTS: 95, CommitTS: 100, Outcome: Committed, Invoke: ms(10), Complete: ms(20),
				Reads: map[string]string{"x": "x0"}, Writes: map[string]string{"x": "x1"}},
			{ID: "t2", StartTS: 90, Outcome: ReadOnly, Invoke: ms(15), Complete: ms(40), Reads: map[string]string{"x": "x0"}},
		}, "", false},
		{"fine: a snapshot that sees what finished before it and reads its keys", []Txn{timedSeed(),
			{ID: "t1", StartTS: 3, CommitTS: 4, Outcome: Committed, Invoke: ms(10), Complete: ms(20),
				Reads: map[string]string{"x": "x0"}, Writes: map[string]string{"x": "x1"}},
			{ID: "t2", StartTS: 5, CommitTS: 6, Outcome: Committed, Invoke: ms(30), Complete: ms(40),
				Reads: map[string]string{"x": "x1", "y": "y0"}, Writes: map[string]string{"x": "x2"}},
			{ID: "r", StartTS: 7, Outcome: ReadOnly, Invoke: ms(50), Complete: ms(60),
				Scans: []Scan{{Start: "x", End: "y", Rows: map[string]string{"x": "x2"}}}},
		}, "", false},
		{"an indeterminate commit a read proved, missed by a later snapshot", []Txn{timedSeed(),
			// u's commit answer was lost; r read its write, so it committed
			// before r finished (20 ms); t2 began after that and missed it.
			{ID: "u", StartTS: 3, Outcome: Unknown, Invoke: ms(10), Complete: ms(12),
				Reads: map[string]string{"x": "x0"}, Writes: map[string]string{"x": "xu"}},
			{ID: "r", StartTS: 6, Outcome: ReadOnly, Invoke: ms(13), Complete: ms(20), Reads: map[string]string{"x": "xu"}},
			{ID: "t2", StartTS: 8, Outcome: ReadOnly, Invoke: ms(25), Complete: ms(30), Reads: map[string]string{"x": "x0"}},
		}, "but u's newer write \"xu\" (commit 0) was committed by client 20ms (r, which read it, had finished)", false},
		{"a chain of indeterminate writes, an older one read after a newer was seen", []Txn{timedSeed(),
			{ID: "u1", StartTS: 3, Outcome: Unknown, Invoke: ms(10), Complete: ms(12),
				Reads: map[string]string{"x": "x0"}, Writes: map[string]string{"x": "xu1"}},
			{ID: "u2", StartTS: 5, Outcome: Unknown, Invoke: ms(13), Complete: ms(15),
				Reads: map[string]string{"x": "xu1"}, Writes: map[string]string{"x": "xu2"}},
			{ID: "r", StartTS: 6, Outcome: ReadOnly, Invoke: ms(16), Complete: ms(20), Reads: map[string]string{"x": "xu2"}},
			{ID: "t2", StartTS: 8, Outcome: ReadOnly, Invoke: ms(25), Complete: ms(30), Reads: map[string]string{"x": "xu1"}},
		}, "stale snapshot: t2", false},
		{"fine: an indeterminate commit nobody saw may be missed", []Txn{timedSeed(),
			{ID: "u", StartTS: 3, Outcome: Unknown, Invoke: ms(10), Complete: ms(12),
				Reads: map[string]string{"x": "x0"}, Writes: map[string]string{"x": "xu"}},
			{ID: "t2", StartTS: 8, Outcome: ReadOnly, Invoke: ms(25), Complete: ms(30), Reads: map[string]string{"x": "x0"}},
		}, "", false},
		{"a read from a transaction that began after the reader finished", []Txn{timedSeed(),
			{ID: "t1", StartTS: 5, CommitTS: 6, Outcome: Committed, Invoke: ms(50), Complete: ms(60), Writes: map[string]string{"x": "x1"}},
			{ID: "r", StartTS: 7, Outcome: ReadOnly, Invoke: ms(10), Complete: ms(20), Reads: map[string]string{"x": "x1"}},
		}, "r read \"x\" = \"x1\", written by t1, which began (client 50ms) after r had finished (client 20ms)", false},
		{"a later writer of a key committed at an earlier timestamp", []Txn{timedSeed(),
			// By the timestamps t2 (90–95) came first and t1 (96–100)
			// after it, without overlap; in real time t1 finished first.
			{ID: "t1", StartTS: 96, CommitTS: 100, Outcome: Committed, Invoke: ms(10), Complete: ms(20), Writes: map[string]string{"y": "y1"}},
			{ID: "t2", StartTS: 90, CommitTS: 95, Outcome: Committed, Invoke: ms(30), Complete: ms(40), Writes: map[string]string{"y": "y2"}},
		}, "commit order against real time: t2 began at client 30ms, after t1 had committed (client 20ms), and both wrote \"y\", yet committed at 95, before t1's 100", false},
		{"a reader of a write committed before it", []Txn{timedSeed(),
			{ID: "t1", StartTS: 96, CommitTS: 100, Outcome: Committed, Invoke: ms(10), Complete: ms(20), Writes: map[string]string{"y": "y1"}},
			{ID: "t2", StartTS: 101, CommitTS: 99, Outcome: Committed, Invoke: ms(30), Complete: ms(40),
				Reads: map[string]string{"y": "y1"}, Writes: map[string]string{"x": "x2"}},
		}, "read its write of \"y\", yet committed at 99", true},
		{"fine: writers of one key, in real-time and timestamp order", []Txn{timedSeed(),
			{ID: "t1", StartTS: 96, CommitTS: 100, Outcome: Committed, Invoke: ms(10), Complete: ms(20), Writes: map[string]string{"y": "y1"}},
			{ID: "t2", StartTS: 101, CommitTS: 105, Outcome: Committed, Invoke: ms(30), Complete: ms(40), Writes: map[string]string{"y": "y2"}},
			{ID: "t3", StartTS: 102, CommitTS: 103, Outcome: Committed, Invoke: ms(35), Complete: ms(45),
				Reads: map[string]string{"y": "y1"}, Writes: map[string]string{"x": "x3"}},
		}, "", false},
		{"a lost update through an indeterminate commit a read proved", []Txn{timedSeed(),
			{ID: "a", StartTS: 3, CommitTS: 5, Outcome: Committed, Invoke: ms(10), Complete: ms(20),
				Reads: map[string]string{"x": "x0"}, Writes: map[string]string{"x": "xa"}},
			{ID: "u", StartTS: 4, Outcome: Unknown, Invoke: ms(11), Complete: ms(21),
				Reads: map[string]string{"x": "x0"}, Writes: map[string]string{"x": "xu"}},
			{ID: "r", StartTS: 9, Outcome: ReadOnly, Reads: map[string]string{"x": "xu"}},
		}, "lost update: a (committed), u (has an unknown outcome) all read \"x\" = \"x0\"", true},
		{"fine: an indeterminate rival nobody saw may have aborted", []Txn{timedSeed(),
			{ID: "a", StartTS: 3, CommitTS: 5, Outcome: Committed, Invoke: ms(10), Complete: ms(20),
				Reads: map[string]string{"x": "x0"}, Writes: map[string]string{"x": "xa"}},
			{ID: "u", StartTS: 4, Outcome: Unknown, Invoke: ms(11), Complete: ms(21),
				Reads: map[string]string{"x": "x0"}, Writes: map[string]string{"x": "xu"}},
			{ID: "r", StartTS: 9, Outcome: ReadOnly, Invoke: ms(30), Complete: ms(40), Reads: map[string]string{"x": "xa"}},
		}, "", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			untimed := make([]Txn, len(c.txns))
			for i, x := range c.txns {
				x.Invoke, x.Complete = 0, 0
				untimed[i] = x
			}
			if !c.untimedToo {
				if errs := Check(untimed, 0); len(errs) != 0 {
					t.Fatalf("the timestamps alone show violations; the case is meant for the real-time checks: %v", errs)
				}
			}
			rep := Analyze(c.txns, 0)
			errs := rep.Violations
			if c.want == "" {
				if len(errs) != 0 {
					t.Fatalf("violations in a valid history: %v", errs)
				}
				if rep.RealTimeReads == 0 {
					t.Fatal("no read was judged against real time: the case checks nothing")
				}
				return
			}
			for _, err := range errs {
				if strings.Contains(err.Error(), c.want) {
					return
				}
			}
			t.Fatalf("got %v, want a violation saying %q", errs, c.want)
		})
	}
}

// The timestamp checks also see scans: a key of the range that a scan
// did not return, it read as absent.
func TestCheckScans(t *testing.T) {
	base := []Txn{seed(), {ID: "t1", StartTS: 3, CommitTS: 4, Outcome: Committed, Writes: map[string]string{"x": "x1"}}}
	for _, c := range []struct {
		name string
		scan Scan
		want string
	}{
		{"the whole key space", Scan{Rows: map[string]string{"x": "x1", "y": "y0"}}, ""},
		{"a range that leaves out y", Scan{Start: "a", End: "y", Rows: map[string]string{"x": "x1"}}, ""},
		{"a key missing", Scan{Rows: map[string]string{"x": "x1"}}, `r (start 5) read "y" as absent, but seed wrote it at 2`},
		{"a stale row", Scan{Start: "x", Rows: map[string]string{"x": "x0", "y": "y0"}}, "newer write"},
	} {
		t.Run(c.name, func(t *testing.T) {
			errs := Check(append(base, Txn{ID: "r", StartTS: 5, Outcome: ReadOnly, Scans: []Scan{c.scan}}), 0)
			if c.want == "" && len(errs) == 0 {
				return
			}
			if c.want == "" || len(errs) == 0 || !strings.Contains(errs[0].Error(), c.want) {
				t.Fatalf("got %v, want %q", errs, c.want)
			}
		})
	}
}

// Every outcome is counted, the indeterminate ones too, with how many of
// them a read proved committed.
func TestAnalyzeCountsOutcomes(t *testing.T) {
	rep := Analyze([]Txn{seed(),
		{ID: "seen", StartTS: 3, Outcome: Unknown, Reads: map[string]string{"x": "x0"}, Writes: map[string]string{"x": "xs"}},
		{ID: "unseen", StartTS: 3, Outcome: Unknown, Writes: map[string]string{"y": "yu"}},
		{ID: "aborted", StartTS: 4, Outcome: Aborted, Writes: map[string]string{"y": "ya"}},
		{ID: "r", StartTS: 9, Outcome: ReadOnly, Reads: map[string]string{"x": "xs", "y": "y0"}},
	}, 0)
	if len(rep.Violations) != 0 {
		t.Fatal(rep.Violations)
	}
	if rep.Committed != 1 || rep.Aborted != 1 || rep.ReadOnly != 1 || rep.Indeterminate != 2 || rep.IndeterminateSeen != 1 {
		t.Fatalf("report %+v; want 1 committed, 1 aborted, 1 read-only, 2 indeterminate of which 1 seen", rep)
	}
	if rep.RealTimeReads != 0 {
		t.Fatalf("%d reads judged against real time in a history without instants", rep.RealTimeReads)
	}
	if got, want := rep.String(), "2 indeterminate (1 proven committed by a read, 1 unseen)"; !strings.Contains(got, want) {
		t.Fatalf("%q does not say %q", got, want)
	}
}

// A committed transaction's timestamp follows its start.
func TestCheckCommitAfterStart(t *testing.T) {
	errs := Check([]Txn{seed(), {ID: "t", StartTS: 5, CommitTS: 5, Outcome: Committed, Writes: map[string]string{"x": "x1"}}}, 0)
	if len(errs) == 0 || !strings.Contains(errs[0].Error(), "t committed at 5, not after its start 5") {
		t.Fatalf("got %v", errs)
	}
}
