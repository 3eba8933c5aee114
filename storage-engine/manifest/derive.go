package manifest

import (
	"bytes"
	"fmt"
)

// Parent is a parent region's final manifest (docs/regions.md, split step
// 3): everything the parent acknowledged is in its files, locks and
// outcomes, and its WAL holds nothing past FlushedTS.
type Parent struct {
	Name     string
	Manifest Manifest
}

// Derive is the first manifest of a region covering [start, end) made by
// splitting parent: the parent's files that may hold keys in the range, by
// reference (FileMeta.Home) and not copied; the parent's locks whose key is
// in the range and outcomes whose primary is (a resolver asks the region of
// the primary); its FlushedTS and ExactFromTS, so the daughter's clock
// starts above every timestamp the parent issued and it refuses the reads
// the parent refused. The result has no owner and number 0: the opener
// claims it by committing it as manifest 1, create-if-absent.
//
// Derive is pure and deterministic: a daughter derived twice (a crash
// between deriving and committing) gets the same manifest.
func Derive(parent Parent, start, end []byte) (Manifest, error) {
	p := parent.Manifest
	if start == nil {
		start = []byte{}
	}
	if bytes.Compare(start, p.Start) < 0 || !endWithin(end, p.End) || (end != nil && bytes.Compare(start, end) >= 0) {
		return Manifest{}, fmt.Errorf("manifest: deriving [%q, %s) from %s [%q, %s): the range is empty or not within the parent's",
			start, endString(end), parent.Name, p.Start, endString(p.End))
	}
	if p.Number == 0 {
		return Manifest{}, fmt.Errorf("manifest: deriving from %s: the parent has no committed manifest", parent.Name)
	}
	d := Manifest{
		Start:       bytes.Clone(start),
		End:         bytes.Clone(end),
		Parents:     []ParentRef{{Name: parent.Name, Manifest: p.Number}},
		FlushedTS:   max(p.FlushedTS, p.MaxTS()),
		ExactFromTS: p.ExactFromTS,
		NextFileNum: 1,
		Files:       []FileMeta{},
	}
	for _, f := range p.Files {
		// Smallest and Largest describe the object, not the range: they
		// only prune lookups, and the region clips to its range anyway.
		if bytes.Compare(f.Largest, start) < 0 || (end != nil && bytes.Compare(f.Smallest, end) >= 0) {
			continue
		}
		if f.Home == "" {
			f.Home = parent.Name
		}
		d.Files = append(d.Files, f)
	}
	for _, l := range p.Locks {
		if d.InRange(l.Key) {
			d.Locks = append(d.Locks, l)
		}
	}
	for _, o := range p.TxnOutcomes {
		if d.InRange(o.Primary) {
			d.TxnOutcomes = append(d.TxnOutcomes, o)
		}
	}
	return d, nil
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
