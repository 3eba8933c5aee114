package specs

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	kvapi "github.com/bellows-kv/bellows/api/v1alpha1"
	"github.com/bellows-kv/bellows/internal/contract"
)

// poolWithCache is referencedPool with m = cache.
func poolWithCache(cache string) *kvapi.CompactionPool {
	p := referencedPool()
	p.Spec.CacheBytes = resource.MustParse(cache)
	return p
}

// TestRegionSplitOf: the capacity model's rule (docs/regions.md): the
// cluster's splitBytes when set, 0 included; else m/2 of the referenced
// pool, never below one memstore; else the default without a pool.
func TestRegionSplitOf(t *testing.T) {
	withSplit := func(q string) *kvapi.KVCluster {
		c := defaultedCluster()
		c.Spec.Regions.SplitBytes = ptr.To(resource.MustParse(q))
		return c
	}
	smallMemstore := defaultedCluster()
	smallMemstore.Spec.Engine.Memstore.Bytes = resource.MustParse("16Mi")
	for _, tc := range []struct {
		name   string
		c      *kvapi.KVCluster
		pool   *kvapi.CompactionPool
		want   int64
		source string
	}{
		{"no pool: the contract's default", defaultedCluster(), nil, contract.DefaultSplitBytes, "the default without a CompactionPool"},
		{"the default pool: m/2", defaultedCluster(), referencedPool(), contract.DefaultWorkerCacheBytes / 2, `half the cacheBytes 6Gi of CompactionPool "pool"`},
		{"a 1Gi pool: m/2 is the contract's default", defaultedCluster(), poolWithCache("1Gi"), 512 << 20, `half the cacheBytes 1Gi of CompactionPool "pool"`},
		{"an odd m in decimal units", defaultedCluster(), poolWithCache("3G"), 1_500_000_000, `half the cacheBytes`},
		{"m/2 below one memstore: one memstore", defaultedCluster(), poolWithCache("200Mi"), contract.DefaultMemstoreBytes, "engine.memstore.bytes, as half the cacheBytes 200Mi"},
		{"m/2 below a small memstore", smallMemstore, poolWithCache("20Mi"), 16 << 20, "engine.memstore.bytes"},
		{"splitBytes set wins over the pool", withSplit("1Gi"), referencedPool(), 1 << 30, "regions.splitBytes"},
		{"splitBytes set without a pool", withSplit("768Mi"), nil, 768 << 20, "regions.splitBytes"},
		{"splitBytes 0 never splits", withSplit("0"), referencedPool(), 0, "regions.splitBytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := RegionSplitOf(tc.c, tc.pool)
			if got.Bytes != tc.want || !strings.Contains(got.Source, tc.source) {
				t.Errorf("RegionSplitOf = %d (%s), want %d (%s)", got.Bytes, got.Source, tc.want, tc.source)
			}
		})
	}
}

// TestDefaultSplitIsHalfTheDefaultWorkerCache: the contract's default
// without a pool is the rule applied to a 1 GiB worker cache, and the rule
// with a default pool keeps a region's major compaction offloadable twice
// over (l = ⌊m/b⌋ = 2).
func TestDefaultSplitIsHalfTheDefaultWorkerCache(t *testing.T) {
	if contract.DefaultSplitBytes != (1<<30)/2 {
		t.Errorf("contract.DefaultSplitBytes %d, want half of 1Gi", contract.DefaultSplitBytes)
	}
	b := RegionSplitOf(defaultedCluster(), referencedPool()).Bytes
	if l := contract.DefaultWorkerCacheBytes / b; l != 2 {
		t.Errorf("⌊m/b⌋ = %d with the default pool, want 2", l)
	}
}

// TestRegionsTooLargeForWorkers: a split size above the pool's m (or none
// at all) is reported with both values and a fix; within m, without a pool
// or with offload Disabled it is not.
func TestRegionsTooLargeForWorkers(t *testing.T) {
	cluster := func(split string, offload kvapi.OffloadMode) *kvapi.KVCluster {
		c := defaultedCluster()
		if split != "" {
			c.Spec.Regions.SplitBytes = ptr.To(resource.MustParse(split))
		}
		if offload != "" {
			c.Spec.Engine.Offload = offload
		}
		return c
	}
	for _, tc := range []struct {
		name string
		c    *kvapi.KVCluster
		pool *kvapi.CompactionPool
		want []string // the message's parts; none: fits
	}{
		{"the default: m/2", cluster("", ""), referencedPool(), nil},
		{"exactly m", cluster("6Gi", ""), referencedPool(), nil},
		{"no pool", cluster("100Gi", ""), nil, nil},
		{"offload disabled", cluster("100Gi", "Disabled"), referencedPool(), nil},
		{"above m", cluster("8Gi", ""), referencedPool(), []string{
			"regions split at 8Gi (regions.splitBytes)", `worker cache m = 6Gi of CompactionPool "pool"`,
			"set regions.splitBytes to at most 3Gi (m/2), or leave it out to follow the pool"}},
		{"above m, offload Required", cluster("8Gi", "Required"), referencedPool(), []string{"regions split at 8Gi", "offload Required or not"}},
		{"0 never splits", cluster("0", ""), referencedPool(), []string{
			"regions.splitBytes 0 never splits", "m = 6Gi", "set regions.splitBytes to at most 3Gi (m/2)"}},
		// A pool smaller than two memstores: the split size is one
		// memstore, above m; only a larger pool fixes it.
		{"a pool below one memstore", cluster("", ""), poolWithCache("100Mi"), []string{
			"regions split at 128Mi (engine.memstore.bytes", "m = 100Mi", "raise the pool's cacheBytes to at least 256Mi"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			msg, tooLarge := RegionsTooLargeForWorkers(tc.c, tc.pool)
			if tooLarge != (len(tc.want) > 0) {
				t.Fatalf("tooLarge = %v (%q), want %v", tooLarge, msg, len(tc.want) > 0)
			}
			for _, w := range tc.want {
				if !strings.Contains(msg, w) {
					t.Errorf("message lacks %q:\n%s", w, msg)
				}
			}
		})
	}
}
