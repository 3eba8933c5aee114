// Package sicheck checks a recorded history of transactions for snapshot
// isolation, in the spirit of Elle's rw-register checks: every value is
// written once, so each read names the transaction it read from. It checks
// the history twice: against the timestamps the system gave it, and
// against the order in which the client saw things happen, which no clock
// of the system can bend.
//
// # The history
//
// Each Txn is one transaction as its client saw it: its start and commit
// timestamps, what it read (Get by key, Scan by range: a scan also reads
// every key of its range that it did not return as absent), what it wrote,
// what it learned of its commit (Outcome), and two instants of the client's
// monotonic clock: Invoke, just before it asked for the start (BeginTxn),
// and Complete, once its last request had returned (the commit's answer,
// or its last read). All instants of a history are offsets from
// one origin on one clock, the recording process's.
//
// A transaction whose commit's outcome the client did not learn (it got an
// error after sending the commit: Unknown, indeterminate) may or may not
// have committed. Such a transaction counts (Report.Indeterminate) and is
// treated as either: its writes may be read, and a read of one proves it
// committed (values are unique, and nothing of an aborted transaction is
// ever visible), before that read returned. From then on it takes part in
// the checks that need no commit timestamp.
//
// # What the timestamps must satisfy
//
//   - every value is written once (else the history cannot be checked);
//   - a read returns a value some transaction wrote, and not one that an
//     aborted transaction wrote;
//   - a read at start timestamp s returns the newest write of its key that
//     committed (acknowledged, with its timestamp) at or before s: not a
//     later one (a future read), nor an older one (a stale read);
//   - a committed transaction's commit timestamp is after its start;
//   - no two committed transactions that write one key overlap, start to
//     commit (first committer wins: no lost update).
//
// These take the system's timestamps as its claims and check that the
// reads agree with them. A store whose clock is behind gives a consistent
// set of wrong claims: a transaction that starts after another finished
// gets a start timestamp below that one's commit and reads, consistently
// with the timestamps, the value before it. Hence the checks below.
//
// # What real time must satisfy
//
// Strict serializability orders transactions by real time; its part that
// snapshot isolation keeps is: a transaction sees every transaction that
// committed before it started. A transaction T is known to have committed
// by the client instant vis(T): the Complete of its acknowledged commit,
// or the Complete of a transaction that read one of its writes, whichever
// is earliest. T1 finished before T2 began when vis(T1) < Invoke(T2).
// Then, whatever the timestamps say:
//
//   - no read from the future: a transaction does not read a write of a
//     transaction that began (Invoke) after it had finished (Complete);
//   - no stale snapshot: if T1 finished before T2 began, and T2 read a key
//     that T1 wrote, T2 read T1's write or a newer version of the key;
//   - no commit order against real time: if T1 finished before T2 began,
//     both committed, and T2 wrote a key T1 wrote or read a write of T1,
//     then T2's commit timestamp is after T1's;
//   - no lost update, by values: no two transactions that both committed
//     (acknowledged, or proven by a read) read one version of a key and
//     both wrote that key. (Of two that read the same version and wrote
//     over it, first committer wins lets one commit.)
//
// "Newer version" is the version order of the key: the order of the commit
// timestamps of its committed writes, which is also the order in which
// the key's region applied them, and reads at any snapshot follow it. An
// indeterminate transaction's write has no timestamp; when it read the key
// before writing it, its version comes right after the version it read
// (first committer wins), else its place is unknown and the stale-snapshot
// check does not judge it. The read of an absent key reads the version
// before every write. Only these real-time conclusions are drawn, and only
// from instants that bound the truth (Invoke before the start was asked
// for, Complete after the answer came): a real-time violation is one.
//
// Values must not be "" (a read of "" means absent), and a history from
// clients in several processes needs one clock for all of them.
package sicheck

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"
)

// Outcome is what the client learned of a transaction's commit.
type Outcome int

const (
	// ReadOnly: no writes, nothing to commit (or reads only, cut short).
	ReadOnly Outcome = iota
	Committed
	// Aborted: refused, nothing written (a conflict, a lost transaction).
	Aborted
	// Unknown: the commit failed without saying whether it took effect.
	Unknown
)

func (o Outcome) String() string {
	switch o {
	case ReadOnly:
		return "committed nothing (read-only)"
	case Committed:
		return "committed"
	case Aborted:
		return "aborted"
	case Unknown:
		return "has an unknown outcome"
	}
	return fmt.Sprintf("Outcome(%d)", int(o))
}

