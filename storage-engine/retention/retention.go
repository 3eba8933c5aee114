// Package retention decides which versions of one key survive a merge: the
// disk compaction's (storage-engine/compaction) and the in-memory
// compaction's (storage-engine/memstore) use the same rules, so a version
// that one of them keeps the other keeps too.
package retention

import "slices"

// Mark sets keep[i] for each version of one key, given their timestamps
// newest first in tss, and returns keep (grown to len(tss)). A version is
// kept when it is among the newest maxVersions (0 keeps every version;
// tombstones count), or when it is the version an open snapshot reads (the
// newest with timestamp ≤ the snapshot; snapsDesc holds the snapshots'
// timestamps newest first), or when its timestamp is above horizon: a merge
// that cannot know every read in flight passes the visible timestamp it
// started at as the horizon (and as a snapshot), so a version newer than
// what was visible then is never judged; kv.MaxTimestamp judges all.
func Mark(keep []bool, tss []uint64, maxVersions int, snapsDesc []uint64, horizon uint64) []bool {
	keep = slices.Grow(keep[:0], len(tss))[:len(tss)]
	for i, ts := range tss {
		keep[i] = maxVersions == 0 || i < maxVersions || ts > horizon
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
