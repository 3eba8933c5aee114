package controllers

import (
	"context"
	"fmt"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kvapi "github.com/bellows-kv/bellows/api/v1alpha1"
	"github.com/bellows-kv/bellows/internal/contract"
)

// rolledOutStores creates a cluster of n stores, rolled out, with n Ready
// pods, and returns its key and UID.
func rolledOutStores(t *testing.T, g *WithT, name string, n int32) (client.ObjectKey, types.UID) {
	t.Helper()
	c := validCluster(newNamespace(t), name)
	c.Spec.Replicas = n
	g.Expect(k8sClient.Create(context.Background(), c)).To(Succeed())
	key := client.ObjectKeyFromObject(c)
	g.Eventually(func(g Gomega) string { return storeHash(g, key) }).ShouldNot(BeEmpty())
	for i := range int(n) {
		putStorePod(g, key, i, "r", podReadyState)
	}
	markRolledOut(g, key, desiredStoreHash(g, key))
	g.Eventually(func(g Gomega) {
		got := &kvapi.KVCluster{}
		g.Expect(k8sClient.Get(context.Background(), key, got)).To(Succeed())
		g.Expect(condition(got.Status.Conditions, kvapi.ConditionReady).Reason).To(Equal(kvapi.ReasonReconciled))
	}).Should(Succeed())
	return key, c.UID
}

func storeSet(g Gomega, key client.ObjectKey) *appsv1.StatefulSet {
	sts := &appsv1.StatefulSet{}
	g.Expect(k8sClient.Get(context.Background(), key, sts)).To(Succeed())
	return sts
}

// markedDraining awaits the drain's mark and a Progressing condition that
// names what the leaving pods hold (so the operator has judged them after
// marking), and checks the StatefulSet kept its 5 replicas.
func markedDraining(g *WithT, key client.ObjectKey, holds ...string) {
	g.Eventually(func(g Gomega) {
		sts := storeSet(g, key)
		g.Expect(sts.Annotations).To(HaveKeyWithValue(contract.ServingReplicasAnnotation, "3"))
		g.Expect(sts.Annotations).To(HaveKey(contract.DrainingSinceAnnotation))
		g.Expect(*sts.Spec.Replicas).To(Equal(int32(5)))
		cond := progressing(g, key)
		g.Expect(cond.Reason).To(Equal(kvapi.ReasonDraining))
		for _, h := range holds {
			g.Expect(cond.Message).To(ContainSubstring(h))
		}
	}).Should(Succeed())
}

// TestScaleDownDrainsFirst: spec.replicas 5 → 3 marks stores 3 and 4 as
// leaving and keeps 5 replicas while they hold regions; once they say they
// hold none, the StatefulSet shrinks to 3 and the mark goes.
func TestScaleDownDrainsFirst(t *testing.T) {
	g := NewWithT(t)
	g.SetDefaultEventuallyTimeout(eventually)
	g.SetDefaultEventuallyPollingInterval(poll)
	key, uid := rolledOutStores(t, g, "drain", 5)
	held.set(key.Namespace, "drain-3", 2)
	held.set(key.Namespace, "drain-4", 1)
	updateCluster(g, key, func(c *kvapi.KVCluster) { c.Spec.Replicas = 3 })
	markedDraining(g, key, "drain-3 holds 2 regions", "drain-4 holds 1 regions", "stores 3, 4")
	g.Consistently(func(g Gomega) int32 { return *storeSet(g, key).Spec.Replicas }, 2*contract.StoreDrainRecheck).Should(Equal(int32(5)))
	got := &kvapi.KVCluster{}
	g.Expect(k8sClient.Get(context.Background(), key, got)).To(Succeed())
	g.Expect(condition(got.Status.Conditions, kvapi.ConditionReady).Reason).To(Equal(kvapi.ReasonDraining))

	held.set(key.Namespace, "drain-3", 0)
	g.Consistently(func(g Gomega) int32 { return *storeSet(g, key).Spec.Replicas }, contract.StoreDrainRecheck+time.Second).Should(Equal(int32(5)),
		"drain-4 still holds a region")
	held.set(key.Namespace, "drain-4", 0)
	g.Eventually(func(g Gomega) {
		sts := storeSet(g, key)
		g.Expect(*sts.Spec.Replicas).To(Equal(int32(3)))
		g.Expect(sts.Annotations).NotTo(HaveKey(contract.ServingReplicasAnnotation))
		g.Expect(sts.Annotations).NotTo(HaveKey(contract.DrainingSinceAnnotation))
	}).Should(Succeed())
	g.Eventually(func(g Gomega) {
		evs := clusterEvents(g, key.Namespace, uid, kvapi.ReasonDrained)
		g.Expect(evs).To(HaveLen(1))
		g.Expect(evs[0].Type).To(Equal(corev1.EventTypeNormal))
	}).Should(Succeed())
	g.Expect(clusterEvents(g, key.Namespace, uid, kvapi.ReasonDrainTimedOut)).To(BeEmpty())
}

