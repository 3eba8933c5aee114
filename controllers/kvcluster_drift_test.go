package controllers

import (
	"context"
	"testing"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kvapi "github.com/bellows-kv/bellows/api/v1alpha1"
	"github.com/bellows-kv/bellows/controllers/specs"
)

// This file sorts after kvcluster_controller_test.go, so in a run of the
// whole package the ServiceMonitor CRD is installed by now and the steady
// state covers ServiceMonitors (unstructured children) too.

// clusterWithPool creates a KVCluster and the CompactionPool it references
// (autoscaling disabled), both named name, and waits for their children.
func clusterWithPool(t *testing.T, g *WithT, name string) (cluster, pool client.ObjectKey) {
	t.Helper()
	ctx := context.Background()
	ns := newNamespace(t)
	p := validPool(ns, name)
	p.Spec.Autoscaling.Mode = kvapi.AutoscalingDisabled
	g.Expect(k8sClient.Create(ctx, p)).To(Succeed())
	c := validCluster(ns, name)
	c.Spec.CompactionPoolRef = &kvapi.CompactionPoolReference{Name: name}
	g.Expect(k8sClient.Create(ctx, c)).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &appsv1.StatefulSet{})).To(Succeed())
		g.Expect(k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &corev1.Service{})).To(Succeed())
		g.Expect(k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: name + "-compactor"}, &appsv1.Deployment{})).To(Succeed())
	}).Should(Succeed())
	return client.ObjectKeyFromObject(c), client.ObjectKeyFromObject(p)
}

// storeHash is the spec hash of the live StatefulSet.
func storeHash(g Gomega, key client.ObjectKey) string {
	sts := &appsv1.StatefulSet{}
	g.Expect(k8sClient.Get(context.Background(), key, sts)).To(Succeed())
	return specs.SpecHash(sts)
}

// edit reads obj, applies f and writes it, retrying on conflicts with the
// operator's own writes.
func edit[T client.Object](g *WithT, key client.ObjectKey, obj T, f func(T)) {
	g.Eventually(func() error {
		if err := k8sClient.Get(context.Background(), key, obj); err != nil {
			return err
		}
		f(obj)
		return k8sClient.Update(context.Background(), obj)
	}).Should(Succeed())
}

// TestDriftIsCorrected: edits by others to what the operator owns are put
// back although the operator's spec (and so the spec-hash) did not change;
// what others add beside it stays.
func TestDriftIsCorrected(t *testing.T) {
	g := NewWithT(t)
	g.SetDefaultEventuallyTimeout(eventually)
	g.SetDefaultEventuallyPollingInterval(poll)
	ctx := context.Background()
	key, poolKey := clusterWithPool(t, g, "drift")
	cluster := &kvapi.KVCluster{}
	g.Expect(k8sClient.Get(ctx, key, cluster)).To(Succeed())
	cluster.SetDefaults()

	// The client Service: its port changed and a port added by hand, and a
	// label and an annotation of another tool. The ports return to exactly
	// the desired ones; the label and the annotation stay.
	svc := &corev1.Service{}
	edit(g, key, svc, func(s *corev1.Service) {
		s.Spec.Ports[0].Port = 9999
		s.Spec.Ports = append(s.Spec.Ports, corev1.ServicePort{Name: "extra", Port: 1234, TargetPort: intstr.FromInt32(1234), Protocol: corev1.ProtocolTCP})
		s.Labels["example.com/team"] = "storage"
		s.Annotations["example.com/note"] = "kept"
	})
	g.Eventually(func(g Gomega) []corev1.ServicePort {
		g.Expect(k8sClient.Get(ctx, key, svc)).To(Succeed())
		return svc.Spec.Ports
	}).Should(Equal(specs.BuildStoreClientService(cluster).Spec.Ports))
	g.Expect(svc.Labels).To(HaveKeyWithValue("example.com/team", "storage"))
	g.Expect(svc.Annotations).To(HaveKeyWithValue("example.com/note", "kept"))

	// The StatefulSet scaled and its template edited by hand while a
	// rollout is under way (it has no status: it never rolled out). The
	// replicas come back at once; the template waits for the rollout.
	sts := &appsv1.StatefulSet{}
	edit(g, key, sts, func(s *appsv1.StatefulSet) {
		s.Spec.Replicas = ptr.To(int32(7))
		s.Spec.Template.Spec.Containers[0].Env = append(s.Spec.Template.Spec.Containers[0].Env, corev1.EnvVar{Name: "BY_HAND", Value: "1"})
		s.Spec.Template.Annotations[restartedAtAnnotation] = "2026-01-01T00:00:00Z"
	})
	g.Eventually(func(g Gomega) int32 {
		g.Expect(k8sClient.Get(ctx, key, sts)).To(Succeed())
		return *sts.Spec.Replicas
	}).Should(Equal(cluster.Spec.Replicas))
	g.Expect(sts.Spec.Template.Spec.Containers[0].Env).To(ContainElement(corev1.EnvVar{Name: "BY_HAND", Value: "1"}),
		"template drift must wait for the rollout, as a change of the spec does")

	// Rolled out: the template is corrected too, all but the annotation of
	// `kubectl rollout restart`, which would otherwise be reverted (and the
	// pods rolled back).
	markRolledOut(g, key, specs.SpecHash(sts))
	g.Eventually(func(g Gomega) []corev1.EnvVar {
		g.Expect(k8sClient.Get(ctx, key, sts)).To(Succeed())
		return sts.Spec.Template.Spec.Containers[0].Env
	}).ShouldNot(ContainElement(HaveField("Name", "BY_HAND")))
	g.Expect(sts.Spec.Template.Annotations).To(HaveKeyWithValue(restartedAtAnnotation, "2026-01-01T00:00:00Z"))

	// The pool's Deployment scaled by hand.
	pool := &kvapi.CompactionPool{}
	g.Expect(k8sClient.Get(ctx, poolKey, pool)).To(Succeed())
	dKey := client.ObjectKey{Namespace: key.Namespace, Name: pool.DeploymentName()}
	d := &appsv1.Deployment{}
	edit(g, dKey, d, func(d *appsv1.Deployment) { d.Spec.Replicas = ptr.To(int32(4)) })
	g.Eventually(func(g Gomega) int32 {
		g.Expect(k8sClient.Get(ctx, dKey, d)).To(Succeed())
		return *d.Spec.Replicas
	}).Should(Equal(pool.DesiredReplicasOrDefault()))
}

