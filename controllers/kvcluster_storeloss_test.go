package controllers

import (
	"cmp"
	"context"
	"fmt"
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
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	kvapi "github.com/bellows-kv/bellows/api/v1alpha1"
	"github.com/bellows-kv/bellows/internal/contract"
)

// The envtest suite has no node controller, no kubelet, no scheduler, no
// volume binder and no StatefulSet controller: these tests write what they
// would. A Node's Ready condition is set through its status, with the time
// it changed, so "NotReady for longer than the grace period" is a time in
// the past rather than a wait. The API server itself keeps a pod bound to a
// node until its kubelet confirms a graceful delete (only a delete with
// grace period 0 removes it at once), and keeps a deleted PVC with its
// kubernetes.io/pvc-protection finalizer, which no controller removes here.

// lostAgo is a NotReady transition long enough ago for the node to be lost.
func lostAgo() time.Time { return time.Now().Add(-contract.StoreNodeLostAfter - time.Minute) }

// putNode creates node name (cluster-scoped: named after the test's
// namespace), Ready or not since the given time.
func putNode(g *WithT, name string, ready corev1.ConditionStatus, since time.Time) {
	ctx := context.Background()
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{corev1.LabelHostname: name}}}
	g.Expect(k8sClient.Create(ctx, n)).To(Succeed())
	setNodeReady(g, name, ready, since)
}

// setNodeReady writes the node's Ready condition, as the node controller
// would.
func setNodeReady(g *WithT, name string, ready corev1.ConditionStatus, since time.Time) {
	g.Eventually(func() error {
		n := &corev1.Node{}
		if err := k8sClient.Get(context.Background(), client.ObjectKey{Name: name}, n); err != nil {
			return err
		}
		t := metav1.NewTime(since)
		n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: ready, LastTransitionTime: t, LastHeartbeatTime: t, Reason: "SetByTheTest"}}
		return k8sClient.Status().Update(context.Background(), n)
	}).Should(Succeed())
}

// lossCluster creates a cluster of three stores with the durability mode,
// and waits for its StatefulSet.
func lossCluster(t *testing.T, g *WithT, name, durability string) (*kvapi.KVCluster, client.ObjectKey) {
	t.Helper()
	ns := newNamespace(t)
	c := validCluster(ns, name)
	c.Spec.Image = "bellows:v1"
	c.Spec.Durability.Mode = durability
	g.Expect(k8sClient.Create(context.Background(), c)).To(Succeed())
	key := client.ObjectKeyFromObject(c)
	g.Eventually(func(g Gomega) string { return storeHash(g, key) }).ShouldNot(BeEmpty())
	return c, key
}

// putStoreOnNode plays the volume binder, the scheduler and the kubelet for
// pod `ordinal` of the cluster's StatefulSet: a local PersistentVolume
// usable on node alone, the pod's PVC bound to it, and the pod bound to
// node, Ready or not. It returns the pod's and the PVC's UIDs.
func putStoreOnNode(g *WithT, c *kvapi.KVCluster, ordinal int, node string, ready bool) (pod, pvc types.UID) {
	sts := &appsv1.StatefulSet{}
	g.Expect(k8sClient.Get(context.Background(), client.ObjectKeyFromObject(c), sts)).To(Succeed())
	return putStoreOfSet(g, sts, ordinal, node, ready)
}

