package controllers

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kvapi "github.com/bellows-kv/bellows/api/v1alpha1"
	"github.com/bellows-kv/bellows/controllers/specs"
)

// samplePair is config/samples' pool and cluster in ns, sized by hand
// (autoscaling is tested elsewhere), with labels added.
func samplePair(t *testing.T, ns string, labels map[string]string) (*kvapi.CompactionPool, *kvapi.KVCluster) {
	t.Helper()
	pool := &kvapi.CompactionPool{}
	loadSample(t, "kv_v1alpha1_compactionpool.yaml", pool, ns)
	pool.Spec.Autoscaling.Mode = kvapi.AutoscalingDisabled
	cluster := &kvapi.KVCluster{}
	loadSample(t, "kv_v1alpha1_kvcluster.yaml", cluster, ns)
	pool.Labels, cluster.Labels = labels, labels
	return pool, cluster
}

// TestTheOperatorMakesNetworkPolicies: a KVCluster gets `<cluster>-store`
// and a CompactionPool `<pool>-compactor`, each as the builders make it for
// the operator's peers, controlled by its owner, put back when someone
// changes it, and garbage-collected with the owner.
func TestTheOperatorMakesNetworkPolicies(t *testing.T) {
	g := NewWithT(t)
	g.SetDefaultEventuallyTimeout(eventually)
	g.SetDefaultEventuallyPollingInterval(poll)
	ctx := context.Background()
	ns := newNamespace(t)
	pool, cluster := samplePair(t, ns, nil)
	g.Expect(k8sClient.Create(ctx, pool)).To(Succeed())
	g.Expect(k8sClient.Create(ctx, cluster)).To(Succeed())

	peers := suiteNetworkPolicies.peers()
	defaulted := func() (*kvapi.KVCluster, *kvapi.CompactionPool) {
		c, p := cluster.DeepCopy(), pool.DeepCopy()
		c.SetDefaults()
		p.SetDefaults()
		return c, p
	}
	c, p := defaulted()
	want := map[string]*networkingv1.NetworkPolicy{
		"demo-store":        specs.BuildStoreNetworkPolicy(c, peers),
		"workers-compactor": specs.BuildPoolNetworkPolicy(p, peers),
	}
	owners := map[string]metav1.Object{"demo-store": cluster, "workers-compactor": pool}
	for name, w := range want {
		g.Eventually(func(g Gomega) {
			np := &networkingv1.NetworkPolicy{}
			g.Expect(k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, np)).To(Succeed())
			g.Expect(metav1.IsControlledBy(np, owners[name])).To(BeTrue(), "%s owner references %v", name, np.OwnerReferences)
			g.Expect(np.Spec).To(Equal(w.Spec))
			g.Expect(specs.SpecHash(np)).To(Equal(specs.SpecHash(w)))
		}).Should(Succeed())
	}
	g.Expect(ownedNames(g, ns, cluster, &networkingv1.NetworkPolicyList{})).To(ConsistOf("demo-store"))
	g.Expect(ownedNames(g, ns, pool, &networkingv1.NetworkPolicyList{})).To(ConsistOf("workers-compactor"))

	// Someone opens the workers' port to everyone: the operator closes it
	// again (drift, through the watch).
	np := &networkingv1.NetworkPolicy{}
	g.Expect(k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: "workers-compactor"}, np)).To(Succeed())
	np.Spec.Ingress = []networkingv1.NetworkPolicyIngressRule{{}}
	g.Expect(k8sClient.Update(ctx, np)).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: "workers-compactor"}, np)).To(Succeed())
		g.Expect(np.Spec).To(Equal(want["workers-compactor"].Spec))
	}).Should(Succeed())

	// Each goes with its owner (the real garbage collector).
	for name, owner := range map[string]client.Object{"demo-store": cluster, "workers-compactor": pool} {
		g.Expect(k8sClient.Delete(ctx, owner)).To(Succeed())
		g.Eventually(func(g Gomega) {
			err := k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &networkingv1.NetworkPolicy{})
			g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "NetworkPolicy %s still exists (err %v)", name, err)
		}).Should(Succeed())
	}
}