// Txn is one recorded transaction. A read of an absent key has value "".
type Txn struct {
	ID       string
	StartTS  uint64
	CommitTS uint64 // Committed only
	Outcome  Outcome
	Reads    map[string]string
	// Scans are range reads at the start timestamp.
	Scans  []Scan
	Writes map[string]string
	// Invoke and Complete are instants of the client's monotonic clock
	// (offsets from the history's origin): Invoke before the client asked
	// for the start timestamp, Complete after its last request returned
	// (the commit's answer, or its last read). Zero: not recorded, and the
	// real-time checks skip what they cannot know.
	Invoke, Complete time.Duration
}

// Scan is one range read: Rows are every live key of [Start, End) (End
// "": no upper bound) at the start timestamp. A scan cut short by a limit
// is recorded with End just past its last row.
type Scan struct {
	Start, End string
	Rows       map[string]string
}

func (s Scan) contains(k string) bool {
	return k >= s.Start && (s.End == "" || k < s.End)
}

// Report is what Analyze found.
type Report struct {
	Violations []error
	// Transactions by outcome.
	Committed, Aborted, ReadOnly int
	// Indeterminate transactions (Unknown outcome), and how many of them
	// a read proved committed; the rest may or may not have.
	Indeterminate, IndeterminateSeen int
	// RealTimeReads is how many reads the stale-snapshot check judged:
	// reads of a key that some transaction known committed before the
	// reader began had written. Zero: the history says nothing of real
	// time (no instants, or no such pair).
	RealTimeReads int
}

func (r Report) String() string {
	return fmt.Sprintf("%d committed, %d aborted, %d read-only, %d indeterminate (%d proven committed by a read, %d unseen); %d reads judged against real time; %d violations",
		r.Committed, r.Aborted, r.ReadOnly, r.Indeterminate, r.IndeterminateSeen, r.Indeterminate-r.IndeterminateSeen, r.RealTimeReads, len(r.Violations))
}

// Check returns every violation found in txns, at most limit (0: all).
func Check(txns []Txn, limit int) []error { return Analyze(txns, limit).Violations }

type write struct {
	key, value string
}

// read is one value a transaction read, from a Get or a Scan.
type read struct {
	key, value string
}

// rank is a version's place in its key's order: the commit timestamp of a
// committed write; an indeterminate write that read the key before writing
// it is depth versions after the version it read (ts is that one's).
type rank struct {
	ts    uint64
	depth int
}

func (a rank) less(b rank) bool { return a.ts < b.ts || a.ts == b.ts && a.depth < b.depth }

// history is the indexes the checks share.
type history struct {
	txns   []Txn
	writer map[write]*Txn
	// writers of each key; committed: only the acknowledged ones, by
	// commit timestamp.
	writers, committed map[string][]*Txn
	reads              map[*Txn][]read
	// vis is when each transaction was known to have committed, and who
	// showed it (itself, or a reader); absent: not known.
	vis   map[*Txn]time.Duration
	visBy map[*Txn]*Txn
	// seen: some other transaction read one of its writes.
	seen  map[*Txn]bool
	ranks map[write]rankMemo
	// realTimeReads counts the reads checkStaleSnapshots judged.
	realTimeReads *int
}

type rankMemo struct {
	r  rank
	ok bool
}