// putStoreOfSet is putStoreOnNode for pod `ordinal` of sts.
func putStoreOfSet(g *WithT, sts *appsv1.StatefulSet, ordinal int, node string, ready bool) (pod, pvc types.UID) {
	ctx := context.Background()
	name := fmt.Sprintf("%s-%d", sts.Name, ordinal)
	claim := sts.Spec.VolumeClaimTemplates[0].Name + "-" + name

	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: name + "-on-" + node},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resourceMust("1Gi")},
			AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimDelete,
			PersistentVolumeSource:        corev1.PersistentVolumeSource{Local: &corev1.LocalVolumeSource{Path: "/var/lib/bellows"}},
			NodeAffinity: &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
				MatchExpressions: []corev1.NodeSelectorRequirement{{Key: corev1.LabelHostname, Operator: corev1.NodeSelectorOpIn, Values: []string{node}}},
			}}}},
		},
	}
	g.Expect(k8sClient.Create(ctx, pv)).To(Succeed())
	p := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: sts.Namespace, Name: claim, Labels: sts.Spec.Selector.MatchLabels},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resourceMust("1Gi")}},
			VolumeName:  pv.Name,
		},
	}
	g.Expect(k8sClient.Create(ctx, p)).To(Succeed())
	p.Status = corev1.PersistentVolumeClaimStatus{Phase: corev1.ClaimBound,
		AccessModes: p.Spec.AccessModes, Capacity: corev1.ResourceList{corev1.ResourceStorage: resourceMust("1Gi")}}
	g.Expect(k8sClient.Status().Update(ctx, p)).To(Succeed())

	labels := map[string]string{appsv1.StatefulSetRevisionLabel: "r", appsv1.PodIndexLabel: fmt.Sprint(ordinal)}
	for k, v := range sts.Spec.Template.Labels {
		labels[k] = v
	}
	ctr := sts.Spec.Template.Spec.Containers[0]
	po := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: sts.Namespace, Name: name, Labels: labels,
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(sts, appsv1.SchemeGroupVersion.WithKind("StatefulSet"))},
		},
		Spec: corev1.PodSpec{
			NodeName:                     node,
			AutomountServiceAccountToken: ptr.To(false),
			Containers:                   []corev1.Container{{Name: ctr.Name, Image: ctr.Image}},
			Volumes: []corev1.Volume{{Name: sts.Spec.VolumeClaimTemplates[0].Name,
				VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim}}}},
		},
	}
	g.Expect(k8sClient.Create(ctx, po)).To(Succeed())
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	now := metav1.Now()
	po.Status = corev1.PodStatus{
		Phase:      corev1.PodRunning,
		Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: status, LastTransitionTime: now}},
		ContainerStatuses: []corev1.ContainerStatus{{Name: ctr.Name, Image: ctr.Image, Ready: ready,
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}}}},
	}
	g.Expect(k8sClient.Status().Update(ctx, po)).To(Succeed())
	return po.UID, p.UID
}

// untouched asserts that the pod and the PVC are the ones created, and
// that neither is being deleted.
func untouched(g Gomega, ns, pod string, podUID, pvcUID types.UID) {
	p := &corev1.Pod{}
	g.Expect(k8sClient.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: pod}, p)).To(Succeed())
	g.Expect(p.UID).To(Equal(podUID), "pod %s was replaced", pod)
	g.Expect(p.DeletionTimestamp).To(BeNil(), "pod %s is being deleted", pod)
	pvc := &corev1.PersistentVolumeClaim{}
	g.Expect(k8sClient.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "wal-" + pod}, pvc)).To(Succeed())
	g.Expect(pvc.UID).To(Equal(pvcUID))
	g.Expect(pvc.DeletionTimestamp).To(BeNil(), "PVC wal-%s is being deleted", pod)
}

// claimDeleted asserts that the PVC is gone or being deleted (its
// pvc-protection finalizer stays: no controller removes it here).
func claimDeleted(g Gomega, ns, name string) {
	pvc := &corev1.PersistentVolumeClaim{}
	err := k8sClient.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, pvc)
	if apierrors.IsNotFound(err) {
		return
	}
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(pvc.DeletionTimestamp).NotTo(BeNil(), "PVC %s is not being deleted", name)
}

func storeLost(g Gomega, key client.ObjectKey) metav1.Condition {
	c := &kvapi.KVCluster{}
	g.Expect(k8sClient.Get(context.Background(), key, c)).To(Succeed())
	return condition(c.Status.Conditions, kvapi.ConditionStoreLost)
}

