package specs

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// TestStoreResourcesFollowTheEngineSettings: a cluster without resources
// requests its block cache, one region's memstore and pinned indexes and
// the runtime, and is limited to the block cache, every region's memstore
// and pinned indexes and the runtime.
func TestStoreResourcesFollowTheEngineSettings(t *testing.T) {
	c := defaultedCluster() // 7 regions, 3 replicas, 1Gi cache, 128Mi memstores, 512Mi split (no pool): 1Mi pinned
	r := StoreResources(c, nil)
	mi := func(n int64) int64 { return n << 20 }
	if got, want := r.Requests.Memory().Value(), mi(1024+128+1+256); got != want {
		t.Errorf("memory request %d, want %d (cache + one memstore and pinned index + runtime)", got, want)
	}
	if got, want := r.Limits.Memory().Value(), mi(1024+7*(128+1)+256); got != want {
		t.Errorf("memory limit %d, want %d (cache + 7 memstores and pinned indexes + runtime)", got, want)
	}
	// A pool's larger split size pins more per region.
	pool := defaultedPool()
	pool.Spec.CacheBytes = resource.MustParse("8Gi") // split 4Gi: 4Mi pinned
	if lim := StoreResources(c, pool).Limits; lim.Memory().Value() != mi(1024+7*(128+4)+256) {
		t.Errorf("memory limit with an 8Gi pool %d, want %d", lim.Memory().Value(), mi(1024+7*(128+4)+256))
	}
	if r.Requests.Cpu().IsZero() || !r.Limits.Cpu().IsZero() {
		t.Errorf("cpu: request %v, limit %v; want a request and no limit", r.Requests.Cpu(), r.Limits.Cpu())
	}
	c.Spec.Engine.BlockCacheBytes = resource.MustParse("4Gi")
	if got := StoreResources(c, nil).Requests[corev1.ResourceMemory]; got.Value() != mi(4096+128+1+256) {
		t.Errorf("memory request %s does not follow a larger block cache", got.String())
	}

	// What the user writes is used as written.
	c.Spec.Resources = corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("3")}}
	if got := StoreResources(c, nil); !got.Limits.Memory().IsZero() || got.Requests.Cpu().String() != "3" {
		t.Errorf("explicit resources changed: %v", got)
	}
}

func TestStoreMemoryShortfall(t *testing.T) {
	c := defaultedCluster() // 7 regions over 3 replicas: 3 regions per pod
	if msg, short := StoreMemoryShortfall(c, nil); short {
		t.Errorf("no limit, but a shortfall: %s", msg)
	}
	// 1Gi + 3 × (128Mi + 1Mi) + 256Mi = 1667Mi are needed.
	c.Spec.Resources.Limits = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1600Mi")}
	msg, short := StoreMemoryShortfall(c, nil)
	if !short {
		t.Fatal("a 1600Mi limit holds 1667Mi")
	}
	for _, want := range []string{"1600Mi", "3 regions", "128Mi", "indexes pinned 1Mi", "1667Mi", "raise the limit"} {
		if !strings.Contains(msg, want) {
			t.Errorf("message %q lacks %q", msg, want)
		}
	}
	c.Spec.Resources.Limits = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1667Mi")}
	if msg, short := StoreMemoryShortfall(c, nil); short {
		t.Errorf("a limit equal to the need is reported: %s", msg)
	}
	// More replicas, fewer regions per pod: the same limit now fits.
	c.Spec.Resources.Limits = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1600Mi")}
	c.Spec.Replicas = 7
	if msg, short := StoreMemoryShortfall(c, nil); short {
		t.Errorf("one region per pod needs 1409Mi, but: %s", msg)
	}
	// Regions that never split have no bound on their pinned indexes: the
	// message says they are not counted.
	zero := resource.MustParse("0")
	c.Spec.Regions.SplitBytes = &zero
	c.Spec.Replicas = 3
	if msg, short := StoreMemoryShortfall(c, nil); !short || !strings.Contains(msg, "indexes pinned uncounted (regions never split)") {
		t.Errorf("split 0: %v %s", short, msg)
	}
}

func TestWorkerResourcesHoldTheCache(t *testing.T) {
	p := defaultedPool()
	p.Spec.CacheBytes = resource.MustParse("1Gi")
	r := WorkerResources(p)
	if got, want := r.Requests.Memory().Value(), int64(1280<<20); got != want || r.Limits.Memory().Value() != want {
		t.Errorf("memory request %d limit %d, want %d (m + working memory)", got, r.Limits.Memory().Value(), want)
	}
	p.Spec.Resources = corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("3Gi")}}
	if got := WorkerResources(p); got.Limits.Memory().String() != "3Gi" || len(got.Requests) != 0 {
		t.Errorf("explicit resources changed: %v", got)
	}
}

func TestPinnedIndexBytesRoundUpToAMiB(t *testing.T) {
	for data, want := range map[int64]int64{0: 0, 1: 1 << 20, 512 << 20: 1 << 20, 1 << 30: 1 << 20, 3 << 30: 3 << 20, 3<<30 + 1: 4 << 20} {
		if got := PinnedIndexBytes(data); got != want {
			t.Errorf("PinnedIndexBytes(%d) = %d, want %d", data, got, want)
		}
	}
}
