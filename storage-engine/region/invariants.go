package region

import (
	"bytes"
	"fmt"
	"slices"

	"github.com/bellows-kv/bellows/storage-engine/manifest"
)

// checkInvariants reports the first invariant of the package documentation
// that the region's state breaks, as far as the state shows it: the live
// files' timestamp ranges, the manifest against the read state, the
// memstores against the flushed timestamp and the WAL position, and the
// visible timestamp. It takes commitMu and mu, so the caller holds neither.
// A closed region passes.
func (r *Region) checkInvariants() error {
	r.commitMu.Lock()
	defer r.commitMu.Unlock()
	r.mu.RLock()
	defer r.mu.RUnlock()
	if r.closed {
		return nil
	}
	fail := func(format string, args ...any) error {
		return errorf(r.opts.Name, "invariant broken: %s", fmt.Sprintf(format, args...))
	}
	m := r.manifest
	if vis := r.vis.load(); vis > r.lastTS {
		return fail("visible timestamp %d is past the last one assigned, %d", vis, r.lastTS)
	}
	if vis := r.vis.load(); r.exactFrom > vis {
		return fail("reads are exact from %d, past the visible timestamp %d: a read of the newest data would be refused", r.exactFrom, vis)
	}
	if m.ExactFromTS > m.FlushedTS {
		return fail("manifest %d has reads exact from %d, past its flushed timestamp %d", m.Number, m.ExactFromTS, m.FlushedTS)
	}
	order := inTime
	switch {
	case r.txnVersions.Load():
		order = perKey
	case m.MergedRuns:
		order = perSpan
	}
	if err := checkTables(r.current.tables, m.FlushedTS, true, order); err != nil {
		return fail("current version: %v", err)
	}
	if r.warm != nil {
		// The old version holds the compaction's inputs, obsolete already.
		if err := checkTables(r.warm.old.tables, m.FlushedTS, false, order); err != nil {
			return fail("warmup's old version: %v", err)
		}
	}
	keys := make([]string, len(r.current.tables))
	for i, t := range r.current.tables {
		keys[i] = t.key
		if t.meta.Home == "" && t.meta.Num >= r.nextFile.Load() {
			return fail("file %s has number %d, not below the next file number %d", t.key, t.meta.Num, r.nextFile.Load())
		}
	}
	if !slices.EqualFunc(m.Files, keys, func(f manifest.FileMeta, k string) bool { return f.Key == k }) {
		named := make([]string, len(m.Files))
		for i, f := range m.Files {
			named[i] = f.Key
		}
		return fail("manifest %d names %v, the read state has %v", m.Number, named, keys)
	}
	if m.Number < r.epoch {
		return fail("manifest %d is older than the claim %d", m.Number, r.epoch)
	}
	if len(r.imm) > r.opts.MaxImmutableMemstores {
		return fail("%d frozen memstores, at most %d may wait", len(r.imm), r.opts.MaxImmutableMemstores)
	}
	// Every memstore version is newer than every flushed one, and the WAL
	// still holds every memstore's records.
	mems := append(slices.Clone(r.imm), r.mem)
	var olderMax uint64
	for i, mt := range mems {
		view := mt.ms.View()
		if err := view.CheckInvariants(); err != nil {
			return fail("memstore %d of %d: %v", i, len(mems), err)
		}
		if lo, hi := view.TSRange(); view.Len() > 0 {
			if lo <= olderMax {
				return fail("memstore %d of %d holds timestamps from %d, not newer than its predecessor's %d", i, len(mems), lo, olderMax)
			}
			olderMax = hi
		}
		if mt.ms.View().Len() > 0 && mt.maxTS <= m.FlushedTS {
			return fail("memstore %d of %d holds versions up to %d, not newer than the flushed %d", i, len(mems), mt.maxTS, m.FlushedTS)
		}
		if i > 0 && mt.walSeg < mems[i-1].walSeg {
			return fail("memstore %d starts at WAL segment %d, before its predecessor's %d", i, mt.walSeg, mems[i-1].walSeg)
		}
	}
	if m.WALMinSegment > mems[0].walSeg {
		return fail("manifest %d replays from WAL segment %d, past the oldest memstore's %d", m.Number, m.WALMinSegment, mems[0].walSeg)
	}
	for ts := range r.snaps {
		if ts > r.vis.load() {
			return fail("snapshot at %d is past the visible timestamp %d", ts, r.vis.load())
		}
	}
	return nil
}

// fileOrder is how a region's live files are ordered in time.
type fileOrder int

const (
	// inTime: disjoint timestamp ranges, ascending from the oldest file.
	inTime fileOrder = iota
	// perSpan: so for every two files whose key spans meet (a merged
	// region before its first compaction: manifest.MergedRuns).
	perSpan
	// perKey: so for each key's versions only, which the files do not
	// show (checked not at all).
	perKey
)

// checkTables checks a version's files: referenced, live when live is set,
// none past flushedTS, and ordered in time as order says. A cross-region
// commit writes versions at an older timestamp than writes of other keys
// before it (resolve.go), so a region that has written one orders its
// files per key only.
func checkTables(tables []*table, flushedTS uint64, live bool, order fileOrder) error {
	for i, t := range tables {
		switch {
		case t.refs.Load() < 1:
			return fmt.Errorf("file %s has %d references", t.key, t.refs.Load())
		case live && t.obsolete.Load():
			return fmt.Errorf("live file %s is marked obsolete", t.key)
		case t.meta.MinTS > t.meta.MaxTS:
			return fmt.Errorf("file %s has timestamps [%d, %d]", t.key, t.meta.MinTS, t.meta.MaxTS)
		case t.meta.MaxTS > flushedTS:
			return fmt.Errorf("file %s holds timestamp %d, past the flushed %d", t.key, t.meta.MaxTS, flushedTS)
		}
		for j := i - 1; j >= 0; j-- {
			p := tables[j]
			if order == perKey || (order == inTime && j < i-1) {
				break
			}
			meet := bytes.Compare(p.meta.Largest, t.meta.Smallest) >= 0 && bytes.Compare(t.meta.Largest, p.meta.Smallest) >= 0
			if (order == inTime || meet) && p.meta.MaxTS >= t.meta.MinTS {
				return fmt.Errorf("files %s [%d, %d] and %s [%d, %d] are not disjoint and ascending in time",
					p.key, p.meta.MinTS, p.meta.MaxTS, t.key, t.meta.MinTS, t.meta.MaxTS)
			}
		}
	}
	return nil
}
