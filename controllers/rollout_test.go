package controllers

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	kvapi "github.com/bellows-kv/bellows/api/v1alpha1"
	"github.com/bellows-kv/bellows/controllers/specs"
	"github.com/bellows-kv/bellows/internal/contract"
)

// The envtest suite has no StatefulSet controller and no kubelet: these
// tests play both. They write the StatefulSet's status (revisions, replica
// counts) through its status subresource, and create the pods by hand with
// the StatefulSet's labels, its controller-revision-hash and a controller
// reference to it, their readiness and container states set through the
// pods' status subresource.

// podState is what the kubelet would report for a pod.
type podState struct {
	ready bool
	// waiting is a container's waiting reason ("" for a running container).
	waiting string
	// notReadySince is when the pod's Ready condition last changed.
	notReadySince time.Time
}

var (
	podReadyState    = podState{ready: true}
	imagePullBackOff = podState{waiting: "ImagePullBackOff"}
)

// allReplicas stands for spec.replicas in setStoreStatus's counts.
const allReplicas = -1

// setStoreStatus waits until the StatefulSet carries the spec with hash
// wantHash, then writes status: the generation it observed, the revisions,
// and replica counts (allReplicas: every replica).
func setStoreStatus(g *WithT, key client.ObjectKey, wantHash, current, update string, ready, updated int32) {
	g.Expect(wantHash).NotTo(BeEmpty())
	g.Eventually(func() error {
		sts := &appsv1.StatefulSet{}
		if err := k8sClient.Get(context.Background(), key, sts); err != nil {
			return err
		}
		if got := specs.SpecHash(sts); got != wantHash {
			return fmt.Errorf("StatefulSet spec hash %q, waiting for %q", got, wantHash)
		}
		n := *sts.Spec.Replicas
		ready, updated := ready, updated
		if ready == allReplicas {
			ready = n
		}
		if updated == allReplicas {
			updated = n
		}
		sts.Status = appsv1.StatefulSetStatus{
			ObservedGeneration: sts.Generation, Replicas: n, ReadyReplicas: ready, AvailableReplicas: ready,
			CurrentReplicas: n - updated, UpdatedReplicas: updated, CurrentRevision: current, UpdateRevision: update,
		}
		if current == update {
			sts.Status.CurrentReplicas = n
		}
		return k8sClient.Status().Update(context.Background(), sts)
	}).Should(Succeed())
}

// putStorePod (re)creates pod `ordinal` of the StatefulSet at revision, in
// state st, and returns its UID.
func putStorePod(g *WithT, key client.ObjectKey, ordinal int, revision string, st podState) types.UID {
	ctx := context.Background()
	sts := &appsv1.StatefulSet{}
	g.Expect(k8sClient.Get(ctx, key, sts)).To(Succeed())
	name := fmt.Sprintf("%s-%d", sts.Name, ordinal)
	old := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: name}}
	g.Expect(client.IgnoreNotFound(k8sClient.Delete(ctx, old, client.GracePeriodSeconds(0)))).To(Succeed())
	g.Eventually(func() bool { return apierrors.IsNotFound(k8sClient.Get(ctx, client.ObjectKeyFromObject(old), old)) }).Should(BeTrue())

	labels := map[string]string{appsv1.StatefulSetRevisionLabel: revision, appsv1.PodIndexLabel: fmt.Sprint(ordinal)}
	for k, v := range sts.Spec.Template.Labels {
		labels[k] = v
	}
	c := sts.Spec.Template.Spec.Containers[0]
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: key.Namespace, Name: name, Labels: labels,
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(sts, appsv1.SchemeGroupVersion.WithKind("StatefulSet"))},
		},
		Spec: corev1.PodSpec{
			AutomountServiceAccountToken: ptr.To(false),
			Containers:                   []corev1.Container{{Name: c.Name, Image: c.Image}},
		},
	}
	g.Expect(k8sClient.Create(ctx, pod)).To(Succeed())

	since := st.notReadySince
	if since.IsZero() {
		since = time.Now()
	}
	ready := corev1.ConditionFalse
	phase := corev1.PodPending
	cs := corev1.ContainerStatus{Name: c.Name, Image: c.Image, Ready: st.ready}
	switch {
	case st.ready:
		ready, phase = corev1.ConditionTrue, corev1.PodRunning
		cs.State.Running = &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(since)}
	case st.waiting != "":
		cs.State.Waiting = &corev1.ContainerStateWaiting{Reason: st.waiting, Message: "set by the test"}
	default:
		phase = corev1.PodRunning
		cs.State.Running = &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(since)}
	}
	pod.Status = corev1.PodStatus{
		Phase:             phase,
		Conditions:        []corev1.PodCondition{{Type: corev1.PodReady, Status: ready, LastTransitionTime: metav1.NewTime(since)}},
		ContainerStatuses: []corev1.ContainerStatus{cs},
	}
	g.Expect(k8sClient.Status().Update(ctx, pod)).To(Succeed())
	return pod.UID
}

