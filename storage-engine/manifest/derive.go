package manifest

import (
	"bytes"
	"fmt"
	"strings"
)

// Parent is a parent region's final manifest (docs/regions.md, split step
// 3, merge): everything the parent acknowledged is in its files, locks and
// outcomes, and its WAL holds nothing past FlushedTS.
type Parent struct {
	Name     string
	Manifest Manifest
}

// Derive is the first manifest of a region covering [start, end) made by
// splitting parent: DeriveFrom with one parent.
func Derive(parent Parent, start, end []byte) (Manifest, error) {
	return DeriveFrom([]Parent{parent}, start, end)
}

// DeriveFrom is the first manifest of a region covering [start, end) made
// by a split (one parent) or a merge (several, adjacent, in key order):
// each parent's files that may hold keys in the range, by reference
// (FileMeta.Home) and not copied, the first parent's files, then the
// second's; the parents' locks whose key is in the range and outcomes whose
// primary is (a resolver asks the region of the primary); the newest of
// their FlushedTS and files and of their ExactFromTS, so the region's clock
// starts above every timestamp a parent issued and it refuses the reads a
// parent refused. The result has no owner and number 0: the opener claims
// it by committing it as manifest 1, create-if-absent.
//
// The parents' ranges must be adjacent and hold [start, end). With several
// parents no file of one may hold keys of another's range within [start,
// end): a reference file that does (an ancestor's, with keys the other
// parent may have deleted or rewritten since) would show them again. The
// region compacts such files away before a merge (region.PrepareMerge).
// The concatenated files are ordered in time per parent only: the result
// has MergedRuns set, and so does every region derived from one that has.
//
// DeriveFrom is pure and deterministic: a region derived twice (a crash
// between deriving and committing) gets the same manifest.
func DeriveFrom(parents []Parent, start, end []byte) (Manifest, error) {
	if start == nil {
		start = []byte{}
	}
	if len(parents) == 0 {
		return Manifest{}, fmt.Errorf("manifest: deriving [%q, %s) from no parent", start, endString(end))
	}
	first, last := parents[0].Manifest, parents[len(parents)-1].Manifest
	for i, p := range parents {
		if p.Manifest.Number == 0 {
			return Manifest{}, fmt.Errorf("manifest: deriving from %s: the parent has no committed manifest", p.Name)
		}
		if i > 0 && (parents[i-1].Manifest.End == nil || !bytes.Equal(parents[i-1].Manifest.End, p.Manifest.Start)) {
			q := parents[i-1]
			return Manifest{}, fmt.Errorf("manifest: deriving from %s [%q, %s) and %s [%q, %s): the parents are not adjacent",
				q.Name, q.Manifest.Start, endString(q.Manifest.End), p.Name, p.Manifest.Start, endString(p.Manifest.End))
		}
	}
	if bytes.Compare(start, first.Start) < 0 || !endWithin(end, last.End) || (end != nil && bytes.Compare(start, end) >= 0) {
		return Manifest{}, fmt.Errorf("manifest: deriving [%q, %s) from %s [%q, %s): the range is empty or not within the parent's",
			start, endString(end), names(parents), first.Start, endString(last.End))
	}
	d := Manifest{
		Start:       bytes.Clone(start),
		End:         bytes.Clone(end),
		NextFileNum: 1,
		Files:       []FileMeta{},
		MergedRuns:  len(parents) > 1,
	}
	for i, parent := range parents {
		p := parent.Manifest
		d.Parents = append(d.Parents, ParentRef{Name: parent.Name, Manifest: p.Number})
		d.FlushedTS = max(d.FlushedTS, p.FlushedTS, p.MaxTS())
		d.ExactFromTS = max(d.ExactFromTS, p.ExactFromTS)
		d.MergedRuns = d.MergedRuns || p.MergedRuns
		// The part of the range this parent holds.
		lo, hi := start, end
		if bytes.Compare(p.Start, lo) > 0 {
			lo = p.Start
		}
		if p.End != nil && (hi == nil || bytes.Compare(p.End, hi) < 0) {
			hi = p.End
		}
		for _, f := range p.Files {
			// Smallest and Largest describe the object, not the range: they
			// only prune lookups, and the region clips to its range anyway.
			if bytes.Compare(f.Largest, lo) < 0 || (hi != nil && bytes.Compare(f.Smallest, hi) >= 0) {
				continue
			}
			for j, other := range parents {
				if j != i && spanMeets(f, other.Manifest, start, end) {
					return Manifest{}, fmt.Errorf("manifest: deriving [%q, %s) from %s: file %s of %s holds keys [%q, %q], into %s's range [%q, %s); "+
						"compact %s before merging", start, endString(end), names(parents), f.Key, parent.Name, f.Smallest, f.Largest,
						other.Name, other.Manifest.Start, endString(other.Manifest.End), parent.Name)
				}
			}
			if f.Home == "" {
				f.Home = parent.Name
			}
			d.Files = append(d.Files, f)
		}
		for _, l := range p.Locks {
			if d.InRange(l.Key) && p.InRange(l.Key) {
				d.Locks = append(d.Locks, l)
			}
		}
		for _, o := range p.TxnOutcomes {
			if d.InRange(o.Primary) && p.InRange(o.Primary) {
				d.TxnOutcomes = append(d.TxnOutcomes, o)
			}
		}
	}
	return d, nil
}

// spanMeets reports whether file f's keys [Smallest, Largest] meet the
// part of m's range within [start, end).
func spanMeets(f FileMeta, m Manifest, start, end []byte) bool {
	lo, hi := start, end
	if bytes.Compare(m.Start, lo) > 0 {
		lo = m.Start
	}
	if m.End != nil && (hi == nil || bytes.Compare(m.End, hi) < 0) {
		hi = m.End
	}
	return bytes.Compare(f.Largest, lo) >= 0 && (hi == nil || bytes.Compare(f.Smallest, hi) < 0)
}

func names(parents []Parent) string {
	var b strings.Builder
	for i, p := range parents {
		if i > 0 {
			b.WriteString(" and ")
		}
		b.WriteString(p.Name)
	}
	return b.String()
}

// endWithin reports whether a range ending at end (nil: unbounded) ends at
// or before parentEnd.
func endWithin(end, parentEnd []byte) bool {
	if parentEnd == nil {
		return true
	}
	return end != nil && bytes.Compare(end, parentEnd) <= 0
}

func endString(end []byte) string {
	if end == nil {
		return "∞"
	}
	return fmt.Sprintf("%q", end)
}
