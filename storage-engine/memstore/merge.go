package memstore

import (
	"bytes"

	"github.com/bits-and-blooms/bloom/v3"

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
// MSLAB does). keys, if not nil, is a filter holding every key of segs:
// the output's filter is a copy of it (the memstore's: Memstore.keys);
// otherwise the output hashes its keys into a new one. It returns the
// segment and the number of versions dropped.
//
// A merge reads only the index where it can: an entry's prefix is reused
// when its input's shared bytes are the output's, and keys are compared
// only when prefixes tie. Under Basic the oldest input is the previous
// merge's output, most of the memstore: reading each of its keys from the
// chunks again, a cache miss apiece, to hash it and to count the uniques
// made a merge about five times dearer (BenchmarkMergeIndexes), and while
// a merge runs no segment is pushed, so the active skiplist every read
// searches grows.
func mergeFlat(segs []*flat, keep *Retention, keys *bloom.BloomFilter) (*flat, int) {
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
	hash := keys == nil
	if hash {
		out.newFilter(int64(total))
	} else {
		out.filter = keys.Copy()
		out.filterBytes = int64(out.filter.Cap() / 8)
	}
	if keep != nil {
		dropped := compactInto(out, segs, keep, samePrefixes, hash)
		return out, dropped
	}
	chunkBase := make([]int, len(segs)) // chunk index of each input's first chunk in out
	reusePrefix := make([]bool, len(segs))
	for i, s := range segs {
		chunkBase[i] = len(out.chunks)
		out.chunks = append(out.chunks, s.chunks...)
		reusePrefix[i] = bytes.Equal(s.shared, out.shared)
	}
	cur := newMergeCursor(segs, samePrefixes)
	for {
		i, j := cur.next()
		if i < 0 {
			break
		}
		s := segs[i]
		e := &s.entries[j]
		prefix := e.prefix
		if !reusePrefix[i] {
			prefix = keyPrefix(s.userKey(e)[len(out.shared):])
		}
		// Different prefixes are different keys; equal ones may be too.
		newKey := true
		if n := len(out.entries); n > 0 && out.entries[n-1].prefix == prefix {
			newKey = !bytes.Equal(out.userKey(&out.entries[n-1]), s.userKey(e))
		}
		if newKey {
			out.uniques++
			if hash {
				out.filter.Add(s.userKey(e))
			}
		}
		out.entries = append(out.entries, flatEntry{prefix: prefix, ts: e.ts,
			at: makeLoc(chunkBase[i]+e.at.chunk(), e.at.off()), klen: e.klen, vlen: e.vlen})
		out.dataBytes += int64(e.keyLen()) + int64(e.vlen)
		out.minTS = min(out.minTS, e.ts)
		out.maxTS = max(out.maxTS, e.ts)
	}
	return out, 0
}

// mergeCursor walks the entries of a merge's inputs in order. Most of a
// merge's versions come from one input (under Basic, the previous merge's
// output), so it compares that input's next entry with the least of the
// others', which changes only when one of them advances: about one
// comparison per version instead of one per input.
type mergeCursor struct {
	segs         []*flat
	pos          []int
	big          int // the input with the most entries
	other        int // the input but big whose current entry is least, or -1
	samePrefixes bool
}

func newMergeCursor(segs []*flat, samePrefixes bool) *mergeCursor {
	c := &mergeCursor{segs: segs, pos: make([]int, len(segs)), samePrefixes: samePrefixes}
	for i, s := range segs {
		if len(s.entries) > len(segs[c.big].entries) {
			c.big = i
		}
	}
	c.other = c.leastOther()
	return c
}

func (c *mergeCursor) entry(i int) *flatEntry { return &c.segs[i].entries[c.pos[i]] }

func (c *mergeCursor) leastOther() int {
	best := -1
	for i, s := range c.segs {
		if i == c.big || c.pos[i] == len(s.entries) {
			continue
		}
		if best < 0 || lessEntry(s, c.entry(i), c.segs[best], c.entry(best), c.samePrefixes) {
			best = i
		}
	}
	return best
}

// next returns the input holding the least entry not yet returned and that
// entry's index in it, or -1 when every input is done.
func (c *mergeCursor) next() (seg, i int) {
	b := c.big
	if c.pos[b] < len(c.segs[b].entries) &&
		(c.other < 0 || lessEntry(c.segs[b], c.entry(b), c.segs[c.other], c.entry(c.other), c.samePrefixes)) {
		c.pos[b]++
		return b, c.pos[b] - 1
	}
	o := c.other
	if o < 0 {
		return -1, 0
	}
	c.pos[o]++
	c.other = c.leastOther()
	return o, c.pos[o] - 1
}

// compactInto is mergeFlat's compaction: it copies into out (whose shared
// bytes and filter are set) the versions of segs that keep retains, hashing
// their keys into the filter if hash, and returns how many it dropped.
func compactInto(out *flat, segs []*flat, keep *Retention, samePrefixes, hash bool) int {
	ar := newArena()
	cur := newMergeCursor(segs, samePrefixes)
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
			out.add(key, at, len(v), &prev, hash)
		}
		group, tss = group[:0], tss[:0]
	}
	for {
		i, j := cur.next()
		if i < 0 {
			break
		}
		s := segs[i]
		e := &s.entries[j]
		if len(group) > 0 {
			g := group[0]
			if !bytes.Equal(segs[g.seg].userKey(&segs[g.seg].entries[g.i]), s.userKey(e)) {
				emitGroup()
			}
		}
		group = append(group, ref{i, j})
	}
	if len(group) > 0 {
		emitGroup()
	}
	out.chunks = ar.all()
	return dropped
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