// podUID is the UID of a pod, "" when it does not exist.
func podUID(g Gomega, ns, name string) types.UID {
	p := &corev1.Pod{}
	err := k8sClient.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, p)
	if apierrors.IsNotFound(err) {
		return ""
	}
	g.Expect(err).NotTo(HaveOccurred())
	return p.UID
}

func storeImage(g Gomega, key client.ObjectKey) string {
	sts := &appsv1.StatefulSet{}
	g.Expect(k8sClient.Get(context.Background(), key, sts)).To(Succeed())
	return sts.Spec.Template.Spec.Containers[0].Image
}

// rolledOutCluster creates a cluster of three stores on image
// "bellows:v1", rolled out at revision "good": three Ready pods.
func rolledOutCluster(t *testing.T, g *WithT, name string) (client.ObjectKey, map[string]types.UID) {
	t.Helper()
	ns := newNamespace(t)
	c := validCluster(ns, name)
	c.Spec.Image = "bellows:v1"
	g.Expect(k8sClient.Create(context.Background(), c)).To(Succeed())
	key := client.ObjectKeyFromObject(c)
	g.Eventually(func(g Gomega) string { return storeHash(g, key) }).ShouldNot(BeEmpty())
	uids := map[string]types.UID{}
	for i := range 3 {
		uids[fmt.Sprintf("%s-%d", name, i)] = putStorePod(g, key, i, "good", podReadyState)
	}
	setStoreStatus(g, key, desiredStoreHash(g, key), "good", "good", 3, 3)
	g.Eventually(func(g Gomega) {
		got := &kvapi.KVCluster{}
		g.Expect(k8sClient.Get(context.Background(), key, got)).To(Succeed())
		g.Expect(condition(got.Status.Conditions, kvapi.ConditionReady).Status).To(Equal(metav1.ConditionTrue))
	}).Should(Succeed())
	return key, uids
}

