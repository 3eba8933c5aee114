package region

// Splitting a region (docs/regions.md, section 2). The region's part is
// local and small: it knows its key range and clips every read, write and
// compaction to it; it finds the key that halves its bytes from its files'
// indexes; it stops its writes and flushes everything (PrepareSplit), so
// that its final manifest holds every acknowledged write; and it retires
// (Retire) once the region map naming its daughters is committed. The
// daughters open from that final manifest (Options.DeriveFrom, derived by
// manifest.Derive), sharing its files by reference.
//
// A merge (docs/regions.md, section 3) is the same with two parents: each
// stops and flushes (PrepareMerge, which first compacts away any file
// holding keys outside the region's range), and the merged region derives
// from both final manifests (manifest.DeriveFrom), the left parent's files
// then the right's. Until its first compaction, a major one over every
// file (manifest.MergedRuns), its files are in time order per key span,
// not across the two runs.
//
// The commit point is the region map's, not the region's: until the map
// names the daughters, the parent reopens from its manifest and WAL as
// after any crash; once it does, the daughters derive from the parent's
// final manifest, which is immutable. So a half-done split is finished or
// undone, never both.
//
// Invariant: a reference file (FileMeta.Home set) is never deleted by the
// region that references it; only its home's prefix holds it, and the
// region map's janitor deletes that once no live region names it.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/bellows-kv/bellows/storage-engine/manifest"
	"github.com/bellows-kv/bellows/storage-engine/sstable"
)

var (
	// ErrKeyNotInRegion matches a *KeyNotInRegionError.
	ErrKeyNotInRegion = errors.New("region: key not in the region's range")
	// ErrRetired: the region was split or merged away; the region map
	// names its successors.
	ErrRetired = errors.New("region: retired by a split or merge")
	// ErrCannotSplit: no key divides the region into two non-empty halves
	// (all of its data is one key, or it has none in files).
	ErrCannotSplit = errors.New("region: no split key")
)

// KeyNotInRegionError refuses a request for a key outside the region's
// range: the caller's route is stale (the region split or merged); it
// should learn the region map again and retry.
type KeyNotInRegionError struct {
	Region     string
	Key        []byte
	Start, End []byte
}

func (e *KeyNotInRegionError) Error() string {
	return fmt.Sprintf("region %s: key %q is not in its range [%q, %s): the region split or merged; route by the current region map",
		e.Region, e.Key, e.Start, endString(e.End))
}

func (e *KeyNotInRegionError) Is(target error) bool { return target == ErrKeyNotInRegion }

func endString(end []byte) string {
	if end == nil {
		return "∞"
	}
	return fmt.Sprintf("%q", end)
}

// DeriveFrom names what a region made by a split or merge derives its
// first manifest from: the parents' names and final manifest numbers, as
// the region map records them (one for a split's daughter, two in key order
// for a merge), and the region's range.
type DeriveFrom struct {
	Parents    []manifest.ParentRef
	Start, End []byte
}

// Range is the region's key range [start, end); a nil end is unbounded.
// A region created whole (not by a split) covers every key.
func (r *Region) Range() (start, end []byte) { return r.start, r.end }

func (r *Region) inRange(key []byte) bool {
	return bytes.Compare(key, r.start) >= 0 && (r.end == nil || bytes.Compare(key, r.end) < 0)
}

func (r *Region) checkKey(key []byte) error {
	if r.inRange(key) {
		return nil
	}
	return &KeyNotInRegionError{Region: r.opts.Name, Key: bytes.Clone(key), Start: r.start, End: r.end}
}

func (r *Region) checkBatchRange(b *Batch) error {
	for _, o := range b.ops {
		if err := r.checkKey(o.key); err != nil {
			return err
		}
	}
	return nil
}

// clip narrows [start, end) to the region's range.
func (r *Region) clip(start, end []byte) ([]byte, []byte) {
	if bytes.Compare(start, r.start) < 0 {
		start = r.start
	}
	if r.end != nil && (end == nil || bytes.Compare(end, r.end) > 0) {
		end = r.end
	}
	return start, end
}

// homeOf is the region whose prefix holds file f.
func (r *Region) homeOf(f manifest.FileMeta) string {
	if f.Home != "" {
		return f.Home
	}
	return r.opts.Name
}

// blockWeight is one data block of a file, weighted by its stored size:
// the unit in which a region's bytes are counted and halved.
type blockWeight struct {
	last  []byte // the block's last user key
	bytes int64
}

