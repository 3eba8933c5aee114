package controllers

import (
	"context"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kvapi "github.com/bellows-kv/bellows/api/v1alpha1"
)

// FailingOver says whether the balancer's store counts regions without a
// live owner: False, asked of every Ready pod, on a healthy cluster; True,
// with the count and the pod, once a store's pod stops being Ready and the
// balancer's store counts its regions, with one Warning event; False again,
// with one Normal event, once the count is back to 0. That last change is
// read on the operator's own recheck: nothing in Kubernetes changes when
// the balancer moves regions.
func TestFailingOverFollowsTheBalancersGauge(t *testing.T) {
	g := NewWithT(t)
	g.SetDefaultEventuallyTimeout(eventually)
	g.SetDefaultEventuallyPollingInterval(poll)
	key, uid := rolledOutStores(t, g, "fo", 3)
	failingOver := func(g Gomega, status metav1.ConditionStatus, reason string, says ...string) {
		got := &kvapi.KVCluster{}
		g.Expect(k8sClient.Get(context.Background(), key, got)).To(Succeed())
		c := condition(got.Status.Conditions, kvapi.ConditionFailingOver)
		g.Expect(c.Status).To(Equal(status), c.Message)
		g.Expect(c.Reason).To(Equal(reason))
		for _, s := range says {
			g.Expect(c.Message).To(ContainSubstring(s))
		}
	}
	g.Eventually(func(g Gomega) {
		failingOver(g, metav1.ConditionFalse, kvapi.ReasonEveryRegionOwned, "asked of 3 Ready storage pod(s)")
	}).Should(Succeed())

	held.setWithoutLiveOwner(key.Namespace, "fo-0", 4)
	putStorePod(g, key, 2, "r", podState{}) // store 2 is gone
	g.Eventually(func(g Gomega) {
		failingOver(g, metav1.ConditionTrue, kvapi.ReasonRegionsWithoutLiveOwner, "4 region(s) have no live owner", "(at fo-0)")
	}).Should(Succeed())

	held.setWithoutLiveOwner(key.Namespace, "fo-0", 0)
	g.Eventually(func(g Gomega) {
		failingOver(g, metav1.ConditionFalse, kvapi.ReasonEveryRegionOwned, "asked of 2 Ready storage pod(s)")
	}, failoverRecheck+eventually).Should(Succeed())
	g.Eventually(func(g Gomega) {
		began := clusterEvents(g, key.Namespace, uid, kvapi.ReasonRegionsWithoutLiveOwner)
		g.Expect(began).To(HaveLen(1))
		g.Expect(began[0].Type).To(Equal(corev1.EventTypeWarning))
		ended := clusterEvents(g, key.Namespace, uid, kvapi.ReasonFailoverDone)
		g.Expect(ended).To(HaveLen(1))
		g.Expect(ended[0].Type).To(Equal(corev1.EventTypeNormal))
	}).Should(Succeed())
}