// TestStuckRolloutIsReplaced: an image that cannot be pulled leaves the
// rollout stuck on its first pod; the fixed spec is written although that
// rollout never completes, and once the StatefulSet controller has taken
// it, the stuck pod (and only it) is deleted so that it is recreated from
// the fixed spec. The Ready pods of the old revision are never touched.
func TestStuckRolloutIsReplaced(t *testing.T) {
	g := NewWithT(t)
	g.SetDefaultEventuallyTimeout(eventually)
	g.SetDefaultEventuallyPollingInterval(poll)
	key, uids := rolledOutCluster(t, g, "stuck")
	ns := key.Namespace

	// The bad image: the StatefulSet controller replaced the highest pod,
	// whose image cannot be pulled, and goes no further (OrderedReady).
	updateCluster(g, key, func(c *kvapi.KVCluster) { c.Spec.Image = "bellows:missing" })
	g.Eventually(func(g Gomega) string { return storeImage(g, key) }).Should(Equal("bellows:missing"))
	badHash := desiredStoreHash(g, key)
	uids["stuck-2"] = putStorePod(g, key, 2, "bad", imagePullBackOff)
	setStoreStatus(g, key, badHash, "good", "bad", 2, 1)
	g.Eventually(func(g Gomega) {
		p := progressing(g, key)
		g.Expect(p.Status).To(Equal(metav1.ConditionFalse))
		g.Expect(p.Reason).To(Equal(kvapi.ReasonRolloutStuck))
		g.Expect(p.Message).To(ContainSubstring("pod stuck-2 (container store: its image cannot be pulled)"))
	}).Should(Succeed())
	g.Expect(podUID(g, ns, "stuck-2")).To(Equal(uids["stuck-2"]), "a pod stuck at the update revision would come back the same: it stays")

	// The fix is written although the rollout never completed.
	updateCluster(g, key, func(c *kvapi.KVCluster) { c.Spec.Image = "bellows:v1" })
	g.Eventually(func(g Gomega) string { return storeImage(g, key) }).Should(Equal("bellows:v1"))
	// The pass that wrote it says so in Progressing, which the next pass
	// may already have replaced (RollingUpdate) before a poll sees it; the
	// Warning event stays.
	g.Eventually(func(g Gomega) {
		g.Expect(hasEvent(eventsFor(g, ns, key.Name), corev1.EventTypeWarning, kvapi.ReasonRolloutReplaced,
			"wrote the newer spec over the rollout of revision bad, stuck on pod stuck-2")).To(BeTrue())
	}).Should(Succeed())
	g.Expect(podUID(g, ns, "stuck-2")).To(Equal(uids["stuck-2"]), "nothing is deleted before the StatefulSet controller has taken the fix")

	// The StatefulSet controller takes it: the template is the one of
	// revision "good" again. The stuck pod is now on a superseded revision
	// and is deleted; the Ready ones are not.
	setStoreStatus(g, key, desiredStoreHash(g, key), "good", "good", 2, 2)
	g.Eventually(func(g Gomega) types.UID { return podUID(g, ns, "stuck-2") }).Should(BeEmpty())
	g.Eventually(func(g Gomega) {
		p := progressing(g, key)
		g.Expect(p.Reason).To(Equal(kvapi.ReasonRolloutReplaced))
		g.Expect(p.Message).To(ContainSubstring("deleted stuck-2 (revision bad: container store waiting: ImagePullBackOff: set by the test)"))
		g.Expect(p.Message).To(ContainSubstring("recreates them at revision good"))
	}).Should(Succeed())
	for _, name := range []string{"stuck-0", "stuck-1"} {
		g.Expect(podUID(g, ns, name)).To(Equal(uids[name]), "Ready pod %s must never be deleted", name)
	}
	c := &kvapi.KVCluster{}
	g.Expect(k8sClient.Get(context.Background(), key, c)).To(Succeed())
	g.Eventually(func(g Gomega) {
		var notes []string
		for _, e := range clusterEvents(g, ns, c.UID, kvapi.ReasonRolloutReplaced) {
			g.Expect(e.Type).To(Equal(corev1.EventTypeWarning))
			notes = append(notes, e.Note)
		}
		g.Expect(notes).To(ConsistOf(
			ContainSubstring("wrote the newer spec over the rollout of revision bad, stuck on pod stuck-2 (revision bad: container store waiting: ImagePullBackOff"),
			ContainSubstring("deleted stuck-2 (revision bad: container store waiting: ImagePullBackOff"),
		))
		g.Expect(emitted(clusterEvents(g, ns, c.UID, kvapi.ReasonRolloutStuck))).To(Equal(int32(1)))
	}).Should(Succeed())

	// The recreated pod comes up Ready: the rollout completes, and the
	// condition says so.
	putStorePod(g, key, 2, "good", podReadyState)
	setStoreStatus(g, key, desiredStoreHash(g, key), "good", "good", 3, 3)
	g.Eventually(func(g Gomega) {
		p := progressing(g, key)
		g.Expect(p.Status).To(Equal(metav1.ConditionFalse))
		g.Expect(p.Reason).To(Equal(kvapi.ReasonReconciled))
	}).Should(Succeed())
}