// TestStorePodsOnLostNodesAreReplacedWithEmptyVolumes: in the default
// durability mode (Bucket), a store pod left Terminating on a node NotReady
// for longer than the grace period, and one whose node is gone, are
// force-deleted with their PVCs, whose local volumes no other node can
// mount; StoreLost says so until every pod is Ready again, and a Warning
// event per pod names it, its node and why. The pod on a Ready node, and its
// PVC, are never touched.
func TestStorePodsOnLostNodesAreReplacedWithEmptyVolumes(t *testing.T) {
	g := NewWithT(t)
	g.SetDefaultEventuallyTimeout(eventually)
	g.SetDefaultEventuallyPollingInterval(poll)
	ctx := context.Background()
	c, key := lossCluster(t, g, "lost", "")
	ns := key.Namespace
	live, dead, gone := ns+"-live", ns+"-dead", ns+"-gone"
	putNode(g, live, corev1.ConditionTrue, time.Now())
	putNode(g, dead, corev1.ConditionTrue, time.Now())
	pod0, pvc0 := putStoreOnNode(g, c, 0, live, true)
	putStoreOnNode(g, c, 1, dead, true)
	// The node's kubelet stops answering: the pod stays Terminating after
	// the taint manager's eviction (a graceful delete), however long.
	g.Expect(k8sClient.Delete(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "lost-1"}})).To(Succeed())
	since := lostAgo()
	setNodeReady(g, dead, corev1.ConditionUnknown, since)
	putStoreOnNode(g, c, 2, gone, false)
	setStoreStatus(g, key, desiredStoreHash(g, key), "r", "r", 1, allReplicas)

	g.Eventually(func(g Gomega) {
		g.Expect(podUID(g, ns, "lost-1")).To(BeEmpty(), "the Terminating pod on the lost node")
		g.Expect(podUID(g, ns, "lost-2")).To(BeEmpty(), "the pod on the node that is gone")
		claimDeleted(g, ns, "wal-lost-1")
		claimDeleted(g, ns, "wal-lost-2")
	}).Should(Succeed())
	untouched(g, ns, "lost-0", pod0, pvc0)

	g.Eventually(func(g Gomega) {
		cond := storeLost(g, key)
		g.Expect(cond.Status).To(Equal(metav1.ConditionTrue))
		g.Expect(cond.Reason).To(Equal(kvapi.ReasonStoreReplaced))
		g.Expect(cond.Message).To(ContainSubstring(fmt.Sprintf("pod lost-1 lost (its node %s has been unreachable (Ready Unknown) since %s, longer than %s): force-deleted",
			dead, since.UTC().Format(time.RFC3339), contract.StoreNodeLostAfter)))
		g.Expect(cond.Message).To(ContainSubstring(fmt.Sprintf("its PVC wal-lost-1 (volume lost-1-on-%s, usable on node %s alone) deleted", dead, dead)))
		g.Expect(cond.Message).To(ContainSubstring(fmt.Sprintf("pod lost-2 lost (its node %s no longer exists): force-deleted", gone)))
		g.Expect(cond.Message).NotTo(ContainSubstring("lost-0"))
	}).Should(Succeed())
	g.Eventually(func(g Gomega) {
		evs := clusterEvents(g, ns, c.UID, kvapi.ReasonStoreReplaced)
		g.Expect(evs).To(HaveLen(2))
		for _, e := range evs {
			g.Expect(e.Type).To(Equal(corev1.EventTypeWarning))
			g.Expect(e.Action).To(Equal("ReplaceLostStore"))
			g.Expect(e.Related).NotTo(BeNil())
			g.Expect(e.Note).To(ContainSubstring("pod " + e.Related.Name + " lost (its node "))
			g.Expect(e.Note).To(ContainSubstring("spec.durability.mode Bucket keeps every acknowledged write in the bucket"))
		}
	}).Should(Succeed())
	untouched(g, ns, "lost-0", pod0, pvc0)

	// StoreLost stays True until the replacements are Ready. The pods
	// gone, the pvc-protection controller lets their PVCs go; the
	// StatefulSet controller recreates the pods with new PVCs, bound on
	// the live node, where they become Ready.
	for _, pvc := range []string{"wal-lost-1", "wal-lost-2"} {
		g.Eventually(func() error {
			p := &corev1.PersistentVolumeClaim{}
			err := k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: pvc}, p)
			if apierrors.IsNotFound(err) {
				return nil
			}
			if err != nil {
				return err
			}
			p.Finalizers = nil
			return k8sClient.Update(ctx, p)
		}).Should(Succeed())
		g.Eventually(func() bool {
			return apierrors.IsNotFound(k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: pvc}, &corev1.PersistentVolumeClaim{}))
		}).Should(BeTrue())
	}
	putStoreOnNode(g, c, 1, live, true)
	g.Expect(storeLost(g, key).Reason).To(Equal(kvapi.ReasonStoreReplaced))
	putStoreOnNode(g, c, 2, live, true)
	setStoreStatus(g, key, desiredStoreHash(g, key), "r", "r", allReplicas, allReplicas)
	g.Eventually(func(g Gomega) {
		cond := storeLost(g, key)
		g.Expect(cond.Status).To(Equal(metav1.ConditionFalse))
		g.Expect(cond.Reason).To(Equal(kvapi.ReasonAsExpected))
	}).Should(Succeed())
	untouched(g, ns, "lost-0", pod0, pvc0)
}

