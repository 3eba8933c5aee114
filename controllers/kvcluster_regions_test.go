package controllers

import (
	"context"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kvapi "github.com/bellows-kv/bellows/api/v1alpha1"
	"github.com/bellows-kv/bellows/internal/contract"
)

// TestRegionsTooLargeForWorkersIsReported: a split size above the pool's
// worker cache m sets RegionsFitWorkers=False with both values and the fix,
// and one Warning event; the stores still get the size asked for. Raising
// the pool's cache (a change of the pool, not of the cluster) clears it.
func TestRegionsTooLargeForWorkersIsReported(t *testing.T) {
	g := NewWithT(t)
	g.SetDefaultEventuallyTimeout(eventually)
	g.SetDefaultEventuallyPollingInterval(poll)
	ctx := context.Background()
	ns := newNamespace(t)

	pool := validPool(ns, "small")
	pool.Spec.CacheBytes = resourceMust("2Gi")
	pool.Spec.Autoscaling.Mode = kvapi.AutoscalingDisabled
	g.Expect(k8sClient.Create(ctx, pool)).To(Succeed())
	c := validCluster(ns, "big-regions")
	c.Spec.CompactionPoolRef = &kvapi.CompactionPoolReference{Name: pool.Name}
	c.Spec.Regions.SplitBytes = ptr.To(resourceMust("4Gi"))
	g.Expect(k8sClient.Create(ctx, c)).To(Succeed())
	key := client.ObjectKeyFromObject(c)

	g.Eventually(func(g Gomega) {
		got := &kvapi.KVCluster{}
		g.Expect(k8sClient.Get(ctx, key, got)).To(Succeed())
		cond := condition(got.Status.Conditions, kvapi.ConditionRegionsFitWorkers)
		g.Expect(cond.Status).To(Equal(metav1.ConditionFalse))
		g.Expect(cond.Reason).To(Equal(kvapi.ReasonRegionsTooLargeForWorkers))
		g.Expect(cond.ObservedGeneration).To(Equal(got.Generation))
		g.Expect(cond.Message).To(And(
			ContainSubstring("regions split at 4Gi (regions.splitBytes)"),
			ContainSubstring(`worker cache m = 2Gi of CompactionPool "small"`),
			ContainSubstring("set regions.splitBytes to at most 1Gi (m/2), or leave it out to follow the pool")))
		g.Expect(hasEvent(eventsFor(g, ns, c.Name), corev1.EventTypeWarning, kvapi.ReasonRegionsTooLargeForWorkers, "m = 2Gi")).To(BeTrue())
	}).Should(Succeed())
	// A warning, not a refusal: the stores split at the size asked for.
	sts := &appsv1.StatefulSet{}
	g.Expect(k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: c.StatefulSetName()}, sts)).To(Succeed())
	g.Expect(sts.Spec.Template.Spec.Containers[0].Args).To(ContainElements(
		contract.Arg(contract.FlagSplitBytes, int64(4<<30)), contract.Arg(contract.FlagSplitQPS, 0)))

	// The pool grows: the cluster is re-examined (it watches the pool).
	g.Eventually(func() error {
		got := &kvapi.CompactionPool{}
		if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(pool), got); err != nil {
			return err
		}
		got.Spec.CacheBytes = resourceMust("8Gi")
		return k8sClient.Update(ctx, got)
	}).Should(Succeed())
	g.Eventually(func(g Gomega) {
		got := &kvapi.KVCluster{}
		g.Expect(k8sClient.Get(ctx, key, got)).To(Succeed())
		cond := condition(got.Status.Conditions, kvapi.ConditionRegionsFitWorkers)
		g.Expect(cond.Status).To(Equal(metav1.ConditionTrue))
		g.Expect(cond.Reason).To(Equal(kvapi.ReasonAsExpected))
		g.Expect(cond.Message).To(ContainSubstring(`regions split at 4Gi (regions.splitBytes), within the worker cache m = 8Gi of CompactionPool "small"`))
	}).Should(Succeed())
	var warnings int
	for _, e := range eventsFor(g, ns, c.Name) {
		if e.Reason == kvapi.ReasonRegionsTooLargeForWorkers {
			warnings++
		}
	}
	g.Expect(warnings).To(Equal(1), "one event for one message, not one per pass")
}

