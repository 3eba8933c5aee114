package compaction

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/bellows-kv/bellows/storage-engine/iterator"
	"github.com/bellows-kv/bellows/storage-engine/kv"
	"github.com/bellows-kv/bellows/storage-engine/retention"
	"github.com/bellows-kv/bellows/storage-engine/sstable"
)

// Retention decides which old versions a compaction keeps (package
// retention has the rule). The zero value keeps every version.
type Retention struct {
	// MaxVersions keeps at most this many newest versions of a key
	// (tombstones count), and every version an open snapshot reads; a
	// read at an older timestamp is refused unless pinned. 0: no count
	// bound (GCTTL decides).
	MaxVersions int `json:"maxVersions"`
	// GCTTL, with MaxVersions 0, keeps this much history: every read at a
	// timestamp up to GCTTL old is exact, and a version superseded longer
	// ago than that is garbage unless a snapshot reads it. 0 keeps every
	// version.
	GCTTL time.Duration `json:"gcTTL,omitempty"`
}

// DropsVersions reports whether compactions under r may drop a version a
// read at an older timestamp needs (so such reads need a snapshot).
func (r Retention) DropsVersions() bool { return r.MaxVersions > 0 || r.GCTTL > 0 }

// Horizon is the newest timestamp a merge starting when the clock reads now
// may judge, given the newest timestamp it could judge (retention.Horizon);
// 0 judges nothing.
func (r Retention) Horizon(newest, now uint64) uint64 {
	return retention.Horizon(newest, now, r.MaxVersions, r.GCTTL)
}

// MergeOptions describe one merge.
type MergeOptions struct {
	// Major merges every file of the region: tombstones with nothing
	// retained below them can then be dropped.
	Major     bool
	Retention Retention
	// Snapshots are the read timestamps of open snapshots. For each, the
	// version it reads (the newest with timestamp ≤ snapshot) is kept.
	Snapshots []uint64
	// Horizon is the newest timestamp the merge judges (Retention.Horizon):
	// every version above it is kept. 0 is a job that names none (one
	// from a store older than gcTTL): every version is judged when
	// Retention.MaxVersions > 0, none otherwise, as such a store meant.
	Horizon uint64
}

// horizon is Horizon with its 0 resolved.
func (o MergeOptions) horizon() uint64 {
	if o.Horizon == 0 && o.Retention.MaxVersions > 0 {
		return kv.MaxTimestamp
	}
	return o.Horizon
}

// MergeStats counts what a merge did.
type MergeStats struct {
	InputVersions   uint64
	OutputVersions  uint64
	DroppedVersions uint64
	DroppedDeletes  uint64
	// DroppedExpired counts expiring versions dropped (expired, or
	// superseded like any version).
	DroppedExpired uint64
}