// TestALostStoreInLocalModeWaitsForAPerson: with durability.mode Local the
// volume of a store lost with its node may hold acknowledged writes no
// bucket has: its pod and PVC are kept, StoreLost and Degraded say that a
// person must act and how, naming the setting, and a Warning event says it
// once. When the person deletes the PVC, the operator replaces the pod.
func TestALostStoreInLocalModeWaitsForAPerson(t *testing.T) {
	g := NewWithT(t)
	g.SetDefaultEventuallyTimeout(eventually)
	g.SetDefaultEventuallyPollingInterval(poll)
	ctx := context.Background()
	c, key := lossCluster(t, g, "local", contract.DurabilityLocal)
	ns := key.Namespace
	live, dead := ns+"-live", ns+"-dead"
	putNode(g, live, corev1.ConditionTrue, time.Now())
	putNode(g, dead, corev1.ConditionFalse, lostAgo())
	pod0, pvc0 := putStoreOnNode(g, c, 0, live, true)
	pod1, pvc1 := putStoreOnNode(g, c, 1, dead, false)
	setStoreStatus(g, key, desiredStoreHash(g, key), "r", "r", 1, allReplicas)

	g.Eventually(func(g Gomega) {
		got := &kvapi.KVCluster{}
		g.Expect(k8sClient.Get(ctx, key, got)).To(Succeed())
		cond := condition(got.Status.Conditions, kvapi.ConditionStoreLost)
		g.Expect(cond.Status).To(Equal(metav1.ConditionTrue))
		g.Expect(cond.Reason).To(Equal(kvapi.ReasonManualActionRequired))
		g.Expect(cond.Message).To(HavePrefix(fmt.Sprintf("pod local-1 is lost (its node %s has been NotReady since", dead)))
		g.Expect(cond.Message).To(ContainSubstring("spec.durability.mode is Local"))
		g.Expect(cond.Message).To(ContainSubstring(fmt.Sprintf("a person must act: bring node %s back, or delete PVC wal-local-1", dead)))
		deg := condition(got.Status.Conditions, kvapi.ConditionDegraded)
		g.Expect(deg.Status).To(Equal(metav1.ConditionTrue))
		g.Expect(deg.Reason).To(Equal(kvapi.ReasonManualActionRequired))
		g.Expect(deg.Message).To(Equal(cond.Message))
	}).Should(Succeed())
	g.Eventually(func(g Gomega) {
		evs := clusterEvents(g, ns, c.UID, kvapi.ReasonManualActionRequired)
		g.Expect(evs).To(HaveLen(1))
		g.Expect(evs[0].Type).To(Equal(corev1.EventTypeWarning))
		g.Expect(evs[0].Note).To(ContainSubstring("spec.durability.mode is Local"))
	}).Should(Succeed())
	untouched(g, ns, "local-1", pod1, pvc1)
	untouched(g, ns, "local-0", pod0, pvc0)
	g.Expect(clusterEvents(g, ns, c.UID, kvapi.ReasonStoreReplaced)).To(BeEmpty())

	// The person gives the writes up.
	g.Expect(k8sClient.Delete(ctx, &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "wal-local-1"}})).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(podUID(g, ns, "local-1")).To(BeEmpty())
		got := &kvapi.KVCluster{}
		g.Expect(k8sClient.Get(ctx, key, got)).To(Succeed())
		cond := condition(got.Status.Conditions, kvapi.ConditionStoreLost)
		g.Expect(cond.Reason).To(Equal(kvapi.ReasonStoreReplaced))
		g.Expect(cond.Message).To(ContainSubstring("pod local-1 lost (its node " + dead))
		g.Expect(condition(got.Status.Conditions, kvapi.ConditionDegraded).Status).To(Equal(metav1.ConditionFalse))
	}).Should(Succeed())
	untouched(g, ns, "local-0", pod0, pvc0)
	g.Expect(emitted(clusterEvents(g, ns, c.UID, kvapi.ReasonManualActionRequired))).To(Equal(int32(1)))
}

