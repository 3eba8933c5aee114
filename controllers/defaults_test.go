package controllers

import (
	"context"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kvapi "github.com/bellows-kv/bellows/api/v1alpha1"
	"github.com/bellows-kv/bellows/controllers/specs"
	"github.com/bellows-kv/bellows/internal/contract"
)

// eventsFor lists the events.k8s.io events about the object named name.
func eventsFor(g Gomega, ns, name string) []eventsv1.Event {
	var list eventsv1.EventList
	g.Expect(k8sClient.List(context.Background(), &list, client.InNamespace(ns))).To(Succeed())
	var out []eventsv1.Event
	for _, e := range list.Items {
		if e.Regarding.Name == name {
			out = append(out, e)
		}
	}
	return out
}

func hasEvent(evs []eventsv1.Event, typ, reason, substr string) bool {
	for _, e := range evs {
		if e.Type == typ && e.Reason == reason && strings.Contains(e.Note, substr) {
			return true
		}
	}
	return false
}

// TestPodsRunTheOperatorsImageAndSaneResources: a cluster and a pool that
// name no image and no resources run the operator's default image, request
// the memory their engine settings imply, and prefer distinct nodes.
func TestPodsRunTheOperatorsImageAndSaneResources(t *testing.T) {
	g := NewWithT(t)
	g.SetDefaultEventuallyTimeout(eventually)
	g.SetDefaultEventuallyPollingInterval(poll)
	ctx := context.Background()
	ns := newNamespace(t)

	c := validCluster(ns, "plain") // 4 regions over 3 replicas
	g.Expect(k8sClient.Create(ctx, c)).To(Succeed())
	stored := &kvapi.KVCluster{}
	g.Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(c), stored)).To(Succeed())
	g.Expect(stored.Spec.Image).To(BeEmpty(), "the API server must not default the image (no :latest)")

	sts := &appsv1.StatefulSet{}
	g.Eventually(func() error {
		return k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: c.StatefulSetName()}, sts)
	}).Should(Succeed())
	pod := sts.Spec.Template.Spec
	g.Expect(pod.Containers[0].Image).To(Equal(suiteDefaultImage))
	res := pod.Containers[0].Resources
	// 1Gi block cache + one 128Mi memstore and its 1Mi of pinned indexes (512Mi split) + 256Mi runtime; limit with all 4 regions.
	g.Expect(res.Requests.Memory().Value()).To(Equal(int64(1024+128+1+256) << 20))
	g.Expect(res.Limits.Memory().Value()).To(Equal(int64(1024+4*(128+1)+256) << 20))
	g.Expect(res.Requests.Cpu().String()).To(Equal(contract.DefaultStoreCPURequest))
	g.Expect(pod.Affinity).NotTo(BeNil())
	g.Expect(pod.Affinity.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution).To(HaveLen(1))
	g.Eventually(func(g Gomega) {
		got := &kvapi.KVCluster{}
		g.Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(c), got)).To(Succeed())
		g.Expect(condition(got.Status.Conditions, kvapi.ConditionResourcesSufficient).Status).To(Equal(metav1.ConditionTrue))
	}).Should(Succeed())

	p := validPool(ns, "plainpool")
	p.Spec.Autoscaling.Mode = kvapi.AutoscalingDisabled
	p.Spec.CacheBytes = resource.MustParse("1Gi")
	g.Expect(k8sClient.Create(ctx, p)).To(Succeed())
	d := &appsv1.Deployment{}
	g.Eventually(func() error { return k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: p.DeploymentName()}, d) }).Should(Succeed())
	wc := d.Spec.Template.Spec.Containers[0]
	g.Expect(wc.Image).To(Equal(suiteDefaultImage))
	g.Expect(wc.Resources.Requests.Memory().Value()).To(Equal(int64(1024+256) << 20))
	g.Expect(wc.Resources.Limits.Memory().Value()).To(Equal(int64(1024+256) << 20))
}