// Merge reads every version from in (in internal-key order), applies the
// retention rules and adds the survivors to w. It does not call w.Finish.
func Merge(ctx context.Context, in iterator.Iterator, opts MergeOptions, w *sstable.Writer) (MergeStats, error) {
	snaps := slices.Clone(opts.Snapshots)
	slices.Sort(snaps)
	slices.Reverse(snaps) // newest first, matching version order
	var st MergeStats
	var group, kept []version
	var keep []bool
	var tss []uint64
	var cur []byte
	// vals holds the group's values, copied: an input may reuse a block's
	// memory once it moves to the next (sstable.NewStreamingIter), and a
	// key's versions can span blocks.
	var vals []byte
	flush := func() error {
		for i := range group {
			group[i].key.UserKey = cur
			group[i].value = vals[group[i].at : group[i].at+group[i].n : group[i].at+group[i].n]
		}
		kept, keep, tss = retainInto(kept[:0], keep, tss, group, snaps, opts)
		st.DroppedVersions += uint64(len(group) - len(kept))
		st.DroppedDeletes += uint64(countDeletes(group) - countDeletes(kept))
		st.DroppedExpired += uint64(countExpiring(group) - countExpiring(kept))
		for _, v := range kept {
			if err := w.Add(v.key, v.value); err != nil {
				return err
			}
			st.OutputVersions++
		}
		group, vals = group[:0], vals[:0]
		return nil
	}
	n := 0
	for ok := in.First(); ok; ok = in.Next() {
		if n++; n%4096 == 0 {
			if err := ctx.Err(); err != nil {
				return st, err
			}
		}
		k := in.Key()
		if cur != nil && !bytes.Equal(cur, k.UserKey) {
			if err := flush(); err != nil {
				return st, err
			}
		}
		st.InputVersions++
		cur = append(cur[:0], k.UserKey...)
		// The group shares the key's copy in cur; its values are copied
		// into vals and sliced from it at flush (vals may grow meanwhile).
		v := in.Value()
		group = append(group, version{key: kv.InternalKey{UserKey: cur, TS: k.TS, Kind: k.Kind}, at: len(vals), n: len(v)})
		vals = append(vals, v...)
	}
	if err := in.Err(); err != nil {
		return st, fmt.Errorf("compaction: reading inputs: %w", err)
	}
	if len(group) > 0 {
		if err := flush(); err != nil {
			return st, err
		}
	}
	return st, nil
}

type version struct {
	key   kv.InternalKey
	value []byte
	// at and n locate value in the merge's copy of the group's values
	// until the group is flushed.
	at, n int
}

func countDeletes(vs []version) int {
	n := 0
	for _, v := range vs {
		if v.key.Kind == kv.KindDelete {
			n++
		}
	}
	return n
}

func countExpiring(vs []version) int {
	n := 0
	for _, v := range vs {
		if v.key.Kind == kv.KindSetExpiring {
			n++
		}
	}
	return n
}

// retainInto applies the retention rules (package retention) to one key's
// versions (newest first; snapsDesc newest first too), appending the
// survivors to out and reusing keep and tss, so a merge does not allocate
// per key. testdata/merge holds its cases.
func retainInto(out []version, keep []bool, tss []uint64, vs []version, snapsDesc []uint64, opts MergeOptions) ([]version, []bool, []uint64) {
	tss = tss[:0]
	for _, v := range vs {
		tss = append(tss, v.key.TS)
	}
	keep = retention.Mark(keep, tss, opts.Retention.MaxVersions, snapsDesc, opts.horizon())
	for i, v := range vs {
		if keep[i] {
			out = append(out, v)
		}
	}
	if opts.Major {
		// A tombstone with nothing retained below it reads the same as no
		// version at all, for every timestamp: drop it. So does a value
		// that expired at or below the horizon (every read it answered is
		// below the horizon, refused as too old) when no open snapshot
		// reads it (docs/expiry.md).
		// The job's own horizon: a job without one (0) judges no expiry,
		// though a count bound judges every version (horizon()).
		for len(out) > 0 && readsAsNothing(out[len(out)-1], opts.horizon(), opts.Horizon, snapsDesc) {
			out = out[:len(out)-1]
		}
	}
	return out, keep, tss
}

// readsAsNothing reports whether v, with no version retained below it,
// reads as no version at all at every timestamp a read or a watch may
// still ask for: a tombstone at or below judged (the merge's horizon
// resolved: a watch from below it is refused as too old, above it the
// delete is a change it delivers), or a version expired by horizon (the
// job's own) that no snapshot in snapsDesc reads live.
func readsAsNothing(v version, judged, horizon uint64, snapsDesc []uint64) bool {
	if v.key.Kind == kv.KindDelete {
		return v.key.TS <= judged
	}
	exp, ok := kv.Expiry(v.key.Kind, v.key.TS, v.value)
	if !ok || horizon == 0 || exp > horizon {
		return false
	}
	for _, s := range snapsDesc {
		if s >= v.key.TS && s < exp {
			return false
		}
	}
	return true
}