// TestSlowRolloutHoldsTheNextChange: pods that are not Ready yet but not
// stuck (a container being created, not Ready for less than the progress
// deadline) hold the next change back, and nothing is deleted; once the
// deadline has passed, the rollout is stuck and the change goes through.
func TestSlowRolloutHoldsTheNextChange(t *testing.T) {
	g := NewWithT(t)
	g.SetDefaultEventuallyTimeout(eventually)
	g.SetDefaultEventuallyPollingInterval(poll)
	key, uids := rolledOutCluster(t, g, "slow")
	ns := key.Namespace

	updateCluster(g, key, func(c *kvapi.KVCluster) { c.Spec.Image = "bellows:v2" })
	g.Eventually(func(g Gomega) string { return storeImage(g, key) }).Should(Equal("bellows:v2"))
	v2Hash := desiredStoreHash(g, key)
	creating := podState{waiting: "ContainerCreating"}
	uids["slow-2"] = putStorePod(g, key, 2, "v2", creating)
	// A pod of the old revision that is not Ready either, but not stuck:
	// superseded, yet never deleted for that alone.
	uids["slow-1"] = putStorePod(g, key, 1, "good", podState{notReadySince: time.Now().Add(-time.Minute)})
	setStoreStatus(g, key, v2Hash, "good", "v2", 1, 1)

	updateCluster(g, key, func(c *kvapi.KVCluster) { c.Spec.Image = "bellows:v3" })
	g.Eventually(func(g Gomega) {
		p := progressing(g, key)
		g.Expect(p.Reason).To(Equal(kvapi.ReasonWaitingForRollout))
		g.Expect(p.ObservedGeneration).To(Equal(generation(g, key)))
	}).Should(Succeed())
	g.Expect(storeImage(g, key)).To(Equal("bellows:v2"), "the held-back change must not reach the StatefulSet")
	for name, uid := range uids {
		g.Expect(podUID(g, ns, name)).To(Equal(uid), "pod %s must not be deleted while the rollout is merely slow", name)
	}

	// The new pod has not been Ready for longer than the progress
	// deadline: now the rollout is stuck, and the held change goes.
	putStorePod(g, key, 2, "v2", podState{notReadySince: time.Now().Add(-contract.RolloutProgressDeadline - time.Minute)})
	// The operator does not watch pods; it looks again every
	// rolloutRecheck. A touch of the cluster saves the test that wait.
	updateCluster(g, key, func(c *kvapi.KVCluster) { c.Labels = map[string]string{"touched": "1"} })
	g.Eventually(func(g Gomega) string { return storeImage(g, key) }).Should(Equal("bellows:v3"))
}

