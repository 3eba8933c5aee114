// Package retention decides which versions of one key survive a merge: the
// disk compaction's (storage-engine/compaction) and the in-memory
// compaction's (storage-engine/memstore) use the same rules, so a version
// that one of them keeps the other keeps too.
//
// The rule is a garbage-collection horizon, as TiKV's and CockroachDB's MVCC
// GC have it: a merge judges only the versions at or below its horizon, and
// of those keeps the newest (what a read at the horizon sees), the one each
// open snapshot reads, and, with a count bound, the newest maxVersions.
// Every version above the horizon stays. So every read at or above the
// horizon, and every read at a snapshot, sees what it saw before the merge;
// a read below the horizon is refused as too old by the region (exactFrom),
// never answered from what is left.
package retention

import (
	"slices"
	"time"
)

// Mark sets keep[i] for each version of one key, given their timestamps
// newest first in tss, and returns keep (grown to len(tss)). A version is
// kept when its timestamp is above horizon (not judged), or it is the
// newest at or below horizon (a read at the horizon sees it), or it is the
// version an open snapshot reads (the newest with timestamp ≤ the
// snapshot; snapsDesc holds the snapshots' timestamps newest first), or it
// is among the newest maxVersions (tombstones count; 0: no count bound).
// A horizon of 0 judges nothing (every version is kept); kv.MaxTimestamp
// judges all.
func Mark(keep []bool, tss []uint64, maxVersions int, snapsDesc []uint64, horizon uint64) []bool {
	keep = slices.Grow(keep[:0], len(tss))[:len(tss)]
	newestJudged := true
	for i, ts := range tss {
		switch {
		case ts > horizon:
			keep[i] = true
		case newestJudged:
			keep[i], newestJudged = true, false
		default:
			keep[i] = maxVersions > 0 && i < maxVersions
		}
	}
	j := 0
	for _, s := range snapsDesc {
		for j < len(tss) && tss[j] > s {
			j++
		}
		if j < len(tss) {
			keep[j] = true
		}
	}
	return keep
}

// Horizon is the newest timestamp a merge starting now may judge, for a
// region whose newest visible timestamp (or, for a disk compaction, the
// newest version of its inputs) is visible and whose clock reads now
// (nanoseconds since the epoch, as the region's timestamps are):
//
//   - maxVersions > 0 bounds versions by count: every version is judged
//     (the horizon is visible) and a read below it is exact only at a
//     snapshot; gcTTL does not apply.
//   - otherwise gcTTL > 0 keeps a window of history: the horizon is
//     now − gcTTL (at most visible), so every read of the last gcTTL is
//     exact and a version superseded longer ago is garbage.
//   - gcTTL ≤ 0 (and maxVersions 0) keeps every version: 0, nothing judged.
func Horizon(visible, now uint64, maxVersions int, gcTTL time.Duration) uint64 {
	switch {
	case maxVersions > 0:
		return visible
	case gcTTL <= 0 || now <= uint64(gcTTL):
		return 0
	}
	return min(visible, now-uint64(gcTTL))
}