// blocksInRange lists the data blocks of the current files that may hold
// keys of the region's range. A block holds the keys after its
// predecessor's last key up to its own. A large file's blocks come in runs
// (sstable.Reader.Spans): the finer grain would read its whole index. A
// file whose index cannot be read counts whole, at its largest key.
func (r *Region) blocksInRange() []blockWeight {
	r.mu.RLock()
	v := r.current
	v.ref()
	r.mu.RUnlock()
	defer v.unref()
	var out []blockWeight
	for _, t := range v.tables {
		var prevLast []byte
		n := len(out)
		err := t.reader.Spans(func(s sstable.Span) {
			if bytes.Compare(s.LastUserKey, r.start) >= 0 && (r.end == nil || prevLast == nil || bytes.Compare(prevLast, r.end) < 0) {
				out = append(out, blockWeight{last: s.LastUserKey, bytes: s.Bytes})
			}
			prevLast = s.LastUserKey
		})
		if err != nil {
			out = append(out[:n], blockWeight{last: t.meta.Largest, bytes: t.meta.Size})
		}
	}
	return out
}

// DataBytes is the region's size as a split counts it: the stored bytes of
// its files' blocks within its range (a reference file counts only its
// blocks in the range) plus its memstores.
func (r *Region) DataBytes() int64 {
	var n int64
	for _, b := range r.blocksInRange() {
		n += b.bytes
	}
	return n + r.MemstoreUsedBytes()
}

// MemstoreUsedBytes is what the region's memstores hold now, the active one
// and those frozen and waiting for flush: the part of DataBytes not yet in
// an SST (MemstoreBytes is the size that triggers a flush).
func (r *Region) MemstoreUsedBytes() int64 {
	r.mu.RLock()
	defer r.mu.RUnlock()
	n := r.mem.ms.View().ApproximateBytes()
	for _, mt := range r.imm {
		n += mt.frozen.ApproximateBytes()
	}
	return n
}

// SplitKey returns the key that divides the region's files into halves of
// about equal bytes, from the files' block indexes (no data is read): the
// last key of the block at which the bytes, in key order across files,
// pass half. The right daughter starts at it. It is strictly inside the
// range, so both daughters are non-empty ranges; ErrCannotSplit when no
// such key exists. Flush first to count the memstore.
func (r *Region) SplitKey() ([]byte, error) {
	blocks := r.blocksInRange()
	slices.SortStableFunc(blocks, func(a, b blockWeight) int { return bytes.Compare(a.last, b.last) })
	var total int64
	for _, b := range blocks {
		total += b.bytes
	}
	// A candidate is a block's last key strictly inside the range and
	// above the smallest block's last key: the left daughter then holds
	// at least that key, the right one the candidate itself. The first
	// candidate at or past half wins; else the last before it.
	var acc int64
	best := -1
	for i, b := range blocks {
		acc += b.bytes
		if i == 0 || !r.inRange(b.last) || bytes.Equal(b.last, r.start) || bytes.Compare(b.last, blocks[0].last) <= 0 {
			continue
		}
		best = i
		if 2*acc >= total {
			break
		}
	}
	if best >= 0 {
		return bytes.Clone(blocks[best].last), nil
	}
	return nil, errorf(r.opts.Name, "%w: %d bytes in %d blocks have no key strictly inside the range that leaves data on both sides",
		ErrCannotSplit, total, len(blocks))
}

// PrepareSplit is steps 1–3 of a split: it flushes the memstore while
// writes continue (so the final flush is small), then stops the region's
// compactions and refuses every later write (ErrSplitting: retry at the
// daughters the region map names), and flushes what was acknowledged
// meanwhile. It returns the final manifest, which names every acknowledged
// write and which the daughters derive from. Reads continue.
//
// After PrepareSplit the region accepts no writes again: if the region map
// is then not committed, Close it and Open it again (its manifest and WAL
// hold everything), as after a crash at that point.
func (r *Region) PrepareSplit(ctx context.Context) (manifest.Manifest, error) {
	return r.prepareSuccessors(ctx, "splitting", nil)
}

// WritesStoppedAt is when the region began refusing writes for a release,
// split or merge (zero while it takes them): a split's or merge's
// unavailability counts from it, its final flush included.
func (r *Region) WritesStoppedAt() time.Time {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.writesStoppedAt
}

