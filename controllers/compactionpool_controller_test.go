package controllers

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kvapi "github.com/bellows-kv/bellows/api/v1alpha1"
	"github.com/bellows-kv/bellows/autoscaler"
	"github.com/bellows-kv/bellows/controllers/specs"
	"github.com/bellows-kv/bellows/internal/contract"
)

// paperObservation is the §6.3 example as metrics: c = 20 MB/s, w = 8 MB/s,
// b = 4 GB, and 10 regions each requesting one compaction per hour.
func paperObservation(regions float64, perRegionPerHour float64) autoscaler.Observation {
	return autoscaler.Observation{
		CompactionRate: 20e6, TransferRate: 8e6, CompactionSize: 4e9,
		RequestRate: regions * perRegionPerHour / 3600, DemandMeasured: true,
		InflightJobs: map[string]float64{},
	}
}

// poolAndCluster creates a pool with m = 6 GB and a KVCluster of `regions`
// regions that references it.
func poolAndCluster(t *testing.T, g *WithT, ns string, mode kvapi.AutoscalingMode, regions int32) *kvapi.CompactionPool {
	t.Helper()
	ctx := context.Background()
	p := validPool(ns, "workers")
	p.Spec.MaxReplicas = 8
	p.Spec.CacheBytes = resource.MustParse("6G")
	p.Spec.Autoscaling = kvapi.AutoscalingSpec{
		Mode: mode, SyncPeriod: "1s", ScaleUpStabilizationWindow: "0s", ScaleDownStabilizationWindow: "0s",
	}
	g.Expect(k8sClient.Create(ctx, p)).To(Succeed())
	c := validCluster(ns, "store")
	c.Spec.Regions.Count = ptr.To(regions)
	c.Spec.CompactionPoolRef = &kvapi.CompactionPoolReference{Name: p.Name}
	g.Expect(k8sClient.Create(ctx, c)).To(Succeed())
	return p
}

func getPool(g Gomega, key client.ObjectKey) *kvapi.CompactionPool {
	p := &kvapi.CompactionPool{}
	g.Expect(k8sClient.Get(context.Background(), key, p)).To(Succeed())
	return p
}

func deploymentReplicas(g Gomega, ns string) int32 {
	d := &appsv1.Deployment{}
	g.Expect(k8sClient.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "workers-compactor"}, d)).To(Succeed())
	return *d.Spec.Replicas
}