// TestANodeNotReadyWithinTheGracePeriodIsLeftAlone: a store pod whose node
// has just become NotReady is not acted on: StoreLost is False with reason
// NodeNotReady and says when the pod counts as lost. Once the node has been
// NotReady for longer than the grace period, the pod is replaced.
func TestANodeNotReadyWithinTheGracePeriodIsLeftAlone(t *testing.T) {
	g := NewWithT(t)
	g.SetDefaultEventuallyTimeout(eventually)
	g.SetDefaultEventuallyPollingInterval(poll)
	c, key := lossCluster(t, g, "blip", "")
	ns := key.Namespace
	node := ns + "-blip"
	putNode(g, node, corev1.ConditionTrue, time.Now())
	pod0, pvc0 := putStoreOnNode(g, c, 0, node, true)
	setStoreStatus(g, key, desiredStoreHash(g, key), "r", "r", 0, allReplicas)
	since := time.Now().Truncate(time.Second)
	setNodeReady(g, node, corev1.ConditionFalse, since)

	g.Eventually(func(g Gomega) {
		cond := storeLost(g, key)
		g.Expect(cond.Status).To(Equal(metav1.ConditionFalse))
		g.Expect(cond.Reason).To(Equal(kvapi.ReasonNodeNotReady))
		g.Expect(cond.Message).To(Equal(fmt.Sprintf("pod blip-0: its node %s has been NotReady since %s; it is replaced at %s if the node stays so",
			node, since.UTC().Format(time.RFC3339), since.Add(contract.StoreNodeLostAfter).UTC().Format(time.RFC3339))))
	}).Should(Succeed())
	untouched(g, ns, "blip-0", pod0, pvc0)
	g.Expect(clusterEvents(g, ns, c.UID, kvapi.ReasonStoreReplaced)).To(BeEmpty())

	// Time passes, the node stays NotReady.
	setNodeReady(g, node, corev1.ConditionFalse, lostAgo())
	g.Eventually(func(g Gomega) {
		g.Expect(podUID(g, ns, "blip-0")).To(BeEmpty())
		claimDeleted(g, ns, "wal-blip-0")
		g.Expect(storeLost(g, key).Reason).To(Equal(kvapi.ReasonStoreReplaced))
	}).Should(Succeed())
}

// TestAStorePodWhosePVCIsDeletedIsReplaced: a PVC deleted under a running
// store is kept by its pod (pvc-protection), and the StatefulSet would give
// the pod back the same claim: the operator deletes the pod, with its grace
// period, since its node is Ready and its kubelet runs it (the store then
// hands its regions over on SIGTERM).
func TestAStorePodWhosePVCIsDeletedIsReplaced(t *testing.T) {
	g := NewWithT(t)
	g.SetDefaultEventuallyTimeout(eventually)
	g.SetDefaultEventuallyPollingInterval(poll)
	ctx := context.Background()
	c, key := lossCluster(t, g, "novol", "")
	ns := key.Namespace
	node := ns + "-live"
	putNode(g, node, corev1.ConditionTrue, time.Now())
	pod0, _ := putStoreOnNode(g, c, 0, node, true)
	setStoreStatus(g, key, desiredStoreHash(g, key), "r", "r", allReplicas, allReplicas)
	g.Eventually(func(g Gomega) string { return storeLost(g, key).Reason }).Should(Equal(kvapi.ReasonAsExpected))

	g.Expect(k8sClient.Delete(ctx, &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "wal-novol-0"}})).To(Succeed())
	g.Eventually(func(g Gomega) {
		p := &corev1.Pod{}
		g.Expect(k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: "novol-0"}, p)).To(Succeed())
		g.Expect(p.UID).To(Equal(pod0))
		g.Expect(p.DeletionTimestamp).NotTo(BeNil())
		g.Expect(p.DeletionGracePeriodSeconds).To(Equal(p.Spec.TerminationGracePeriodSeconds), "deleted with its own grace period")
		cond := storeLost(g, key)
		g.Expect(cond.Reason).To(Equal(kvapi.ReasonStoreReplaced))
		g.Expect(cond.Message).To(Equal("pod novol-0 lost (its PVC wal-novol-0 is being deleted): deleted, so that StatefulSet novol recreates it"))
	}).Should(Succeed())
}