// TestMemoryLimitBelowTheEngineNeedIsReported: an explicit limit that
// cannot hold the block cache and the memstores is reported by a condition
// and one Warning event, and no longer once it is raised.
func TestMemoryLimitBelowTheEngineNeedIsReported(t *testing.T) {
	g := NewWithT(t)
	g.SetDefaultEventuallyTimeout(eventually)
	g.SetDefaultEventuallyPollingInterval(poll)
	ctx := context.Background()
	ns := newNamespace(t)
	c := validCluster(ns, "tight") // 4 regions over 3 replicas: 2 per pod
	c.Spec.Resources = corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")}}
	g.Expect(k8sClient.Create(ctx, c)).To(Succeed())
	key := client.ObjectKeyFromObject(c)
	g.Eventually(func(g Gomega) {
		got := &kvapi.KVCluster{}
		g.Expect(k8sClient.Get(ctx, key, got)).To(Succeed())
		cond := condition(got.Status.Conditions, kvapi.ConditionResourcesSufficient)
		g.Expect(cond.Status).To(Equal(metav1.ConditionFalse))
		g.Expect(cond.Reason).To(Equal(kvapi.ReasonMemoryBelowEngineNeed))
		g.Expect(cond.Message).To(ContainSubstring("1Gi is below"))
		g.Expect(cond.Message).To(ContainSubstring("2 regions × (memstore 128Mi + indexes pinned 1Mi)"))
		g.Expect(hasEvent(eventsFor(g, ns, c.Name), corev1.EventTypeWarning, kvapi.ReasonMemoryBelowEngineNeed, "1538Mi")).To(BeTrue())
	}).Should(Succeed())
	// The user's resources are used as written: the pods still start.
	sts := &appsv1.StatefulSet{}
	g.Expect(k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: c.StatefulSetName()}, sts)).To(Succeed())
	g.Expect(sts.Spec.Template.Spec.Containers[0].Resources.Limits.Memory().String()).To(Equal("1Gi"))

	g.Eventually(func() error {
		got := &kvapi.KVCluster{}
		if err := k8sClient.Get(ctx, key, got); err != nil {
			return err
		}
		got.Spec.Resources.Limits[corev1.ResourceMemory] = resource.MustParse("2Gi")
		return k8sClient.Update(ctx, got)
	}).Should(Succeed())
	g.Eventually(func(g Gomega) {
		got := &kvapi.KVCluster{}
		g.Expect(k8sClient.Get(ctx, key, got)).To(Succeed())
		g.Expect(condition(got.Status.Conditions, kvapi.ConditionResourcesSufficient).Status).To(Equal(metav1.ConditionTrue))
	}).Should(Succeed())
	var warnings int
	for _, e := range eventsFor(g, ns, c.Name) {
		if e.Reason == kvapi.ReasonMemoryBelowEngineNeed {
			warnings++
		}
	}
	g.Expect(warnings).To(Equal(1), "one event for one shortfall, not one per pass")
}

// TestPoolSelectorAndReplicaBounds: status.selector is there even for a
// paused pool (an HPA created with it needs it); replicas above
// maxReplicas are clamped in Model mode and reported, not overruled, in
// External mode.
func TestPoolSelectorAndReplicaBounds(t *testing.T) {
	g := NewWithT(t)
	g.SetDefaultEventuallyTimeout(eventually)
	g.SetDefaultEventuallyPollingInterval(poll)
	ctx := context.Background()
	ns := newNamespace(t)

	paused := validPool(ns, "paused")
	paused.Annotations = map[string]string{contract.PausedAnnotation: "true"}
	g.Expect(k8sClient.Create(ctx, paused)).To(Succeed())
	g.Eventually(func(g Gomega) {
		s := &autoscalingv1.Scale{}
		g.Expect(k8sClient.SubResource("scale").Get(ctx, paused, s)).To(Succeed())
		g.Expect(s.Status.Selector).To(Equal(specs.PoolSelector(paused)))
	}).Should(Succeed())

	// Lowering maxReplicas below the current size is allowed (the CRD's
	// rule refuses only writes that raise replicas above the bound).
	lower := func(key client.ObjectKey, max int32) {
		g.Eventually(func() error {
			p := &kvapi.CompactionPool{}
			if err := k8sClient.Get(ctx, key, p); err != nil {
				return err
			}
			p.Spec.MaxReplicas = max
			return k8sClient.Update(ctx, p)
		}).Should(Succeed())
	}

	model := validPool(ns, "model")
	model.Spec.Replicas = ptr.To(int32(4))
	model.Spec.Autoscaling.Mode = kvapi.AutoscalingModel // no metrics are fed: the model makes no recommendation
	g.Expect(k8sClient.Create(ctx, model)).To(Succeed())
	lower(client.ObjectKeyFromObject(model), 2)
	g.Eventually(func(g Gomega) {
		got := getPool(g, client.ObjectKeyFromObject(model))
		g.Expect(*got.Spec.Replicas).To(Equal(int32(2)))
		d := &appsv1.Deployment{}
		g.Expect(k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: model.DeploymentName()}, d)).To(Succeed())
		g.Expect(*d.Spec.Replicas).To(Equal(int32(2)))
		g.Expect(hasEvent(eventsFor(g, ns, model.Name), corev1.EventTypeNormal, kvapi.ReasonReplicasClamped, "set to 2")).To(BeTrue())
	}).Should(Succeed())

	ext := validPool(ns, "ext")
	ext.Spec.Replicas = ptr.To(int32(4))
	ext.Spec.Autoscaling.Mode = kvapi.AutoscalingExternal
	g.Expect(k8sClient.Create(ctx, ext)).To(Succeed())
	lower(client.ObjectKeyFromObject(ext), 2)
	g.Eventually(func(g Gomega) {
		got := getPool(g, client.ObjectKeyFromObject(ext))
		g.Expect(got.Spec.MaxReplicas).To(Equal(int32(2)))
		g.Expect(*got.Spec.Replicas).To(Equal(int32(4)), "External mode: the operator never writes spec.replicas")
		d := &appsv1.Deployment{}
		g.Expect(k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: ext.DeploymentName()}, d)).To(Succeed())
		g.Expect(*d.Spec.Replicas).To(Equal(int32(4)))
		g.Expect(hasEvent(eventsFor(g, ns, ext.Name), corev1.EventTypeWarning, kvapi.ReasonReplicasOutOfBounds, "spec.replicas 4 is outside")).To(BeTrue())
	}).Should(Succeed())
}
