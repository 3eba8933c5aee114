package controllers

import (
	"context"
	"fmt"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kvapi "github.com/bellows-kv/bellows/api/v1alpha1"
)

func updateCluster(g *WithT, key client.ObjectKey, f func(*kvapi.KVCluster)) {
	g.Eventually(func() error {
		c := &kvapi.KVCluster{}
		if err := k8sClient.Get(context.Background(), key, c); err != nil {
			return err
		}
		f(c)
		return k8sClient.Update(context.Background(), c)
	}).Should(Succeed())
}

// progressing is the cluster's Progressing condition, once the status
// describes the current generation.
func progressing(g Gomega, key client.ObjectKey) metav1.Condition {
	c := &kvapi.KVCluster{}
	g.Expect(k8sClient.Get(context.Background(), key, c)).To(Succeed())
	g.Expect(c.Status.ObservedGeneration).To(Equal(c.Generation))
	return condition(c.Status.Conditions, kvapi.ConditionProgressing)
}

// clusterEvents are the events about the object with uid that have reason.
func clusterEvents(g Gomega, ns string, uid types.UID, reason string) []eventsv1.Event {
	var list eventsv1.EventList
	g.Expect(k8sClient.List(context.Background(), &list, client.InNamespace(ns))).To(Succeed())
	var out []eventsv1.Event
	for _, e := range list.Items {
		if e.Regarding.UID == uid && e.Reason == reason {
			out = append(out, e)
		}
	}
	return out
}

// emitted counts how often the events were emitted: a repeated event is
// one object with a series.
func emitted(evs []eventsv1.Event) int32 {
	var n int32
	for _, e := range evs {
		if e.Series != nil {
			n += e.Series.Count
		} else {
			n++
		}
	}
	return n
}

func generation(g Gomega, key client.ObjectKey) int64 {
	c := &kvapi.KVCluster{}
	g.Expect(k8sClient.Get(context.Background(), key, c)).To(Succeed())
	return c.Generation
}

// TestHoldAndMissingPoolAreAnnounced: a held-back change and a missing
// CompactionPool are events as well as conditions, one per change: further
// passes over the same state announce nothing, a second held-back change is
// announced again, the missing pool is not.
func TestHoldAndMissingPoolAreAnnounced(t *testing.T) {
	g := NewWithT(t)
	g.SetDefaultEventuallyTimeout(eventually)
	g.SetDefaultEventuallyPollingInterval(poll)
	ctx := context.Background()
	ns := newNamespace(t)
	c := validCluster(ns, "held")
	c.Spec.CompactionPoolRef = &kvapi.CompactionPoolReference{Name: "absent"}
	g.Expect(k8sClient.Create(ctx, c)).To(Succeed())
	key := client.ObjectKeyFromObject(c)
	// The StatefulSet has no status: its rollout has not completed, and
	// every change is held back.
	g.Eventually(func(g Gomega) string { return storeHash(g, key) }).ShouldNot(BeEmpty())
	updateCluster(g, key, func(c *kvapi.KVCluster) { c.Spec.Image = "bellows:v2" })
	g.Eventually(func(g Gomega) {
		g.Expect(progressing(g, key).Reason).To(Equal(kvapi.ReasonWaitingForRollout))
	}).Should(Succeed())

	held := func(g Gomega) []eventsv1.Event { return clusterEvents(g, ns, c.UID, kvapi.ReasonWaitingForRollout) }
	missing := func(g Gomega) []eventsv1.Event { return clusterEvents(g, ns, c.UID, kvapi.ReasonCompactionPoolMissing) }
	g.Eventually(func(g Gomega) {
		g.Expect(held(g)).To(HaveLen(1))
		g.Expect(held(g)[0].Type).To(Equal(corev1.EventTypeNormal))
		g.Expect(held(g)[0].Note).To(HavePrefix(fmt.Sprintf("generation %d: a spec change waits", generation(g, key))))
		g.Expect(missing(g)).To(HaveLen(1))
		g.Expect(missing(g)[0].Type).To(Equal(corev1.EventTypeWarning))
		g.Expect(missing(g)[0].Note).To(ContainSubstring(`CompactionPool "absent" does not exist`))
	}).Should(Succeed())

	// More passes over the same state announce nothing.
	rec := events.NewFakeRecorder(100)
	r := &KVClusterReconciler{Client: k8sClient, Scheme: testScheme, Recorder: rec, APIReader: k8sClient, NetworkPolicies: suiteNetworkPolicies}
	for range 3 {
		_, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: key})
		g.Expect(err).NotTo(HaveOccurred())
	}
	g.Expect(drain(rec)).To(BeEmpty())
	g.Expect(emitted(held(g))).To(Equal(int32(1)))
	g.Expect(emitted(missing(g))).To(Equal(int32(1)))

	// A second change held back is announced; the pool, still missing, is not.
	updateCluster(g, key, func(c *kvapi.KVCluster) { c.Spec.Image = "bellows:v3" })
	g.Eventually(func(g Gomega) int32 { return emitted(held(g)) }).Should(Equal(int32(2)))
	g.Expect(emitted(missing(g))).To(Equal(int32(1)))
}