// TestJudgeStore: what makes a storage pod lost, and what only may.
func TestJudgeStore(t *testing.T) {
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	node := func(s corev1.ConditionStatus, ago time.Duration) *corev1.Node {
		return &corev1.Node{Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{
			{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionFalse},
			{Type: corev1.NodeReady, Status: s, LastTransitionTime: metav1.NewTime(now.Add(-ago))},
		}}}
	}
	pod := func(nodeName string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "s-1"}, Spec: corev1.PodSpec{NodeName: nodeName}}
	}
	pvc := &corev1.PersistentVolumeClaim{}
	deleting := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{DeletionTimestamp: ptr.To(metav1.NewTime(now))}}
	grace := contract.StoreNodeLostAfter
	tainted := func(n *corev1.Node) *corev1.Node {
		n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: corev1.TaintNodeOutOfService, Value: "nodeshutdown", Effect: corev1.TaintEffectNoExecute})
		return n
	}
	for _, tc := range []struct {
		name      string
		v         storeView
		want      lossVerdict
		wantLater time.Duration // lostAt - now
		lostAfter time.Duration // 0: the default
	}{
		{"Ready", storeView{pod: pod("n"), node: node(corev1.ConditionTrue, time.Hour), claim: "wal-s-1", pvc: pvc}, lossVerdict{}, 0, 0},
		{"no Ready condition yet", storeView{pod: pod("n"), node: &corev1.Node{}, claim: "wal-s-1", pvc: pvc}, lossVerdict{}, 0, 0},
		{"NotReady within the grace period", storeView{pod: pod("n"), node: node(corev1.ConditionFalse, grace-time.Second), claim: "wal-s-1", pvc: pvc},
			lossVerdict{why: "its node n has been NotReady since 2026-05-01T11:59:31Z"}, time.Second, 0},
		{"NotReady within the grace period, PVC being deleted", storeView{pod: pod("n"), node: node(corev1.ConditionFalse, time.Second), claim: "wal-s-1", pvc: deleting},
			lossVerdict{why: "its node n has been NotReady since 2026-05-01T11:59:59Z"}, grace - time.Second, 0},
		{"NotReady for the grace period", storeView{pod: pod("n"), node: node(corev1.ConditionFalse, grace), claim: "wal-s-1", pvc: pvc},
			lossVerdict{lost: true, nodeLost: true, why: "its node n has been NotReady since 2026-05-01T11:59:30Z, longer than 30s"}, 0, 0},
		{"unreachable", storeView{pod: pod("n"), node: node(corev1.ConditionUnknown, time.Hour), claim: "wal-s-1", pvc: pvc},
			lossVerdict{lost: true, nodeLost: true, why: "its node n has been unreachable (Ready Unknown) since 2026-05-01T11:00:00Z, longer than 30s"}, 0, 0},
		{"node gone", storeView{pod: pod("n"), nodeGone: true, claim: "wal-s-1", pvc: pvc},
			lossVerdict{lost: true, nodeLost: true, why: "its node n no longer exists"}, 0, 0},
		{"PVC gone, Ready node", storeView{pod: pod("n"), node: node(corev1.ConditionTrue, time.Hour), claim: "wal-s-1"},
			lossVerdict{lost: true, why: "its PVC wal-s-1 no longer exists"}, 0, 0},
		{"PVC gone, not scheduled", storeView{pod: pod(""), claim: "wal-s-1"},
			lossVerdict{lost: true, why: "its PVC wal-s-1 no longer exists"}, 0, 0},
		{"PVC being deleted", storeView{pod: pod("n"), node: node(corev1.ConditionTrue, time.Hour), claim: "wal-s-1", pvc: deleting},
			lossVerdict{lost: true, why: "its PVC wal-s-1 is being deleted"}, 0, 0},
		{"not scheduled", storeView{pod: pod(""), claim: "wal-s-1", pvc: pvc}, lossVerdict{}, 0, 0},
		{"NotReady past the default, within a longer nodeLostAfter", storeView{pod: pod("n"), node: node(corev1.ConditionFalse, time.Minute), claim: "wal-s-1", pvc: pvc},
			lossVerdict{why: "its node n has been NotReady since 2026-05-01T11:59:00Z"}, time.Minute, 2 * time.Minute},
		{"NotReady for a longer nodeLostAfter", storeView{pod: pod("n"), node: node(corev1.ConditionFalse, 2*time.Minute), claim: "wal-s-1", pvc: pvc},
			lossVerdict{lost: true, nodeLost: true, why: "its node n has been NotReady since 2026-05-01T11:58:00Z, longer than 2m0s"}, 0, 2 * time.Minute},
		{"out of service, NotReady a second ago", storeView{pod: pod("n"), node: tainted(node(corev1.ConditionFalse, time.Second)), claim: "wal-s-1", pvc: pvc},
			lossVerdict{lost: true, nodeLost: true, why: "its node n is NotReady and tainted node.kubernetes.io/out-of-service: declared shut down"}, 0, 0},
		{"out of service, still Ready: its kubelet evicts what does not tolerate the taint", storeView{pod: pod("n"), node: tainted(node(corev1.ConditionTrue, time.Hour)), claim: "wal-s-1", pvc: pvc},
			lossVerdict{}, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := judgeStore(tc.v, now, cmp.Or(tc.lostAfter, grace))
			var later time.Duration
			if !got.lostAt.IsZero() {
				later = got.lostAt.Sub(now)
			}
			got.lostAt = time.Time{}
			if got != tc.want || later != tc.wantLater {
				t.Errorf("got %+v, lost in %v; want %+v, lost in %v", got, later, tc.want, tc.wantLater)
			}
		})
	}
}