// TestScaleDownDrainTimesOut: leaving stores that still hold regions
// StoreDrainTimeout after the mark are removed anyway, with a Warning. The
// test moves the drain's start back instead of waiting.
func TestScaleDownDrainTimesOut(t *testing.T) {
	g := NewWithT(t)
	g.SetDefaultEventuallyTimeout(eventually)
	g.SetDefaultEventuallyPollingInterval(poll)
	key, uid := rolledOutStores(t, g, "stuckdrain", 5)
	held.set(key.Namespace, "stuckdrain-3", 4)
	updateCluster(g, key, func(c *kvapi.KVCluster) { c.Spec.Replicas = 3 })
	markedDraining(g, key, "stuckdrain-3 holds 4 regions")
	past := time.Now().Add(-contract.StoreDrainTimeout - time.Minute).UTC().Format(time.RFC3339)
	// A pass that read the StatefulSet just before this edit puts the
	// mark it judged back (the edit is drift to it): edit until a pass
	// has judged the earlier start.
	g.Eventually(func(g Gomega) {
		sts := storeSet(g, key)
		if _, marked := sts.Annotations[contract.ServingReplicasAnnotation]; marked && sts.Annotations[contract.DrainingSinceAnnotation] != past {
			sts.Annotations[contract.DrainingSinceAnnotation] = past
			g.Expect(k8sClient.Update(context.Background(), sts)).To(Succeed()) // a conflict: the next attempt
		}
		g.Expect(*sts.Spec.Replicas).To(Equal(int32(3)))
		g.Expect(sts.Annotations).NotTo(HaveKey(contract.ServingReplicasAnnotation))
	}).Should(Succeed())
	g.Eventually(func(g Gomega) {
		evs := clusterEvents(g, key.Namespace, uid, kvapi.ReasonDrainTimedOut)
		g.Expect(evs).To(HaveLen(1))
		g.Expect(evs[0].Type).To(Equal(corev1.EventTypeWarning))
		g.Expect(evs[0].Note).To(ContainSubstring("stores 3, 4 were not drained within 10m0s"))
	}).Should(Succeed())
	g.Expect(clusterEvents(g, key.Namespace, uid, kvapi.ReasonDrained)).To(BeEmpty())
}

// TestScaleUpClearsAStaleDrainMark: a mark left on the StatefulSet (an
// interrupted drain) goes with a scale-up: nothing is leaving.
func TestScaleUpClearsAStaleDrainMark(t *testing.T) {
	g := NewWithT(t)
	g.SetDefaultEventuallyTimeout(eventually)
	g.SetDefaultEventuallyPollingInterval(poll)
	key, _ := rolledOutStores(t, g, "grow", 3)
	edit(g, key, &appsv1.StatefulSet{}, func(sts *appsv1.StatefulSet) {
		sts.Annotations[contract.ServingReplicasAnnotation] = "2"
		sts.Annotations[contract.DrainingSinceAnnotation] = time.Now().UTC().Format(time.RFC3339)
	})
	updateCluster(g, key, func(c *kvapi.KVCluster) { c.Spec.Replicas = 5 })
	g.Eventually(func(g Gomega) {
		sts := storeSet(g, key)
		g.Expect(*sts.Spec.Replicas).To(Equal(int32(5)))
		g.Expect(sts.Annotations).NotTo(HaveKey(contract.ServingReplicasAnnotation), fmt.Sprint(sts.Annotations))
		g.Expect(sts.Annotations).NotTo(HaveKey(contract.DrainingSinceAnnotation))
	}).Should(Succeed())
}