// TestNetworkPoliciesTurnedOff: an operator with NetworkPolicies off makes
// none; turned on, it makes them; turned off again, it deletes those it made
// (an event on the owner says so), and leaves one it does not control.
// Reconcilers of the test's own run the passes, on objects the suite's
// manager does not see.
func TestNetworkPoliciesTurnedOff(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := newNamespace(t)
	pool, cluster := samplePair(t, ns, map[string]string{unmanagedLabel: "true"})
	g.Expect(k8sClient.Create(ctx, pool)).To(Succeed())
	g.Expect(k8sClient.Create(ctx, cluster)).To(Succeed())

	rec := events.NewFakeRecorder(1000)
	pass := func(n NetworkPolicies) {
		t.Helper()
		kv := &KVClusterReconciler{Client: k8sClient, Scheme: testScheme, Recorder: rec, APIReader: k8sClient, DefaultImage: suiteDefaultImage, NetworkPolicies: n}
		pools := &CompactionPoolReconciler{Client: k8sClient, Recorder: rec, Source: fed, Clock: clock.RealClock{}, APIReader: k8sClient,
			DefaultImage: suiteDefaultImage, NetworkPolicies: n}
		_, err := kv.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(cluster)})
		g.Expect(err).NotTo(HaveOccurred())
		_, err = pools.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(pool)})
		g.Expect(err).NotTo(HaveOccurred())
	}
	policies := func() []string {
		var list networkingv1.NetworkPolicyList
		g.Expect(k8sClient.List(ctx, &list, client.InNamespace(ns))).To(Succeed())
		var names []string
		for _, np := range list.Items {
			if np.DeletionTimestamp.IsZero() {
				names = append(names, np.Name)
			}
		}
		return names
	}
	deleted := func() []string {
		var out []string
		for _, e := range drain(rec) {
			if e == "Normal Deleted Deleted NetworkPolicy demo-store" || e == "Normal Deleted Deleted NetworkPolicy workers-compactor" {
				out = append(out, e)
			}
		}
		return out
	}

	off := NetworkPolicies{}
	pass(off)
	g.Expect(policies()).To(BeEmpty(), "NetworkPolicies made while turned off")
	// The passes went on past the step: the StatefulSet and the
	// Deployment, each written after it, are there.
	g.Expect(k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: "demo"}, &appsv1.StatefulSet{})).To(Succeed())
	g.Expect(k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: "workers-compactor"}, &appsv1.Deployment{})).To(Succeed())
	drain(rec)

	pass(suiteNetworkPolicies)
	g.Expect(policies()).To(ConsistOf("demo-store", "workers-compactor"))

	// One under a cluster's policy name that the cluster does not control
	// (someone's own) stays.
	foreign := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "other-store"},
		Spec: networkingv1.NetworkPolicySpec{PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}}}
	g.Expect(k8sClient.Create(ctx, foreign)).To(Succeed())
	other := cluster.DeepCopy()
	other.Name, other.UID = "other", "uid-of-other"
	drain(rec)
	g.Expect(deleteControlled(ctx, children{client: k8sClient, recorder: rec}, other, specs.BuildStoreNetworkPolicy(other, off.peers()))).To(Succeed())
	g.Expect(drain(rec)).To(BeEmpty())

	pass(off)
	g.Expect(deleted()).To(ConsistOf("Normal Deleted Deleted NetworkPolicy demo-store", "Normal Deleted Deleted NetworkPolicy workers-compactor"))
	g.Eventually(policies, 10*time.Second, poll).Should(ConsistOf("other-store"))
	// Nothing left to delete: a further pass does nothing.
	pass(off)
	g.Expect(deleted()).To(BeEmpty())
}
