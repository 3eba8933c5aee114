package controllers

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/bellows-kv/bellows/internal/contract"
	"github.com/bellows-kv/bellows/internal/discovery"
)

// TestTheStoreRoleLetsAStoreDiscoverAndNoMore: as the storage pods'
// ServiceAccount, the informers a store runs (internal/discovery: its own
// StatefulSet's replicas by name, the pool's EndpointSlices) sync, and
// reading anything else is forbidden: another StatefulSet, the namespace's
// StatefulSets as a list, a get, the Secrets.
func TestTheStoreRoleLetsAStoreDiscoverAndNoMore(t *testing.T) {
	g := NewWithT(t)
	g.SetDefaultEventuallyTimeout(eventually)
	g.SetDefaultEventuallyPollingInterval(poll)
	ctx := context.Background()
	ns := newNamespace(t)
	pool, cluster := samplePair(t, ns, nil)
	g.Expect(k8sClient.Create(ctx, pool)).To(Succeed())
	g.Expect(k8sClient.Create(ctx, cluster)).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: "demo-store"}, &rbacv1.RoleBinding{})).To(Succeed())
		g.Expect(k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: "demo"}, &appsv1.StatefulSet{})).To(Succeed())
	}).Should(Succeed())
	// A second StatefulSet in the namespace the store must not read.
	other := &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "other"},
		Spec: appsv1.StatefulSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "other"}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "other"}},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "i"}}},
			},
		},
	}
	g.Expect(k8sClient.Create(ctx, other)).To(Succeed())

	user, err := testEnv.AddUser(envtest.User{
		Name:   "system:serviceaccount:" + ns + ":demo-store",
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"},
	}, cfg)
	g.Expect(err).NotTo(HaveOccurred())
	store := user.Config()

	// RBAC is read by the API server a moment after the Role is written.
	var replicas *discovery.StatefulSetReplicas
	g.Eventually(func(g Gomega) {
		sync, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		replicas, err = discovery.StartStatefulSetReplicas(sync, store, ns, "demo")
		g.Expect(err).NotTo(HaveOccurred())
	}).Should(Succeed())
	n, ok := replicas.Replicas()
	g.Expect(ok).To(BeTrue())
	g.Expect(n).To(Equal(int(cluster.Spec.Replicas)))
	sync, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	_, err = discovery.StartEndpointSlices(sync, store, ns, "workers-compactor", contract.PortNameGRPC)
	g.Expect(err).NotTo(HaveOccurred(), "the pool's EndpointSlices")
	_, err = discovery.StartEndpointSlices(sync, store, ns, "demo-headless", contract.PortNameGRPC)
	g.Expect(err).NotTo(HaveOccurred(), "the peers' EndpointSlices")

	cs, err := kubernetes.NewForConfig(store)
	g.Expect(err).NotTo(HaveOccurred())
	forbidden := func(what string, err error) {
		t.Helper()
		g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "%s: want Forbidden, got %v", what, err)
	}
	_, err = cs.AppsV1().StatefulSets(ns).List(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", "other").String()})
	forbidden("list another StatefulSet by name", err)
	_, err = cs.AppsV1().StatefulSets(ns).List(ctx, metav1.ListOptions{})
	forbidden("list the namespace's StatefulSets", err)
	_, err = cs.AppsV1().StatefulSets(ns).Get(ctx, "demo", metav1.GetOptions{})
	forbidden("get its StatefulSet (informers list and watch)", err)
	_, err = cs.CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{})
	forbidden("list Secrets", err)
	_, err = cs.DiscoveryV1().EndpointSlices("default").List(ctx, metav1.ListOptions{})
	forbidden("list EndpointSlices of another namespace", err)
}
