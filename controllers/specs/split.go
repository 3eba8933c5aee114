package specs

// The size past which a cluster's regions split, and whether it keeps their
// compactions offloadable (docs/regions.md, "Split").

import (
	"fmt"

	kvapi "github.com/bellows-kv/bellows/api/v1alpha1"
	"github.com/bellows-kv/bellows/internal/contract"
)

// RegionSplit is the split size a cluster's stores run with (store
// --split-bytes) and where it comes from.
type RegionSplit struct {
	// Bytes: a region whose data passes it splits; 0 never splits.
	Bytes int64
	// Source says where Bytes comes from, for messages.
	Source string
}

// RegionSplitOf is the capacity model's rule for the split size:
//
//   - spec.regions.splitBytes when it is set (0 never splits);
//   - else, with a CompactionPool (the one compactionPoolRef names, nil when
//     there is none or it does not exist), half its worker cache m
//     (spec.cacheBytes / 2): a region's major compaction reads all of it
//     (b ≈ the region's bytes), a worker admits a job only if b ≤ m, and
//     with b ≤ m/2 it holds two at once (l = ⌊m/b⌋ ≥ 2). Never below
//     engine.memstore.bytes, or a region would split at every flush (and a
//     size under contract.MinMemstoreBytes would stop the store);
//   - else contract.DefaultSplitBytes.
//
// c must be defaulted (SetDefaults).
func RegionSplitOf(c *kvapi.KVCluster, pool *kvapi.CompactionPool) RegionSplit {
	if q := c.Spec.Regions.SplitBytes; q != nil {
		return RegionSplit{Bytes: q.Value(), Source: "regions.splitBytes"}
	}
	if pool == nil {
		return RegionSplit{Bytes: contract.DefaultSplitBytes, Source: "the default without a CompactionPool"}
	}
	m := pool.Spec.CacheBytes.Value()
	memstore := max(c.Spec.Engine.Memstore.Bytes.Value(), contract.MinMemstoreBytes)
	if m/2 < memstore {
		return RegionSplit{Bytes: memstore, Source: fmt.Sprintf("engine.memstore.bytes, as half the cacheBytes %s of CompactionPool %q is below one memstore",
			quantityString(m), pool.Name)}
	}
	return RegionSplit{Bytes: m / 2, Source: fmt.Sprintf("half the cacheBytes %s of CompactionPool %q", quantityString(m), pool.Name)}
}

// RegionsTooLargeForWorkers reports, when the split size lets a region grow
// into a major compaction larger than the pool's worker cache m (no worker
// admits it: it runs in the store, even under offload Required), why and
// what to do; tooLarge is false when the regions fit, when there is no pool
// (none referenced, or it does not exist) or when offload is Disabled.
func RegionsTooLargeForWorkers(c *kvapi.KVCluster, pool *kvapi.CompactionPool) (message string, tooLarge bool) {
	if pool == nil || c.Spec.Engine.Offload == kvapi.OffloadMode(contract.OffloadDisabled) {
		return "", false
	}
	split := RegionSplitOf(c, pool)
	m := pool.Spec.CacheBytes.Value()
	if split.Bytes > 0 && split.Bytes <= m {
		return "", false
	}
	fix := fmt.Sprintf("set regions.splitBytes to at most %s (m/2), or leave it out to follow the pool", quantityString(max(m/2, 0)))
	if split.Source != "regions.splitBytes" {
		fix = fmt.Sprintf("raise the pool's cacheBytes to at least %s (twice the split size)", quantityString(2*split.Bytes))
	}
	if split.Bytes == 0 {
		return fmt.Sprintf("regions.splitBytes 0 never splits: a region can grow past the worker cache m = %s of CompactionPool %q (spec.cacheBytes) "+
			"into a major compaction that no worker admits, which then runs in the store, offload Required or not (bellows_compactions_oversized_total); %s",
			quantityString(m), pool.Name, fix), true
	}
	return fmt.Sprintf("regions split at %s (%s), more than the worker cache m = %s of CompactionPool %q (spec.cacheBytes): "+
		"a region can grow into a major compaction that no worker admits, which then runs in the store, offload Required or not (bellows_compactions_oversized_total); %s",
		quantityString(split.Bytes), split.Source, quantityString(m), pool.Name, fix), true
}