// TestRegionSplitFollowsThePool: without splitBytes the stores split at half
// the referenced pool's cache; without a pool at the contract's default; and
// the condition says which.
func TestRegionSplitFollowsThePool(t *testing.T) {
	g := NewWithT(t)
	g.SetDefaultEventuallyTimeout(eventually)
	g.SetDefaultEventuallyPollingInterval(poll)
	ctx := context.Background()
	ns := newNamespace(t)

	pool := validPool(ns, "workers")
	pool.Spec.CacheBytes = resourceMust("3Gi")
	pool.Spec.Autoscaling.Mode = kvapi.AutoscalingDisabled
	g.Expect(k8sClient.Create(ctx, pool)).To(Succeed())
	withPool := validCluster(ns, "with-pool")
	withPool.Spec.CompactionPoolRef = &kvapi.CompactionPoolReference{Name: pool.Name}
	withPool.Spec.Regions.SplitQPS = ptr.To(int32(2500))
	g.Expect(k8sClient.Create(ctx, withPool)).To(Succeed())
	alone := validCluster(ns, "alone")
	g.Expect(k8sClient.Create(ctx, alone)).To(Succeed())

	for _, tc := range []struct {
		c      *kvapi.KVCluster
		args   []string
		reason string
		msg    string
	}{
		{withPool, []string{"--split-bytes=1610612736", "--split-qps=2500"}, kvapi.ReasonAsExpected,
			`regions split at 1536Mi (half the cacheBytes 3Gi of CompactionPool "workers"), within the worker cache m = 3Gi of CompactionPool "workers"`},
		{alone, []string{"--split-bytes=536870912", "--split-qps=0"}, kvapi.ReasonNoCompactionPool,
			"no compactionPoolRef: compactions run in the stores; regions split at 512Mi (the default without a CompactionPool)"},
	} {
		g.Eventually(func(g Gomega) {
			sts := &appsv1.StatefulSet{}
			g.Expect(k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: tc.c.StatefulSetName()}, sts)).To(Succeed())
			g.Expect(sts.Spec.Template.Spec.Containers[0].Args).To(ContainElements(tc.args))
			got := &kvapi.KVCluster{}
			g.Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(tc.c), got)).To(Succeed())
			cond := condition(got.Status.Conditions, kvapi.ConditionRegionsFitWorkers)
			g.Expect(cond.Status).To(Equal(metav1.ConditionTrue), "%s: %+v", tc.c.Name, cond)
			g.Expect(cond.Reason).To(Equal(tc.reason))
			g.Expect(cond.Message).To(Equal(tc.msg))
		}).Should(Succeed())
	}
}