// Analyze checks txns and counts their outcomes; it reports at most limit
// violations (0: all).
func Analyze(txns []Txn, limit int) Report {
	var rep Report
	full := func() bool { return limit > 0 && len(rep.Violations) >= limit }
	add := func(format string, args ...any) bool {
		rep.Violations = append(rep.Violations, fmt.Errorf(format, args...))
		return full()
	}
	h := &history{txns: txns, writer: map[write]*Txn{}, writers: map[string][]*Txn{}, committed: map[string][]*Txn{},
		reads: map[*Txn][]read{}, vis: map[*Txn]time.Duration{}, visBy: map[*Txn]*Txn{}, seen: map[*Txn]bool{}, ranks: map[write]rankMemo{}}
	for i := range txns {
		t := &txns[i]
		switch t.Outcome {
		case Committed:
			rep.Committed++
		case Aborted:
			rep.Aborted++
		case ReadOnly:
			rep.ReadOnly++
		case Unknown:
			rep.Indeterminate++
		}
		for k, v := range t.Writes {
			w := write{k, v}
			if prev, ok := h.writer[w]; ok {
				if add("key %q value %q written by both %s and %s: values must be unique", k, v, prev.ID, t.ID) {
					return rep
				}
				continue
			}
			h.writer[w] = t
			h.writers[k] = append(h.writers[k], t)
			if t.Outcome == Committed {
				h.committed[k] = append(h.committed[k], t)
			}
		}
		if t.Outcome == Committed && t.Complete > 0 {
			h.vis[t], h.visBy[t] = t.Complete, t
		}
	}
	for _, ws := range h.committed {
		sort.Slice(ws, func(i, j int) bool { return ws[i].CommitTS < ws[j].CommitTS })
	}
	// Reads, scans expanded: a key of the scan's range that some
	// transaction wrote and the scan did not return, it read as absent.
	for i := range txns {
		t := &txns[i]
		var rs []read
		for k, v := range t.Reads {
			rs = append(rs, read{k, v})
		}
		for _, s := range t.Scans {
			for k, v := range s.Rows {
				rs = append(rs, read{k, v})
			}
			for k := range h.writers {
				if _, ok := s.Rows[k]; !ok && s.contains(k) {
					rs = append(rs, read{k, ""})
				}
			}
		}
		sort.Slice(rs, func(i, j int) bool {
			return rs[i].key < rs[j].key || rs[i].key == rs[j].key && rs[i].value < rs[j].value
		})
		h.reads[t] = slices.Compact(rs) // a Get and a Scan of one key read it once
	}
	// A read proves its writer committed before the reader completed.
	for i := range txns {
		r := &txns[i]
		for _, rd := range h.reads[r] {
			w, ok := h.writer[write(rd)]
			if !ok || w == r || w.Outcome == Aborted || w.Outcome == ReadOnly {
				continue
			}
			h.seen[w] = true
			if r.Complete == 0 {
				continue
			}
			if v, ok := h.vis[w]; !ok || r.Complete < v {
				h.vis[w], h.visBy[w] = r.Complete, r
			}
		}
	}
	for i := range txns {
		if t := &txns[i]; t.Outcome == Unknown && h.proven(t) {
			rep.IndeterminateSeen++
		}
	}
	h.realTimeReads = &rep.RealTimeReads
	for _, check := range []func(add func(string, ...any) bool) bool{
		h.checkCommitAfterStart, h.checkFirstCommitterWins, h.checkReadsAtTimestamps,
		h.checkLostUpdatesByValue, h.checkReadsFromTheFuture, h.checkStaleSnapshots, h.checkCommitOrder,
	} {
		if check(add) {
			return rep
		}
	}
	return rep
}

// proven reports whether t is known to have committed: acknowledged, or
// read by another transaction.
func (h *history) proven(t *Txn) bool {
	if t.Outcome == Committed {
		return true
	}
	if t.Outcome != Unknown {
		return false
	}
	return h.seen[t]
}

func (h *history) checkCommitAfterStart(add func(string, ...any) bool) bool {
	for i := range h.txns {
		t := &h.txns[i]
		if t.Outcome == Committed && t.CommitTS <= t.StartTS {
			if add("%s committed at %d, not after its start %d", t.ID, t.CommitTS, t.StartTS) {
				return true
			}
		}
	}
	return false
}

func (h *history) checkFirstCommitterWins(add func(string, ...any) bool) bool {
	for _, k := range sortedKeys(h.committed) {
		ws := h.committed[k]
		for i := 1; i < len(ws); i++ {
			a, b := ws[i-1], ws[i]
			if a.CommitTS == b.CommitTS || b.StartTS < a.CommitTS {
				if add("key %q: %s (start %d, commit %d) and %s (start %d, commit %d) overlap and both committed a write of it",
					k, a.ID, a.StartTS, a.CommitTS, b.ID, b.StartTS, b.CommitTS) {
					return true
				}
			}
		}
	}
	return false
}