// PrepareMerge is PrepareSplit for each of two adjacent regions about to
// merge (docs/regions.md, section 3); start and end are the region's range
// in the region map. Two steps more:
//
//   - Before writes stop, if a file may hold keys outside the range (a
//     reference to an ancestor's file, whose other keys the sibling may
//     have deleted or rewritten since), a major compaction rewrites the
//     files into the region's own range, so the merged region, which
//     concatenates both parents' files, never sees them. Writes continue
//     meanwhile; merge candidates are small.
//   - A region created whole (its manifest records no range: the initial
//     regions, which the store routed to) records the range in its final
//     manifest, which the merged region derives from.
//
// The final manifest returned holds every acknowledged write, and only
// files within the range; as after PrepareSplit, the region takes no
// writes again.
func (r *Region) PrepareMerge(ctx context.Context, start, end []byte) (manifest.Manifest, error) {
	if start == nil {
		start = []byte{}
	}
	whole := len(r.start) == 0 && r.end == nil
	if !whole && (!bytes.Equal(r.start, start) || !bytes.Equal(r.end, end)) {
		return manifest.Manifest{}, errorf(r.opts.Name, "merging: the region covers [%q, %s), the region map says [%q, %s)",
			r.start, endString(r.end), start, endString(end))
	}
	final, err := r.prepareSuccessors(ctx, "merging", func() error {
		if outside := r.filesOutside(start, end); len(outside) == 0 {
			return nil
		}
		_, err := r.Compact(ctx, true)
		return err
	})
	if err != nil {
		return final, err
	}
	if outside := r.filesOutside(start, end); len(outside) > 0 {
		return final, errorf(r.opts.Name, "merging: files %v hold keys outside the region's range [%q, %s) after a major compaction",
			outside, start, endString(end))
	}
	if !whole {
		return final, nil
	}
	r.manifestMu.Lock()
	defer r.manifestMu.Unlock()
	r.mu.RLock()
	prev := r.manifest
	r.mu.RUnlock()
	next := prev.Clone()
	next.Start, next.End = bytes.Clone(start), bytes.Clone(end)
	if err := r.commitManifest(ctx, prev, &next); err != nil {
		return manifest.Manifest{}, errorf(r.opts.Name, "merging: recording the region's range: %w", err)
	}
	r.mu.Lock()
	r.manifest = next
	r.mu.Unlock()
	return next, nil
}

// filesOutside are the keys of the live files whose keys may lie outside
// [start, end).
func (r *Region) filesOutside(start, end []byte) []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	var out []string
	for _, f := range r.manifest.Files {
		if bytes.Compare(f.Smallest, start) < 0 || (end != nil && bytes.Compare(f.Largest, end) >= 0) {
			out = append(out, f.Key)
		}
	}
	return out
}

// prepareSuccessors is PrepareSplit, with what ("splitting", "merging")
// naming its errors and beforeStop, if set, run after the pre-flush while
// writes continue.
func (r *Region) prepareSuccessors(ctx context.Context, what string, beforeStop func() error) (manifest.Manifest, error) {
	if err := r.Flush(ctx); err != nil {
		return manifest.Manifest{}, errorf(r.opts.Name, "%s: pre-flush: %w", what, err)
	}
	if beforeStop != nil {
		if err := beforeStop(); err != nil {
			return manifest.Manifest{}, errorf(r.opts.Name, "%s: %w", what, err)
		}
	}
	r.stopCompactions(ErrReleasing)
	if err := r.flushStopping(ctx, true, true); err != nil {
		_ = r.Close()
		return manifest.Manifest{}, errorf(r.opts.Name, "%s: final flush: %w", what, err)
	}
	// Wait for a compaction that was installing (its one commit is not
	// cancelled) so the manifest returned is the region's last.
	r.compactMu.Lock()
	r.mu.RLock()
	m := r.manifest
	r.mu.RUnlock()
	r.compactMu.Unlock()
	return m, nil
}

// Retire is step 5 of a split or merge, once the region map naming the
// successors is committed: it closes the region, commits a manifest marked
// retired (no store claims it again; the map already says so) and removes
// its WAL segments, which hold nothing the final manifest lacks.
func (r *Region) Retire(ctx context.Context) error {
	err := r.shutdown(func() error {
		r.manifestMu.Lock()
		defer r.manifestMu.Unlock()
		prev := r.manifest
		next := prev.Clone()
		next.Released, next.Retired = true, true
		if err := r.commitManifest(ctx, prev, &next); err != nil {
			return err
		}
		r.mu.Lock()
		r.manifest = next
		r.mu.Unlock()
		return r.walDir.RemoveSegments()
	})
	if err != nil {
		return errorf(r.opts.Name, "retiring: %w", err)
	}
	return nil
}

// deriveClaim is Open's first manifest of a region made by a split or
// merge that has none: derived from its parents' final manifests.
func deriveClaim(ctx context.Context, opts Options) (manifest.Manifest, error) {
	df := opts.DeriveFrom
	parents := make([]manifest.Parent, 0, len(df.Parents))
	for _, p := range df.Parents {
		pm, err := manifest.LoadNumber(ctx, opts.Bucket.Prefixed(BucketPrefix(p.Name)), p.Manifest)
		if err != nil {
			return manifest.Manifest{}, fmt.Errorf("deriving from %s: %w", p.Name, err)
		}
		parents = append(parents, manifest.Parent{Name: p.Name, Manifest: pm})
	}
	return manifest.DeriveFrom(parents, df.Start, df.End)
}