// TestVolumeOnNodeAlone: a volume counts as tied to the lost node only when
// every term of its required node affinity names that node alone.
func TestVolumeOnNodeAlone(t *testing.T) {
	host := func(op corev1.NodeSelectorOperator, v ...string) corev1.NodeSelectorTerm {
		return corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: corev1.LabelHostname, Operator: op, Values: v}}}
	}
	pv := func(terms ...corev1.NodeSelectorTerm) *corev1.PersistentVolume {
		v := &corev1.PersistentVolume{}
		if terms != nil {
			v.Spec.NodeAffinity = &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: terms}}
		}
		return v
	}
	zone := corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: corev1.LabelTopologyZone, Operator: corev1.NodeSelectorOpIn, Values: []string{"a"}}}}
	byName := corev1.NodeSelectorTerm{MatchFields: []corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{"node-1"}}}}
	zoneAndHost := host(corev1.NodeSelectorOpIn, "h1")
	zoneAndHost.MatchExpressions = append(zoneAndHost.MatchExpressions, zone.MatchExpressions...)
	for _, tc := range []struct {
		name string
		pv   *corev1.PersistentVolume
		want bool
	}{
		{"no affinity (a network volume)", pv(), false},
		{"a zone", pv(zone), false},
		{"the node's hostname", pv(host(corev1.NodeSelectorOpIn, "h1")), true},
		{"the node's name as hostname (the node is gone)", pv(host(corev1.NodeSelectorOpIn, "node-1")), true},
		{"the node by metadata.name", pv(byName), true},
		{"hostname and zone in one term", pv(zoneAndHost), true},
		{"another node", pv(host(corev1.NodeSelectorOpIn, "h2")), false},
		{"the node or another", pv(host(corev1.NodeSelectorOpIn, "h1", "h2")), false},
		{"a second term for a zone", pv(host(corev1.NodeSelectorOpIn, "h1"), zone), false},
		{"not the node", pv(host(corev1.NodeSelectorOpNotIn, "h2")), false},
	} {
		if got := volumeOnNodeAlone(tc.pv, "node-1", "h1"); got != tc.want {
			t.Errorf("%s: got %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestALostPodUpdatedWhileItsPVCIsDeletedGoesInTheSamePass: a status write
// that lands between the delete of a lost pod's PVC and the delete of the
// pod (the pod's delete precondition then fails) does not leave the pod to
// a later pass, which would report it in an event of its own: the pass reads
// the pod again, finds it still lost, deletes it, and reports the pod and
// its PVC together.
func TestALostPodUpdatedWhileItsPVCIsDeletedGoesInTheSamePass(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := newNamespace(t)
	// No KVCluster owns this StatefulSet, so the suite's manager leaves its
	// pod alone: the pass under test is the only one acting on it.
	labels := map[string]string{"app": "orphan"}
	sts := &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "orphan", UID: types.UID(ns + "-orphan")},
		Spec: appsv1.StatefulSetSpec{
			Selector:             &metav1.LabelSelector{MatchLabels: labels},
			VolumeClaimTemplates: []corev1.PersistentVolumeClaim{{ObjectMeta: metav1.ObjectMeta{Name: "wal"}}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "store", Image: "bellows:v1"}}},
			},
		},
	}
	gone := ns + "-gone" // no such node
	putStoreOfSet(g, sts, 0, gone, true)

	w, err := client.NewWithWatch(cfg, client.Options{Scheme: testScheme})
	g.Expect(err).NotTo(HaveOccurred())
	statusWrites := 0
	ic := interceptor.NewClient(w, interceptor.Funcs{
		Delete: func(ctx context.Context, cl client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
			if err := cl.Delete(ctx, obj, opts...); err != nil {
				return err
			}
			if _, isClaim := obj.(*corev1.PersistentVolumeClaim); !isClaim {
				return nil
			}
			// The pod's status changes meanwhile, as a kubelet or the node
			// lifecycle controller may write it.
			p := &corev1.Pod{}
			if err := cl.Get(ctx, client.ObjectKey{Namespace: ns, Name: "orphan-0"}, p); err != nil {
				return err
			}
			p.Status.Message = "written while the PVC was deleted"
			statusWrites++
			return cl.Status().Update(ctx, p)
		},
	})
	r := &KVClusterReconciler{Client: ic, APIReader: ic, Scheme: testScheme}
	pod := &corev1.Pod{}
	g.Expect(ic.Get(ctx, client.ObjectKey{Namespace: ns, Name: "orphan-0"}, pod)).To(Succeed())
	v, err := viewStore(ctx, ic, sts, pod)
	g.Expect(err).NotTo(HaveOccurred())
	why := judgeStore(v, time.Now(), contract.StoreNodeLostAfter)
	g.Expect(why.lost && why.nodeLost).To(BeTrue(), "the pod on a node that is gone is lost: %+v", why)

	did, ask, err := r.replaceLost(ctx, validCluster(ns, "orphan"), sts, v, why, contract.StoreNodeLostAfter)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(ask).To(BeEmpty())
	g.Expect(statusWrites).To(Equal(1), "the pod changed between the two deletes")
	g.Expect(did).To(ContainSubstring(fmt.Sprintf("pod orphan-0 lost (its node %s no longer exists): force-deleted", gone)))
	g.Expect(did).To(ContainSubstring("its PVC wal-orphan-0"))
	g.Expect(podUID(g, ns, "orphan-0")).To(BeEmpty(), "the lost pod is deleted in the pass that deleted its PVC")
	claimDeleted(g, ns, "wal-orphan-0")
}

