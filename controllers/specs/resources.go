package specs

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	kvapi "github.com/bellows-kv/bellows/api/v1alpha1"
	"github.com/bellows-kv/bellows/internal/contract"
)

// StoreMemory is what a storage pod's engine settings imply it uses: the
// block cache (which holds the SST index and filter partitions too), a full
// memstore and the pinned top-level indexes of a region at its split size
// for each region it serves, and the runtime (docs/memory.md).
//
// The pod template's numbers must not depend on the replica count: a
// replica change would then change the template and restart every store,
// where today it only moves the regions whose owner changes. So Floor (the
// request) counts one region, the least a serving pod holds, and Ceiling
// (the limit) counts every region, the most one pod can be handed. Need,
// which the operator checks explicit limits against, counts the regions a
// pod serves at the current replica count (⌈regions/replicas⌉).
type StoreMemory struct {
	Floor, Need, Ceiling   int64
	Regions, RegionsPerPod int32
	// PinnedPerRegion is the most a region at the split size pins outside
	// the block cache; 0 when regions never split (their data, and so
	// this, has no bound the settings give).
	PinnedPerRegion int64
}

// StoreMemoryOf computes a cluster's StoreMemory from its (defaulted) spec
// and the CompactionPool it names (nil: none), which sets the split size.
func StoreMemoryOf(c *kvapi.KVCluster, pool *kvapi.CompactionPool) StoreMemory {
	regions := max(c.Spec.Regions.RegionCount(), 1)
	m := StoreMemory{Regions: regions, RegionsPerPod: ceilDiv(regions, max(c.Spec.Replicas, 1))}
	m.PinnedPerRegion = PinnedIndexBytes(RegionSplitOf(c, pool).Bytes)
	base := c.Spec.Engine.BlockCacheBytes.Value() + contract.StoreMemoryOverhead
	perRegion := c.Spec.Engine.Memstore.Bytes.Value() + m.PinnedPerRegion
	m.Floor = base + perRegion
	m.Need = base + int64(m.RegionsPerPod)*perRegion
	m.Ceiling = base + int64(regions)*perRegion
	return m
}

// PinnedIndexBytes is the most memory SST data of dataBytes pins outside
// the block cache, rounded up to a MiB (so limits stay in MiB).
func PinnedIndexBytes(dataBytes int64) int64 {
	const gib, mib = 1 << 30, 1 << 20
	n := dataBytes/gib*contract.PinnedIndexBytesPerGiB + (dataBytes%gib*contract.PinnedIndexBytesPerGiB+gib-1)/gib
	return (n + mib - 1) / mib * mib
}

// Explain says what Need is made of, for messages.
func (m StoreMemory) Explain(c *kvapi.KVCluster) string {
	pinned := "indexes pinned " + quantityString(m.PinnedPerRegion)
	if m.PinnedPerRegion == 0 {
		pinned = "indexes pinned uncounted (regions never split)"
	}
	return fmt.Sprintf("block cache %s + %d regions × (memstore %s + %s) + runtime %s = %s",
		quantityString(c.Spec.Engine.BlockCacheBytes.Value()), m.RegionsPerPod,
		quantityString(c.Spec.Engine.Memstore.Bytes.Value()), pinned, quantityString(contract.StoreMemoryOverhead),
		quantityString(m.Need))
}

func ceilDiv(a, b int32) int32 { return (a + b - 1) / b }

// quantityString renders n bytes as the API server would store it.
func quantityString(n int64) string {
	q := resource.NewQuantity(n, resource.BinarySI)
	return q.String()
}

// ResourcesUnset reports whether the user wrote no resources at all (the
// operator then derives them).
func ResourcesUnset(r corev1.ResourceRequirements) bool {
	return len(r.Requests) == 0 && len(r.Limits) == 0 && len(r.Claims) == 0
}

// StoreResources is the store container's resources: the user's when they
// wrote any, else a CPU request and StoreMemory's Floor as the memory
// request and Ceiling as the limit (Burstable; no CPU limit, so a busy store
// is never throttled).
func StoreResources(c *kvapi.KVCluster, pool *kvapi.CompactionPool) corev1.ResourceRequirements {
	if !ResourcesUnset(c.Spec.Resources) {
		return c.Spec.Resources
	}
	m := StoreMemoryOf(c, pool)
	return corev1.ResourceRequirements{
		Requests: corev1.ResourceList{
			corev1.ResourceCPU:    resource.MustParse(contract.DefaultStoreCPURequest),
			corev1.ResourceMemory: *resource.NewQuantity(m.Floor, resource.BinarySI),
		},
		Limits: corev1.ResourceList{corev1.ResourceMemory: *resource.NewQuantity(m.Ceiling, resource.BinarySI)},
	}
}

// StoreMemoryShortfall reports, when the user's resources cap a store's
// memory below what its engine settings imply, by how much and why; ok is
// false when the memory fits (or nothing caps it).
func StoreMemoryShortfall(c *kvapi.KVCluster, pool *kvapi.CompactionPool) (message string, short bool) {
	capQ, ok := c.Spec.Resources.Limits[corev1.ResourceMemory]
	if !ok {
		return "", false
	}
	m := StoreMemoryOf(c, pool)
	if capQ.Value() >= m.Need {
		return "", false
	}
	return fmt.Sprintf("resources.limits.memory %s is below what the engine settings need per storage pod (%s): "+
		"the pods will be OOM-killed once their memstores and block cache fill; raise the limit or lower "+
		"engine.blockCacheBytes or engine.memstore.bytes", capQ.String(), m.Explain(c)), true
}

// WorkerMemory is what a worker uses: its output cache m and the working
// memory of the merges.
func WorkerMemory(p *kvapi.CompactionPool) int64 {
	return p.Spec.CacheBytes.Value() + contract.WorkerMemoryOverhead
}

// WorkerResources is the compactor container's resources: the user's when
// they wrote any, else a CPU request and WorkerMemory as both memory request
// and limit (a worker's cache is bounded by m, so its use does not burst).
func WorkerResources(p *kvapi.CompactionPool) corev1.ResourceRequirements {
	if !ResourcesUnset(p.Spec.Resources) {
		return p.Spec.Resources
	}
	mem := *resource.NewQuantity(WorkerMemory(p), resource.BinarySI)
	return corev1.ResourceRequirements{
		Requests: corev1.ResourceList{
			corev1.ResourceCPU:    resource.MustParse(contract.DefaultWorkerCPURequest),
			corev1.ResourceMemory: mem,
		},
		Limits: corev1.ResourceList{corev1.ResourceMemory: mem},
	}
}
