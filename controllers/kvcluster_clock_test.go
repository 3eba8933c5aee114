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
	"sigs.k8s.io/controller-runtime/pkg/client"

	kvapi "github.com/bellows-kv/bellows/api/v1alpha1"
	"github.com/bellows-kv/bellows/internal/contract"
)

// storeArgs are the store container's args of the cluster's StatefulSet.
func storeArgs(g Gomega, key client.ObjectKey) []string {
	sts := &appsv1.StatefulSet{}
	g.Expect(k8sClient.Get(context.Background(), key, sts)).To(Succeed())
	return sts.Spec.Template.Spec.Containers[0].Args
}

// TestClockChecksOffIsReported: clock.maxOffset 0 with several stores is
// accepted and passed to the stores, and sets ClockOffsetBounded=False with
// one Warning event; setting a bound rolls it to the stores and clears the
// condition.
func TestClockChecksOffIsReported(t *testing.T) {
	g := NewWithT(t)
	g.SetDefaultEventuallyTimeout(eventually)
	g.SetDefaultEventuallyPollingInterval(poll)
	ctx := context.Background()
	ns := newNamespace(t)

	c := validCluster(ns, "clock-off") // 3 replicas
	c.Spec.Clock.MaxOffset = "0"
	g.Expect(k8sClient.Create(ctx, c)).To(Succeed())
	key := client.ObjectKeyFromObject(c)

	g.Eventually(func(g Gomega) {
		got := &kvapi.KVCluster{}
		g.Expect(k8sClient.Get(ctx, key, got)).To(Succeed())
		cond := condition(got.Status.Conditions, kvapi.ConditionClockOffsetBounded)
		g.Expect(cond.Status).To(Equal(metav1.ConditionFalse))
		g.Expect(cond.Reason).To(Equal(kvapi.ReasonClockChecksOff))
		g.Expect(cond.ObservedGeneration).To(Equal(got.Generation))
		g.Expect(cond.Message).To(And(
			ContainSubstring("clock checks off with 3 stores: transactions across stores may read stale snapshots"),
			ContainSubstring("e.g. 250ms (the default)")))
		g.Expect(hasEvent(eventsFor(g, ns, c.Name), corev1.EventTypeWarning, kvapi.ReasonClockChecksOff, "clock checks off with 3 stores")).To(BeTrue())
		// A warning, not a refusal: the stores run without the checks.
		g.Expect(storeArgs(g, key)).To(ContainElement(contract.Arg(contract.FlagMaxClockOffset, "0s")))
	}).Should(Succeed())

	// A bound: the next spec goes out once the first has rolled out.
	markRolledOut(g, key, desiredStoreHash(g, key))
	updateCluster(g, key, func(c *kvapi.KVCluster) { c.Spec.Clock.MaxOffset = "100ms" })
	g.Eventually(func(g Gomega) {
		g.Expect(storeArgs(g, key)).To(ContainElement(contract.Arg(contract.FlagMaxClockOffset, "100ms")))
		got := &kvapi.KVCluster{}
		g.Expect(k8sClient.Get(ctx, key, got)).To(Succeed())
		cond := condition(got.Status.Conditions, kvapi.ConditionClockOffsetBounded)
		g.Expect(cond.Status).To(Equal(metav1.ConditionTrue))
		g.Expect(cond.Reason).To(Equal(kvapi.ReasonAsExpected))
		g.Expect(cond.ObservedGeneration).To(Equal(got.Generation))
		g.Expect(cond.Message).To(ContainSubstring("the stores' clocks may be at most 100ms apart (clock.maxOffset)"))
	}).Should(Succeed())
	var warnings int
	for _, e := range eventsFor(g, ns, c.Name) {
		if e.Reason == kvapi.ReasonClockChecksOff {
			warnings++
		}
	}
	g.Expect(warnings).To(Equal(1), "one event for one message, not one per pass")
}

// TestClockConditionFromThePass: the step and the status without an API
// server: each case's condition, one event per message, and a stored value
// outside the bounds stops the pass (InvalidSpec) with the condition left
// as it was.
func TestClockConditionFromThePass(t *testing.T) {
	cluster := func(offset kvapi.Duration, replicas int32) *kvapi.KVCluster {
		c := validCluster("ns", "kv")
		c.Generation = 3
		c.Spec.Replicas = replicas
		c.Spec.Clock.MaxOffset = offset
		c.SetDefaults()
		return c
	}
	for _, tc := range []struct {
		name           string
		c              *kvapi.KVCluster
		status         metav1.ConditionStatus
		reason, msg    string
		warningsIssued int
	}{
		{"default", cluster("", 3), metav1.ConditionTrue, kvapi.ReasonAsExpected,
			"the stores' clocks may be at most 250ms apart (clock.maxOffset): transactional reads restart within it", 0},
		{"checks off with several stores", cluster("0s", 3), metav1.ConditionFalse, kvapi.ReasonClockChecksOff,
			"clock.maxOffset is 0: clock checks off with 3 stores: transactions across stores may read stale snapshots", 1},
		{"checks off with one store", cluster("0s", 1), metav1.ConditionTrue, kvapi.ReasonSingleStore,
			"clock.maxOffset is 0 (clock checks off) with one store", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := events.NewFakeRecorder(10)
			r := &KVClusterReconciler{Recorder: rec}
			pass := func(orig *kvapi.KVCluster) *kvPass {
				p := &kvPass{orig: orig, cluster: orig.DeepCopy()}
				if res := r.checkClock(context.Background(), p); res.Err() != nil {
					t.Fatal(res.Err())
				}
				clockCondition(p)
				return p
			}
			p := pass(tc.c)
			cond := condition(p.cluster.Status.Conditions, kvapi.ConditionClockOffsetBounded)
			if cond.Status != tc.status || cond.Reason != tc.reason || !strings.HasPrefix(cond.Message, tc.msg) || cond.ObservedGeneration != 3 {
				t.Errorf("condition %+v\nwant %s %s %q…", cond, tc.status, tc.reason, tc.msg)
			}
			evs := drain(rec)
			if len(evs) != tc.warningsIssued {
				t.Fatalf("events %q, want %d", evs, tc.warningsIssued)
			}
			for _, e := range evs {
				if !strings.Contains(e, "Warning "+kvapi.ReasonClockChecksOff) {
					t.Errorf("event %q", e)
				}
			}
			pass(p.cluster)
			if evs := drain(rec); len(evs) != 0 {
				t.Errorf("a second pass with the same message announced %q", evs)
			}
		})
	}
	// Stored before the CRD's rule: the pass stops, the pods keep their bound.
	c := cluster("30s", 3)
	setCondition(&c.Status.Conditions, 2, kvapi.ConditionClockOffsetBounded, true, kvapi.ReasonAsExpected, "earlier")
	p := &kvPass{orig: c, cluster: c.DeepCopy()}
	res := (&KVClusterReconciler{Recorder: events.NewFakeRecorder(10)}).checkClock(context.Background(), p)
	if !res.IsInvalid() || !strings.Contains(res.Err().Error(), "spec.clock.maxOffset: 30s is above the maximum 10s") {
		t.Errorf("a bound above the maximum: %v, want InvalidSpec naming the field", res)
	}
	clockCondition(p)
	if cond := condition(p.cluster.Status.Conditions, kvapi.ConditionClockOffsetBounded); cond.Message != "earlier" || cond.ObservedGeneration != 2 {
		t.Errorf("an unchecked pass changed the condition: %+v", cond)
	}
}