func (h *history) checkReadsAtTimestamps(add func(string, ...any) bool) bool {
	for i := range h.txns {
		r := &h.txns[i]
		for _, rd := range h.reads[r] {
			k, v := rd.key, rd.value
			// The newest committed write of k at or before the snapshot.
			ws := h.committed[k]
			n := sort.Search(len(ws), func(i int) bool { return ws[i].CommitTS > r.StartTS })
			var newest *Txn
			if n > 0 {
				newest = ws[n-1]
			}
			if v == "" {
				if newest != nil && newest != r && add("%s (start %d) read %q as absent, but %s wrote it at %d", r.ID, r.StartTS, k, newest.ID, newest.CommitTS) {
					return true
				}
				continue
			}
			w, ok := h.writer[write{k, v}]
			switch {
			case ok && w == r:
				// Its own write.
			case !ok:
				if add("%s read %q = %q, which no transaction wrote", r.ID, k, v) {
					return true
				}
			case w.Outcome == Aborted || w.Outcome == ReadOnly:
				if add("%s read %q = %q, written by %s, which %s", r.ID, k, v, w.ID, w.Outcome) {
					return true
				}
			case w.Outcome == Unknown:
				// It committed, at an unknown timestamp.
			case w.CommitTS > r.StartTS:
				if add("%s (start %d) read %q = %q from %s, which committed later, at %d", r.ID, r.StartTS, k, v, w.ID, w.CommitTS) {
					return true
				}
			case newest != w:
				if add("%s (start %d) read %q = %q from %s (commit %d), but %s committed a newer write at %d before the snapshot",
					r.ID, r.StartTS, k, v, w.ID, w.CommitTS, newest.ID, newest.CommitTS) {
					return true
				}
			}
		}
	}
	return false
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// at formats a client instant for a message.
func at(d time.Duration) string { return d.String() }

// rankOf is the place of key k's version v in the key's order, if known:
// "" (absent) before every write; a committed write at its timestamp; an
// indeterminate write that read k first right after what it read.
func (h *history) rankOf(k, v string) (rank, bool) {
	if v == "" {
		return rank{}, true
	}
	w := write{k, v}
	if m, ok := h.ranks[w]; ok {
		return m.r, m.ok
	}
	h.ranks[w] = rankMemo{} // a cycle of reads ends unknown
	var m rankMemo
	if t, ok := h.writer[w]; ok {
		switch {
		case t.Outcome == Committed:
			m = rankMemo{rank{ts: t.CommitTS}, true}
		case t.Outcome == Unknown:
			if before, read := h.readOf(t, k); read && before != v {
				if r, ok := h.rankOf(k, before); ok {
					m = rankMemo{rank{r.ts, r.depth + 1}, true}
				}
			}
		}
	}
	h.ranks[w] = m
	return m.r, m.ok
}

// readOf is the value t read of k, if it read one (and only one).
func (h *history) readOf(t *Txn, k string) (string, bool) {
	rs := h.reads[t]
	i := sort.Search(len(rs), func(i int) bool { return rs[i].key >= k })
	if i == len(rs) || rs[i].key != k || i+1 < len(rs) && rs[i+1].key == k {
		return "", false
	}
	return rs[i].value, true
}

// checkLostUpdatesByValue: two transactions that committed read one
// version of a key and both wrote the key.
func (h *history) checkLostUpdatesByValue(add func(string, ...any) bool) bool {
	over := map[write][]*Txn{} // version read → committed writers of its key that read it
	for i := range h.txns {
		t := &h.txns[i]
		if !h.proven(t) {
			continue
		}
		for _, rd := range h.reads[t] {
			if nv, wrote := t.Writes[rd.key]; wrote && nv != rd.value {
				over[write(rd)] = append(over[write(rd)], t)
			}
		}
	}
	keys := make([]write, 0, len(over))
	for w, ts := range over {
		if len(ts) > 1 {
			keys = append(keys, w)
		}
	}
	sort.Slice(keys, func(i, j int) bool {
		return keys[i].key < keys[j].key || keys[i].key == keys[j].key && keys[i].value < keys[j].value
	})
	for _, w := range keys {
		ts := over[w]
		ids := make([]string, len(ts))
		for i, t := range ts {
			ids[i] = fmt.Sprintf("%s (%s)", t.ID, t.Outcome)
		}
		if add("lost update: %s all read %q = %q and wrote it, and all committed", strings.Join(ids, ", "), w.key, w.value) {
			return true
		}
	}
	return false
}

// checkReadsFromTheFuture: a transaction read a write of one that began
// after it had finished.
func (h *history) checkReadsFromTheFuture(add func(string, ...any) bool) bool {
	for i := range h.txns {
		r := &h.txns[i]
		if r.Complete == 0 {
			continue
		}
		for _, rd := range h.reads[r] {
			w, ok := h.writer[write(rd)]
			if ok && w != r && w.Invoke > r.Complete {
				if add("%s read %q = %q, written by %s, which began (client %s) after %s had finished (client %s)",
					r.ID, rd.key, rd.value, w.ID, at(w.Invoke), r.ID, at(r.Complete)) {
					return true
				}
			}
		}
	}
	return false
}

// visible is one write of a key with its version's place and when it was
// known to have committed.
type visible struct {
	t    *Txn
	rank rank
	vis  time.Duration
}

// checkStaleSnapshots: a transaction that began after another had
// committed read an older version of a key that one wrote.
func (h *history) checkStaleSnapshots(add func(string, ...any) bool) bool {
	// Per key, the writes known committed, by when, each with the newest
	// place in the key's order known committed by then.
	type known struct {
		vis    time.Duration
		newest visible
	}
	byKey := map[string][]known{}
	for _, k := range sortedKeys(h.writers) {
		var vs []visible
		for _, t := range h.writers[k] {
			vis, ok := h.vis[t]
			if !ok {
				continue
			}
			if r, ok := h.rankOf(k, t.Writes[k]); ok {
				vs = append(vs, visible{t, r, vis})
			}
		}
		sort.Slice(vs, func(i, j int) bool { return vs[i].vis < vs[j].vis })
		ks := make([]known, len(vs))
		for i, v := range vs {
			ks[i] = known{v.vis, v}
			if i > 0 && !ks[i-1].newest.rank.less(v.rank) {
				ks[i].newest = ks[i-1].newest
			}
		}
		byKey[k] = ks
	}
	for i := range h.txns {
		r := &h.txns[i]
		if r.Invoke == 0 {
			continue
		}
		for _, rd := range h.reads[r] {
			ks := byKey[rd.key]
			n := sort.Search(len(ks), func(i int) bool { return ks[i].vis >= r.Invoke })
			if n == 0 {
				continue
			}
			must := ks[n-1].newest
			*h.realTimeReads++
			if w, ok := h.writer[write(rd)]; ok && (w == r || w == must.t) {
				continue
			}
			got, ok := h.rankOf(rd.key, rd.value)
			if !ok || !got.less(must.rank) {
				continue
			}
			what := fmt.Sprintf("%q", rd.value)
			if rd.value == "" {
				what = "absent"
			} else if w, ok := h.writer[write(rd)]; ok {
				what += " from " + w.ID
			}
			how := "its commit was acknowledged"
			if by := h.visBy[must.t]; by != must.t {
				how = by.ID + ", which read it, had finished"
			}
			if add("stale snapshot: %s (start %d) began at client %s and read %q as %s, but %s's newer write %q (commit %d) was committed by client %s (%s)",
				r.ID, r.StartTS, at(r.Invoke), rd.key, what, must.t.ID, must.t.Writes[rd.key], must.t.CommitTS, at(must.vis), how) {
				return true
			}
		}
	}
	return false
}

// checkCommitOrder: a transaction that began after another had committed,
// and wrote a key it wrote or read its write, committed at an earlier
// timestamp.
func (h *history) checkCommitOrder(add func(string, ...any) bool) bool {
	before := func(t1, t2 *Txn) bool {
		vis, ok := h.vis[t1]
		return ok && t2.Invoke > 0 && vis < t2.Invoke && t2.Outcome == Committed && t1.Outcome == Committed && t2.CommitTS < t1.CommitTS
	}
	report := func(t1, t2 *Txn, how string) bool {
		return add("commit order against real time: %s began at client %s, after %s had committed (client %s), and %s, yet committed at %d, before %s's %d",
			t2.ID, at(t2.Invoke), t1.ID, at(h.vis[t1]), how, t2.CommitTS, t1.ID, t1.CommitTS)
	}
	for _, k := range sortedKeys(h.committed) {
		// Newest commit first: for each writer, the earliest known
		// commit among the writers with a later timestamp (a tie is the
		// first-committer-wins check's).
		ws := h.committed[k]
		var first *Txn
		for hi := len(ws); hi > 0; {
			lo := hi - 1
			for lo > 0 && ws[lo-1].CommitTS == ws[hi-1].CommitTS {
				lo--
			}
			for _, t2 := range ws[lo:hi] {
				if first != nil && before(first, t2) {
					if report(first, t2, fmt.Sprintf("both wrote %q", k)) {
						return true
					}
				}
			}
			for _, t2 := range ws[lo:hi] {
				if vis, ok := h.vis[t2]; ok && (first == nil || vis < h.vis[first]) {
					first = t2
				}
			}
			hi = lo
		}
	}
	for i := range h.txns {
		t2 := &h.txns[i]
		for _, rd := range h.reads[t2] {
			if t1, ok := h.writer[write(rd)]; ok && t1 != t2 && before(t1, t2) {
				if report(t1, t2, fmt.Sprintf("read its write of %q", rd.key)) {
					return true
				}
			}
		}
	}
	return false
}