// TestModelModeScalesWithFedMetrics: fed metrics change the pool's size
// through /scale, the Deployment follows, every input and output is in
// status, an infeasible model is reported and changes nothing, and idle
// workers get the lowest pod-deletion-cost.
func TestModelModeScalesWithFedMetrics(t *testing.T) {
	g := NewWithT(t)
	g.SetDefaultEventuallyTimeout(eventually)
	g.SetDefaultEventuallyPollingInterval(poll)
	ctx := context.Background()
	ns := newNamespace(t)
	fed.set(ns+"/workers", paperObservation(10, 1))
	p := poolAndCluster(t, g, ns, kvapi.AutoscalingModel, 10)
	key := client.ObjectKeyFromObject(p)

	// The paper's example: 2 workers.
	g.Eventually(func(g Gomega) {
		p := getPool(g, key)
		g.Expect(*p.Spec.Replicas).To(Equal(int32(2)))
		g.Expect(deploymentReplicas(g, ns)).To(Equal(int32(2)))
		a := p.Status.Autoscaler
		g.Expect(a).NotTo(BeNil())
		g.Expect(a.Inputs).To(Equal(kvapi.ModelInputs{
			CompactionRateBytesPerSecond: "2e+07", TransferRateBytesPerSecond: "8e+06", CacheBytes: 6e9,
			CompactionSizeBytes: "4e+09", CompactionsPerRegion: "1", IntervalSeconds: 3600, Regions: 10, Backlog: "0",
			Queued: "0", CompactionDebtBytes: "0", OldestCompactionWaitSeconds: "0", ChargedDebtBytes: "0", TransfersOutput: true,
		}))
		g.Expect(a.Outputs).NotTo(BeNil())
		g.Expect(a.Outputs.CompactionDurationSeconds).To(Equal("700"))
		g.Expect(a.Outputs.ConcurrentJobsPerWorker).To(Equal(int64(1)))
		g.Expect(*a.Outputs.RegionsPerWorker).To(Equal(int64(5)))
		g.Expect(a.Outputs.RecommendedReplicas).To(Equal(int32(2)))
		g.Expect(*p.Status.DesiredReplicas).To(Equal(int32(2)))
		g.Expect(condition(p.Status.Conditions, kvapi.ConditionScalingActive).Status).To(Equal(metav1.ConditionTrue))
	}).Should(Succeed())

	// Twice the demand: ⌊h/T⌋ = ⌊5.14/2⌋ = 2 regions per worker, 5 workers.
	fed.set(ns+"/workers", paperObservation(10, 2))
	g.Eventually(func(g Gomega) { g.Expect(*getPool(g, key).Spec.Replicas).To(Equal(int32(5))) }).Should(Succeed())
	// A queue that grows by 6 compactions per evaluation is a backlog:
	// ⌈queued/5.14⌉ more workers, up to maxReplicas 8.
	o := paperObservation(10, 2)
	o.Queued = 6
	fed.set(ns+"/workers", o)
	fed.growQueue(ns+"/workers", 6)
	g.Eventually(func(g Gomega) {
		p := getPool(g, key)
		g.Expect(*p.Spec.Replicas).To(Equal(int32(8)))
		g.Expect(p.Status.Autoscaler.Outputs.BacklogReplicas).To(BeNumerically(">=", 3))
		g.Expect(deploymentReplicas(g, ns)).To(Equal(int32(8)))
	}).Should(Succeed())
	// The queue stops growing: the steady capacity serves it; no backlog
	// term, back to the model's 5 (the down-window is 0s here).
	fed.growQueue(ns+"/workers", 0)
	g.Eventually(func(g Gomega) {
		p := getPool(g, key)
		g.Expect(*p.Spec.Replicas).To(Equal(int32(5)))
		g.Expect(p.Status.Autoscaler.Outputs.BacklogReplicas).To(Equal(int32(0)))
		g.Expect(p.Status.Autoscaler.Inputs.Backlog).To(Equal("0"))
	}).Should(Succeed())

	// Far more demand than maxReplicas allows (10 workers): clamped to 8.
	fed.set(ns+"/workers", paperObservation(10, 5))
	g.Eventually(func(g Gomega) { g.Expect(*getPool(g, key).Spec.Replicas).To(Equal(int32(8))) }).Should(Succeed())

	// Infeasible (b > m): the condition says why, the size stays.
	o = paperObservation(10, 1)
	o.CompactionSize = 7e9
	fed.set(ns+"/workers", o)
	g.Eventually(func(g Gomega) {
		p := getPool(g, key)
		c := condition(p.Status.Conditions, kvapi.ConditionScalingActive)
		g.Expect(c.Status).To(Equal(metav1.ConditionFalse))
		g.Expect(c.Reason).To(Equal(kvapi.ReasonModelInfeasible))
		g.Expect(c.Message).To(ContainSubstring(autoscaler.ReasonCompactionLargerThanCache))
		g.Expect(*p.Spec.Replicas).To(Equal(int32(8)))
	}).Should(Succeed())

	// Zero demand: down to minReplicas.
	fed.set(ns+"/workers", autoscaler.Observation{DemandMeasured: true})
	g.Eventually(func(g Gomega) { g.Expect(*getPool(g, key).Spec.Replicas).To(Equal(int32(1))) }).Should(Succeed())

	// pod-deletion-cost from each worker's in-flight jobs.
	for _, name := range []string{"busy", "idle"} {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: specs.SelectorLabels("workers", contract.ComponentCompactor)},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "x"}}},
		}
		g.Expect(k8sClient.Create(ctx, pod)).To(Succeed())
		pod.Status.PodIP = "10.0.0.1"
		g.Expect(k8sClient.Status().Update(ctx, pod)).To(Succeed())
	}
	o = autoscaler.Observation{DemandMeasured: true, InflightJobs: map[string]float64{"busy": 3, "idle": 0}}
	fed.set(ns+"/workers", o)
	g.Eventually(func(g Gomega) {
		for name, want := range map[string]string{"busy": "3", "idle": "0"} {
			pod := &corev1.Pod{}
			g.Expect(k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, pod)).To(Succeed())
			g.Expect(pod.Annotations[contract.PodDeletionCostAnnotation]).To(Equal(want))
		}
	}).Should(Succeed())

	// Paused: demand rises, the size does not.
	g.Eventually(func() error {
		p := getPool(g, key)
		p.Annotations = map[string]string{contract.PausedAnnotation: "true"}
		return k8sClient.Update(ctx, p)
	}).Should(Succeed())
	g.Eventually(func(g Gomega) {
		p := getPool(g, key)
		g.Expect(p.Status.ObservedGeneration).To(Equal(p.Generation))
		g.Expect(condition(p.Status.Conditions, kvapi.ConditionProgressing).Reason).To(Equal(kvapi.ReasonPaused))
	}).Should(Succeed())
	before := getPool(g, key).Status.Autoscaler.LastEvaluationTime
	fed.set(ns+"/workers", paperObservation(10, 2))
	// A paused pool is not evaluated: after several sync periods of 1s the
	// last evaluation and the size are unchanged.
	g.Consistently(func(g Gomega) {
		p := getPool(g, key)
		g.Expect(*p.Spec.Replicas).To(Equal(int32(1)))
		g.Expect(p.Status.Autoscaler.LastEvaluationTime).To(Equal(before))
	}, 3*time.Second, 200*time.Millisecond).Should(Succeed())
}

