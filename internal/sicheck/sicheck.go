// Package sicheck checks a recorded history of transactions for snapshot
// isolation, in the spirit of Elle's rw-register checks: every value is
// written once, so each read names the transaction it read from.
//
// Check reports:
//   - a value written twice (the history cannot be checked);
//   - a read of a value no transaction wrote, or that an aborted
//     transaction wrote (no aborted write is ever read);
//   - a read that is not the newest committed write of its key at or
//     before the reader's start timestamp (a future write, or a stale one);
//   - two committed transactions that overlap in time, start to commit,
//     and write one key (first committer wins).
//
// A transaction whose commit's outcome is unknown (the client lost the
// answer) may or may not have committed: its writes may be read, and it
// takes part in no ordering check, since its commit timestamp is unknown.
package sicheck

import (
	"fmt"
	"sort"
)

// Outcome is what the client learned of a transaction's commit.
type Outcome int

const (
	// ReadOnly: no writes, nothing to commit.
	ReadOnly Outcome = iota
	Committed
	Aborted
	// Unknown: the commit failed without saying whether it took effect.
	Unknown
)

// Txn is one recorded transaction. A read of an absent key has value "".
type Txn struct {
	ID       string
	StartTS  uint64
	CommitTS uint64 // Committed only
	Outcome  Outcome
	Reads    map[string]string
	Writes   map[string]string
}

type write struct {
	key, value string
}

// Check returns every violation found in txns, at most limit (0: all).
func Check(txns []Txn, limit int) []error {
	var errs []error
	add := func(format string, args ...any) bool {
		errs = append(errs, fmt.Errorf(format, args...))
		return limit > 0 && len(errs) >= limit
	}
	writer := map[write]*Txn{}
	byKey := map[string][]*Txn{} // committed writers, by commit timestamp
	for i := range txns {
		t := &txns[i]
		for k, v := range t.Writes {
			w := write{k, v}
			if prev, ok := writer[w]; ok {
				if add("key %q value %q written by both %s and %s: values must be unique", k, v, prev.ID, t.ID) {
					return errs
				}
				continue
			}
			writer[w] = t
			if t.Outcome == Committed {
				byKey[k] = append(byKey[k], t)
			}
		}
	}
	for _, ws := range byKey {
		sort.Slice(ws, func(i, j int) bool { return ws[i].CommitTS < ws[j].CommitTS })
	}
	for k, ws := range byKey {
		for i := 1; i < len(ws); i++ {
			a, b := ws[i-1], ws[i]
			if a.CommitTS == b.CommitTS || b.StartTS < a.CommitTS {
				if add("key %q: %s (start %d, commit %d) and %s (start %d, commit %d) overlap and both committed a write of it",
					k, a.ID, a.StartTS, a.CommitTS, b.ID, b.StartTS, b.CommitTS) {
					return errs
				}
			}
		}
	}
	for i := range txns {
		r := &txns[i]
		for k, v := range r.Reads {
			// The newest committed write of k at or before the snapshot.
			ws := byKey[k]
			n := sort.Search(len(ws), func(i int) bool { return ws[i].CommitTS > r.StartTS })
			var newest *Txn
			if n > 0 {
				newest = ws[n-1]
			}
			if v == "" {
				if newest != nil && add("%s (start %d) read %q as absent, but %s wrote it at %d", r.ID, r.StartTS, k, newest.ID, newest.CommitTS) {
					return errs
				}
				continue
			}
			w, ok := writer[write{k, v}]
			switch {
			case !ok:
				if add("%s read %q = %q, which no transaction wrote", r.ID, k, v) {
					return errs
				}
			case w.Outcome == Aborted:
				if add("%s read %q = %q, written by %s, which aborted", r.ID, k, v, w.ID) {
					return errs
				}
			case w.Outcome == Unknown:
				// It committed, at an unknown timestamp.
			case w.CommitTS > r.StartTS:
				if add("%s (start %d) read %q = %q from %s, which committed later, at %d", r.ID, r.StartTS, k, v, w.ID, w.CommitTS) {
					return errs
				}
			case newest != w:
				if add("%s (start %d) read %q = %q from %s (commit %d), but %s committed a newer write at %d before the snapshot",
					r.ID, r.StartTS, k, v, w.ID, w.CommitTS, newest.ID, newest.CommitTS) {
					return errs
				}
			}
		}
	}
	return errs
}
