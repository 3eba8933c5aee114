package memstore

import (
	"bytes"

	"github.com/bellows-kv/bellows/storage-engine/retention"
)

// Retention is what an in-memory compaction may drop: the rules of the
// region's disk compactions (package retention), with the open snapshots
// and the horizon, the newest timestamp the compaction judges (at most the
// visible timestamp when it began; under a GC window, now − gcTTL).
type Retention struct {
	MaxVersions int
	// SnapshotsDesc are the open snapshots' timestamps, newest first.
	SnapshotsDesc []uint64
	// Horizon: every version above it is kept, and the newest at or below
	// it (a View lets readers read at its horizon). 0 judges nothing.
	Horizon uint64
}

// dropsNothingFrom reports whether a compaction under ret could drop no
// version of segments whose oldest version is at minTS: it judges only
// versions at or below the horizon.
func (ret *Retention) dropsNothingFrom(minTS uint64) bool { return ret.Horizon < minTS }

// mergeFlat merges segments into one. With keep nil every version stays and
// only the index is rebuilt: the chunks are shared (Accordion's in-memory
// merge). Otherwise the retention rules drop versions and the survivors are
// copied into new chunks, so the dropped ones' memory is freed with their
// segments (the in-memory compaction, which relocates cells as HBase's
// MSLAB does). It returns the segment and the number of versions dropped.
func mergeFlat(segs []*flat, keep *Retention) (*flat, int) {
	total := 0
	for _, s := range segs {
		total += len(s.entries)
	}
	out := &flat{entries: make([]flatEntry, 0, total), minTS: ^uint64(0), merged: true}
	// The output's keys run from the least first key to the greatest last
	// one: its shared prefix is theirs.
	var lo, hi []byte
	for _, s := range segs {
		if len(s.entries) == 0 {
			continue
		}
		first, last := s.userKey(&s.entries[0]), s.userKey(&s.entries[len(s.entries)-1])
		if lo == nil || bytes.Compare(first, lo) < 0 {
			lo = first
		}
		if hi == nil || bytes.Compare(last, hi) > 0 {
			hi = last
		}
	}
	out.shared = sharedPrefix(lo, hi)
	// Entries of two inputs compare by prefix only if the inputs share the
	// same bytes (decided once here, not per comparison).
	samePrefixes := true
	for _, s := range segs[1:] {
		samePrefixes = samePrefixes && bytes.Equal(s.shared, segs[0].shared)
	}
	out.newFilter(int64(total))
	var base []int // chunk index of each input's first chunk in out
	var ar *arena
	if keep == nil {
		for _, s := range segs {
			base = append(base, len(out.chunks))
			out.chunks = append(out.chunks, s.chunks...)
		}
	} else {
		ar = newArena()
	}
	pos := make([]int, len(segs))
	// next is the input whose current entry is smallest, or -1.
	next := func() int {
		best := -1
		for i, s := range segs {
			if pos[i] == len(s.entries) {
				continue
			}
			if best < 0 || lessEntry(s, &s.entries[pos[i]], segs[best], &segs[best].entries[pos[best]], samePrefixes) {
				best = i
			}
		}
		return best
	}
	var prev []byte
	type ref struct{ seg, i int }
	var group []ref
	var tss []uint64
	var keepMarks []bool
	dropped := 0
	emitGroup := func() {
		for _, g := range group {
			tss = append(tss, segs[g.seg].entries[g.i].ts)
		}
		keepMarks = retention.Mark(keepMarks, tss, keep.MaxVersions, keep.SnapshotsDesc, keep.Horizon)
		for j, g := range group {
			if !keepMarks[j] {
				dropped++
				continue
			}
			s := segs[g.seg]
			e := &s.entries[g.i]
			k, v := s.userKey(e), s.value(e)
			buf, at := ar.alloc(len(k) + len(v))
			copy(buf, k)
			copy(buf[len(k):], v)
			key := s.key(e)
			key.UserKey = buf[:len(k):len(k)]
			out.add(key, at, len(v), &prev)
		}
		group, tss = group[:0], tss[:0]
	}
	for {
		i := next()
		if i < 0 {
			break
		}
		s := segs[i]
		e := &s.entries[pos[i]]
		if keep == nil {
			at := makeLoc(base[i]+e.at.chunk(), e.at.off())
			out.add(s.key(e), at, int(e.vlen), &prev)
		} else {
			if len(group) > 0 {
				g := group[0]
				if !bytes.Equal(segs[g.seg].userKey(&segs[g.seg].entries[g.i]), s.userKey(e)) {
					emitGroup()
				}
			}
			group = append(group, ref{i, pos[i]})
		}
		pos[i]++
	}
	if keep != nil {
		if len(group) > 0 {
			emitGroup()
		}
		out.chunks = ar.all()
	}
	return out, dropped
}

// lessEntry orders two entries of (perhaps) different segments like
// kv.Compare. Their prefixes decide when they differ and samePrefixes says
// the segments' shared bytes are the same (flat's invariants; always so
// within one segment).
func lessEntry(a *flat, ea *flatEntry, b *flat, eb *flatEntry, samePrefixes bool) bool {
	if ea.prefix != eb.prefix && samePrefixes {
		return ea.prefix < eb.prefix
	}
	if c := bytes.Compare(a.userKey(ea), b.userKey(eb)); c != 0 {
		return c < 0
	}
	if ea.ts != eb.ts {
		return ea.ts > eb.ts
	}
	return ea.kind() > eb.kind()
}