// TestScaleSubresourceAndExternalMode: /scale reads and writes the pool
// through the API server (what kubectl scale and an HPA use); in External
// mode the operator publishes its recommendation but never writes
// spec.replicas.
func TestScaleSubresourceAndExternalMode(t *testing.T) {
	g := NewWithT(t)
	g.SetDefaultEventuallyTimeout(eventually)
	g.SetDefaultEventuallyPollingInterval(poll)
	ctx := context.Background()
	ns := newNamespace(t)
	fed.set(ns+"/workers", paperObservation(10, 1))
	p := poolAndCluster(t, g, ns, kvapi.AutoscalingExternal, 10)
	key := client.ObjectKeyFromObject(p)

	// The recommendation (2) is published; spec.replicas stays at 1.
	g.Eventually(func(g Gomega) {
		p := getPool(g, key)
		g.Expect(p.Status.DesiredReplicas).NotTo(BeNil())
		g.Expect(*p.Status.DesiredReplicas).To(Equal(int32(2)))
	}).Should(Succeed())
	g.Expect(*getPool(g, key).Spec.Replicas).To(Equal(int32(1)), "External mode must not write spec.replicas")
	g.Expect(gaugeValue(t, "bellows_autoscaler_desired_replicas", ns+"/workers")).To(Equal(2.0))

	// /scale: status.replicas and the selector string come from status.
	g.Eventually(func(g Gomega) {
		s := &autoscalingv1.Scale{}
		g.Expect(k8sClient.SubResource("scale").Get(ctx, getPool(g, key), s)).To(Succeed())
		g.Expect(s.Spec.Replicas).To(Equal(int32(1)))
		g.Expect(s.Status.Selector).To(Equal("app.kubernetes.io/component=compactor,app.kubernetes.io/instance=workers,app.kubernetes.io/name=bellows"))
	}).Should(Succeed())

	// An external writer (kubectl scale, HPA) sets 5 through /scale; the
	// Deployment follows and the operator leaves it at 5 across evaluations.
	g.Eventually(func() error {
		pool := &kvapi.CompactionPool{}
		if err := k8sClient.Get(ctx, key, pool); err != nil {
			return err
		}
		s := &autoscalingv1.Scale{}
		if err := k8sClient.SubResource("scale").Get(ctx, pool, s); err != nil {
			return err
		}
		s.Spec.Replicas = 5
		return k8sClient.SubResource("scale").Update(ctx, pool, client.WithSubResourceBody(s))
	}).Should(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(*getPool(g, key).Spec.Replicas).To(Equal(int32(5)))
		g.Expect(deploymentReplicas(g, ns)).To(Equal(int32(5)))
	}).Should(Succeed())
	first := getPool(g, key).Status.Autoscaler.LastEvaluationTime
	g.Eventually(func(g Gomega) {
		p := getPool(g, key)
		g.Expect(p.Status.Autoscaler.LastEvaluationTime.After(first.Time)).To(BeTrue())
		g.Expect(*p.Status.DesiredReplicas).To(Equal(int32(2)))
	}).Should(Succeed())
	g.Expect(*getPool(g, key).Spec.Replicas).To(Equal(int32(5)), "External mode must not write spec.replicas")

	// Deployment status flows back into /scale's status.replicas.
	g.Eventually(func() error {
		d := &appsv1.Deployment{}
		if err := k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: "workers-compactor"}, d); err != nil {
			return err
		}
		d.Status = appsv1.DeploymentStatus{ObservedGeneration: d.Generation, Replicas: 5, ReadyReplicas: 5, UpdatedReplicas: 5, AvailableReplicas: 5}
		return k8sClient.Status().Update(ctx, d)
	}).Should(Succeed())
	g.Eventually(func(g Gomega) {
		s := &autoscalingv1.Scale{}
		g.Expect(k8sClient.SubResource("scale").Get(ctx, getPool(g, key), s)).To(Succeed())
		g.Expect(s.Status.Replicas).To(Equal(int32(5)))
		g.Expect(condition(getPool(g, key).Status.Conditions, kvapi.ConditionReady).Status).To(Equal(metav1.ConditionTrue))
	}).Should(Succeed())
}

func gaugeValue(t *testing.T, name, pool string) float64 {
	t.Helper()
	families, err := testReg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "pool" && l.GetValue() == pool {
					return m.GetGauge().GetValue()
				}
			}
		}
	}
	t.Fatalf("no %s{pool=%q}", name, pool)
	return 0
}