// TestIsStuck: what makes a pod stuck, and what never does.
func TestIsStuck(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	pod := func(ready bool, since time.Time, waiting string) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", CreationTimestamp: metav1.NewTime(since)}}
		st := corev1.ConditionFalse
		if ready {
			st = corev1.ConditionTrue
		}
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: st, LastTransitionTime: metav1.NewTime(since)}}
		if waiting != "" {
			p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "store", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: waiting, Message: "m"}}}}
		}
		return p
	}
	recent, old := now.Add(-time.Minute), now.Add(-contract.RolloutProgressDeadline)
	terminating := pod(false, old, "ImagePullBackOff")
	terminating.DeletionTimestamp = ptr.To(metav1.NewTime(now))
	initWaiting := pod(false, recent, "")
	initWaiting.Status.InitContainerStatuses = []corev1.ContainerStatus{{Name: "init", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CreateContainerConfigError"}}}}
	noCondition := pod(false, old, "")
	noCondition.Status.Conditions = nil
	for _, tc := range []struct {
		name  string
		pod   *corev1.Pod
		stuck bool
		class string
	}{
		{"Ready, even past the deadline with a waiting sidecar", pod(true, old, "CrashLoopBackOff"), false, ""},
		{"being deleted", terminating, false, ""},
		{"image pull back-off", pod(false, recent, "ImagePullBackOff"), true, "container store: its image cannot be pulled"},
		{"image pull error: the same words as the back-off", pod(false, recent, "ErrImagePull"), true, "container store: its image cannot be pulled"},
		{"image never pulled", pod(false, recent, "ErrImageNeverPull"), true, "container store: its image is not on the node and may not be pulled"},
		{"invalid image name", pod(false, recent, "InvalidImageName"), true, "container store: its image name is invalid"},
		{"crash loop", pod(false, recent, "CrashLoopBackOff"), true, "container store: it crash-loops"},
		{"container config error", pod(false, recent, "CreateContainerConfigError"), true, "container store: its container cannot be configured"},
		{"container create error", pod(false, recent, "CreateContainerError"), true, "container store: its container cannot be created"},
		{"init container", initWaiting, true, "container init: its container cannot be configured"},
		{"being created", pod(false, recent, "ContainerCreating"), false, ""},
		{"not Ready, within the deadline", pod(false, now.Add(-contract.RolloutProgressDeadline+time.Second), ""), false, ""},
		{"not Ready for the deadline", pod(false, old, ""), true, "not Ready since 2026-01-01T11:50:00Z, longer than 10m0s"},
		{"no Ready condition: since creation", noCondition, true, "not Ready since 2026-01-01T11:50:00Z, longer than 10m0s"},
	} {
		class, detail, stuck := isStuck(tc.pod, now)
		if stuck != tc.stuck || class != tc.class {
			t.Errorf("%s: stuck %t (%q), want %t (%q)", tc.name, stuck, class, tc.stuck, tc.class)
		}
		if stuck && !strings.HasPrefix(detail, strings.SplitN(tc.class, ":", 2)[0]) {
			t.Errorf("%s: detail %q does not name what class %q names", tc.name, detail, tc.class)
		}
	}
}

// TestJudgePods: which of a StatefulSet's pods the rollout is stuck on,
// and which are superseded and replaceable.
func TestJudgePods(t *testing.T) {
	now := time.Now()
	sts := &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "kv", UID: "sts-uid", Generation: 2},
		Spec: appsv1.StatefulSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "kv"}},
			UpdateStrategy: appsv1.StatefulSetUpdateStrategy{
				Type:          appsv1.RollingUpdateStatefulSetStrategyType,
				RollingUpdate: &appsv1.RollingUpdateStatefulSetStrategy{Partition: ptr.To(int32(1))},
			},
		},
		Status: appsv1.StatefulSetStatus{ObservedGeneration: 2, CurrentRevision: "old", UpdateRevision: "new"},
	}
	pod := func(name, revision string, ready bool, owned bool) client.Object {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, CreationTimestamp: metav1.NewTime(now),
			Labels: map[string]string{"app": "kv", appsv1.StatefulSetRevisionLabel: revision}}}
		if owned {
			p.OwnerReferences = []metav1.OwnerReference{*metav1.NewControllerRef(sts, appsv1.SchemeGroupVersion.WithKind("StatefulSet"))}
		}
		st := corev1.ConditionFalse
		if ready {
			st = corev1.ConditionTrue
		}
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: st, LastTransitionTime: metav1.NewTime(now)}}
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "store", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}}}}
		return p
	}
	objs := []client.Object{
		pod("kv-0", "old", false, true),  // below the partition: would come back at "old"
		pod("kv-1", "old", true, true),   // Ready
		pod("kv-2", "old", false, true),  // superseded
		pod("kv-3", "new", false, true),  // the rollout is stuck on it
		pod("kv-4", "old", false, false), // not the StatefulSet's
		pod("other", "old", false, true), // no ordinal of this StatefulSet
	}
	c := fake.NewClientBuilder().WithScheme(fakeScheme(t)).WithObjects(objs...).Build()
	names := func(ps []stuckPod) []string {
		var out []string
		for _, p := range ps {
			out = append(out, p.pod.Name)
		}
		return out
	}
	rp, err := judgePods(context.Background(), c, sts, now)
	if err != nil {
		t.Fatal(err)
	}
	if got := names(rp.stuck); !slices.Equal(got, []string{"kv-3"}) {
		t.Errorf("stuck %v, want [kv-3]", got)
	}
	if got := names(rp.superseded); !slices.Equal(got, []string{"kv-2"}) {
		t.Errorf("superseded %v, want [kv-2]", got)
	}

	// Before the StatefulSet controller has observed the latest spec, its
	// revisions describe an older one: nothing is judged.
	sts.Generation = 3
	rp, err = judgePods(context.Background(), c, sts, now)
	if err != nil || len(rp.stuck)+len(rp.superseded) != 0 {
		t.Errorf("unobserved spec: stuck %v, superseded %v, err %v", names(rp.stuck), names(rp.superseded), err)
	}
}