// TestSteadyStateWritesNothing: passes over a cluster and a pool whose
// children are as desired write nothing. The children differ from what the
// builders make in every field the API server defaults, so this is what
// keeps drift correction from writing on every pass.
func TestSteadyStateWritesNothing(t *testing.T) {
	g := NewWithT(t)
	g.SetDefaultEventuallyTimeout(eventually)
	g.SetDefaultEventuallyPollingInterval(poll)
	ctx := context.Background()
	key, poolKey := clusterWithPool(t, g, "steady")
	// Rolled out, so the StatefulSet's template is compared too.
	g.Eventually(func(g Gomega) string { return storeHash(g, key) }).Should(Equal(desiredStoreHash(g, key)))
	markRolledOut(g, key, desiredStoreHash(g, key))
	g.Eventually(func(g Gomega) {
		c := &kvapi.KVCluster{}
		g.Expect(k8sClient.Get(ctx, key, c)).To(Succeed())
		g.Expect(condition(c.Status.Conditions, kvapi.ConditionReady).Status).To(BeEquivalentTo("True"))
	}).Should(Succeed())

	ns := key.Namespace
	versions := func() map[string]string {
		out := map[string]string{}
		lists := []client.ObjectList{&kvapi.KVClusterList{}, &kvapi.CompactionPoolList{}, &appsv1.StatefulSetList{}, &appsv1.DeploymentList{},
			&corev1.ServiceList{}, &corev1.ConfigMapList{}, &corev1.ServiceAccountList{}, &policyv1.PodDisruptionBudgetList{},
			&rbacv1.RoleList{}, &rbacv1.RoleBindingList{}, &networkingv1.NetworkPolicyList{}}
		if ok, err := serviceMonitorsAvailable(k8sClient); err == nil && ok {
			sms := &unstructured.UnstructuredList{}
			sms.SetGroupVersionKind(specs.ServiceMonitorGVK.GroupVersion().WithKind("ServiceMonitorList"))
			lists = append(lists, sms)
		}
		for _, l := range lists {
			g.Expect(k8sClient.List(ctx, l, client.InNamespace(ns))).To(Succeed())
			items, err := meta.ExtractList(l)
			g.Expect(err).NotTo(HaveOccurred())
			for _, it := range items {
				o := it.(client.Object)
				out[kindOf(o)+"/"+o.GetName()] = o.GetResourceVersion()
			}
		}
		return out
	}
	before := versions()

	rec := events.NewFakeRecorder(100)
	kv := &KVClusterReconciler{Client: k8sClient, Scheme: testScheme, Recorder: rec, APIReader: k8sClient, DefaultImage: suiteDefaultImage,
		NetworkPolicies: suiteNetworkPolicies}
	pools := &CompactionPoolReconciler{Client: k8sClient, Recorder: rec, Source: fed, Clock: clock.RealClock{}, DefaultImage: suiteDefaultImage,
		NetworkPolicies: suiteNetworkPolicies}
	for range 3 {
		_, err := kv.Reconcile(ctx, ctrl.Request{NamespacedName: key})
		g.Expect(err).NotTo(HaveOccurred())
		_, err = pools.Reconcile(ctx, ctrl.Request{NamespacedName: poolKey})
		g.Expect(err).NotTo(HaveOccurred())
	}
	g.Expect(drain(rec)).To(BeEmpty(), "a steady pass announces nothing and writes nothing")
	g.Expect(versions()).To(Equal(before), "a steady pass must not write")
}