// TestRegionsConditionFromThePass: the step and the status without an API
// server: each case's condition, one event per message (a pass that finds
// the same message in the status announces nothing), and a pass stopped
// before the check keeps the condition it found.
func TestRegionsConditionFromThePass(t *testing.T) {
	pool := validPool("ns", "workers")
	pool.Spec.CacheBytes = resourceMust("2Gi")
	pool.SetDefaults()
	cluster := func(split string, ref bool, offload kvapi.OffloadMode) *kvapi.KVCluster {
		c := validCluster("ns", "kv")
		c.Generation = 3
		if split != "" {
			c.Spec.Regions.SplitBytes = ptr.To(resourceMust(split))
		}
		if ref {
			c.Spec.CompactionPoolRef = &kvapi.CompactionPoolReference{Name: pool.Name}
		}
		c.Spec.Engine.Offload = offload
		c.SetDefaults()
		return c
	}
	for _, tc := range []struct {
		name           string
		c              *kvapi.KVCluster
		pool           *kvapi.CompactionPool
		status         metav1.ConditionStatus
		reason, msg    string
		warningsIssued int
	}{
		{"fits", cluster("", true, ""), pool, metav1.ConditionTrue, kvapi.ReasonAsExpected,
			`regions split at 1Gi (half the cacheBytes 2Gi of CompactionPool "workers"), within the worker cache m = 2Gi`, 0},
		{"too large", cluster("3Gi", true, ""), pool, metav1.ConditionFalse, kvapi.ReasonRegionsTooLargeForWorkers,
			`regions split at 3Gi (regions.splitBytes), more than the worker cache m = 2Gi of CompactionPool "workers"`, 1},
		{"never splits", cluster("0", true, ""), pool, metav1.ConditionFalse, kvapi.ReasonRegionsTooLargeForWorkers,
			"regions.splitBytes 0 never splits", 1},
		{"no pool", cluster("3Gi", false, ""), nil, metav1.ConditionTrue, kvapi.ReasonNoCompactionPool,
			"no compactionPoolRef: compactions run in the stores; regions split at 3Gi (regions.splitBytes)", 0},
		{"pool missing", cluster("", true, ""), nil, metav1.ConditionUnknown, kvapi.ReasonCompactionPoolMissing,
			`CompactionPool "workers" does not exist, so its worker cache is unknown; regions split at 512Mi (the default without a CompactionPool)`, 0},
		{"offload disabled", cluster("3Gi", true, "Disabled"), pool, metav1.ConditionTrue, kvapi.ReasonOffloadDisabled,
			"engine.offload is Disabled: compactions run in the stores; regions split at 3Gi", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := events.NewFakeRecorder(10)
			r := &KVClusterReconciler{Recorder: rec}
			pass := func(orig *kvapi.KVCluster) *kvPass {
				p := &kvPass{orig: orig, cluster: orig.DeepCopy(), pool: tc.pool, poolFound: tc.pool != nil || orig.Spec.CompactionPoolRef == nil}
				if res := r.checkRegionSplit(context.Background(), p); res.Err() != nil {
					t.Fatal(res.Err())
				}
				regionsCondition(p)
				return p
			}
			p := pass(tc.c)
			cond := condition(p.cluster.Status.Conditions, kvapi.ConditionRegionsFitWorkers)
			if cond.Status != tc.status || cond.Reason != tc.reason || !strings.HasPrefix(cond.Message, tc.msg) || cond.ObservedGeneration != 3 {
				t.Errorf("condition %+v\nwant %s %s %q…", cond, tc.status, tc.reason, tc.msg)
			}
			evs := drain(rec)
			if len(evs) != tc.warningsIssued {
				t.Fatalf("events %q, want %d", evs, tc.warningsIssued)
			}
			for _, e := range evs {
				if !strings.Contains(e, "Warning "+kvapi.ReasonRegionsTooLargeForWorkers) {
					t.Errorf("event %q", e)
				}
			}
			// The next pass reads the status this one wrote: no new event.
			pass(p.cluster)
			if evs := drain(rec); len(evs) != 0 {
				t.Errorf("a second pass with the same message announced %q", evs)
			}
		})
	}
	// A pass that stopped before the check leaves the condition alone.
	c := cluster("3Gi", true, "")
	setCondition(&c.Status.Conditions, 2, kvapi.ConditionRegionsFitWorkers, false, kvapi.ReasonRegionsTooLargeForWorkers, "earlier")
	p := &kvPass{orig: c, cluster: c.DeepCopy()}
	regionsCondition(p)
	if cond := condition(p.cluster.Status.Conditions, kvapi.ConditionRegionsFitWorkers); cond.Message != "earlier" || cond.ObservedGeneration != 2 {
		t.Errorf("an unchecked pass changed the condition: %+v", cond)
	}
}