// TestNodeLostAfterIsTheClustersAndAnOutOfServiceNodeIsLostAtOnce: with
// spec.failover.nodeLostAfter at 10m, a pod whose node has been NotReady for
// longer than the default 30s is left alone, and the condition says when it
// is replaced; once a person taints the node node.kubernetes.io/out-of-service
// (it is shut down), the pod and its node-bound PVC go at once. Values
// outside the setting's bounds are refused by the API server, naming it.
func TestNodeLostAfterIsTheClustersAndAnOutOfServiceNodeIsLostAtOnce(t *testing.T) {
	g := NewWithT(t)
	g.SetDefaultEventuallyTimeout(eventually)
	g.SetDefaultEventuallyPollingInterval(poll)
	ctx := context.Background()
	ns := newNamespace(t)
	for _, bad := range []struct{ value, says string }{
		{"2h", "failover.nodeLostAfter: 2h is above the maximum 1h"},
		{"-5s", "failover.nodeLostAfter: -5s is negative"},
		{"soon", `failover.nodeLostAfter: "soon" is not a duration`},
	} {
		c := validCluster(ns, "refused")
		c.Spec.Failover.NodeLostAfter = kvapi.Duration(bad.value)
		err := k8sClient.Create(ctx, c)
		g.Expect(err).To(HaveOccurred(), "nodeLostAfter %s", bad.value)
		g.Expect(err.Error()).To(ContainSubstring(bad.says))
	}

	c := validCluster(ns, "patient")
	c.Spec.Image = "bellows:v1"
	c.Spec.Failover.NodeLostAfter = "10m"
	g.Expect(k8sClient.Create(ctx, c)).To(Succeed())
	key := client.ObjectKeyFromObject(c)
	g.Eventually(func(g Gomega) string { return storeHash(g, key) }).ShouldNot(BeEmpty())
	node := ns + "-down"
	since := lostAgo().Truncate(time.Second)
	putNode(g, node, corev1.ConditionUnknown, since)
	putStoreOnNode(g, c, 0, node, true)
	setStoreStatus(g, key, desiredStoreHash(g, key), "r", "r", 0, allReplicas)

	g.Eventually(func(g Gomega) {
		cond := storeLost(g, key)
		g.Expect(cond.Status).To(Equal(metav1.ConditionFalse))
		g.Expect(cond.Reason).To(Equal(kvapi.ReasonNodeNotReady))
		g.Expect(cond.Message).To(Equal(fmt.Sprintf("pod patient-0: its node %s has been unreachable (Ready Unknown) since %s; it is replaced at %s if the node stays so",
			node, since.UTC().Format(time.RFC3339), since.Add(10*time.Minute).UTC().Format(time.RFC3339))))
	}).Should(Succeed())
	g.Expect(podUID(g, ns, "patient-0")).NotTo(BeEmpty(), "replaced before its nodeLostAfter")

	// The node is shut down for good: a person taints it.
	g.Eventually(func() error {
		n := &corev1.Node{}
		if err := k8sClient.Get(ctx, client.ObjectKey{Name: node}, n); err != nil {
			return err
		}
		n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: corev1.TaintNodeOutOfService, Value: "nodeshutdown", Effect: corev1.TaintEffectNoExecute})
		return k8sClient.Update(ctx, n)
	}).Should(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(podUID(g, ns, "patient-0")).To(BeEmpty())
		claimDeleted(g, ns, "wal-patient-0")
		cond := storeLost(g, key)
		g.Expect(cond.Reason).To(Equal(kvapi.ReasonStoreReplaced))
		g.Expect(cond.Message).To(ContainSubstring(fmt.Sprintf("pod patient-0 lost (its node %s is unreachable (Ready Unknown) and tainted node.kubernetes.io/out-of-service: declared shut down): force-deleted", node)))
	}).Should(Succeed())
}
