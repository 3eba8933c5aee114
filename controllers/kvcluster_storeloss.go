package controllers

// A storage pod lost with its node or its volume (docs/failover.md §6).
//
// The data path does not wait for Kubernetes: a store that stops renewing
// its liveness lease is fenced by the balancer, and its regions move within
// seconds, whatever its pod's state. What stays broken is the StatefulSet:
// the pod of a node that is NotReady or gone stays Terminating (or Unknown)
// until a kubelet that will not answer confirms it, the StatefulSet
// controller recreates no pod whose name still exists, and a ReadWriteOnce
// volume that only its node can mount cannot follow a new pod elsewhere.
// So:
//
//   - A storage pod is lost when its node has been NotReady (Ready False or
//     Unknown) for spec.failover.nodeLostAfter (default
//     contract.StoreNodeLostAfter), is not Ready and tainted
//     node.kubernetes.io/out-of-service (a person declared it shut down), or
//     its Node is gone (the node is lost), or when its PVC is gone or being
//     deleted (it cannot run again with the volume it has, and while it
//     exists the PVC is not removed).
//   - A pod on a lost node is force-deleted (grace period 0): no kubelet
//     would run its grace period. Another lost pod is deleted with its grace
//     period, which its kubelet runs: its store releases its regions on
//     SIGTERM instead of leaving them to a failover.
//   - Before the pod, on a lost node, its PVC is deleted when the volume can
//     be used on that node alone (the PersistentVolume's required node
//     affinity names that node and no other: local volumes and node-local
//     provisioners) or no longer exists. The StatefulSet controller creates
//     no pod while its PVC is being deleted, so the pod comes back with a
//     new, empty volume and its store joins empty; the balancer's count
//     pass fills it. A volume that can attach elsewhere is kept and
//     follows the new pod.
//   - That PVC is deleted only in durability mode Bucket, where a volume is
//     a cache: every acknowledged write is in the bucket. In Local mode it
//     may hold the only copy of acknowledged writes the WAL archive had not
//     shipped: the operator then leaves the pod and its PVC alone (a new
//     pod would wait for the same volume) and asks a person to act
//     (StoreLost and Degraded, reason ManualActionRequired, and a Warning
//     event). A person who deletes the PVC lets the operator go on.
//
// Replacing the pod of a store that still runs (its node lost only the API
// server) is safe: the new pod's store is a new incarnation, which waits out
// the old one's liveness lease and then supersedes it, and the bucket fences
// the old one's manifests and WAL streams (docs/failover.md §3, §4).
//
// Invariants: the operator deletes only pods the cluster's StatefulSet
// controls, and only their claims from its volumeClaimTemplates; it judges
// on the cache and acts only after reading the pod, its node and its claim
// from the API server and judging the same again; each delete is
// preconditioned on the UID and resourceVersion it judged; no PVC is ever
// deleted in Local mode.

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	kvapi "github.com/bellows-kv/bellows/api/v1alpha1"
	"github.com/bellows-kv/bellows/internal/contract"
)

// storeLoss is what a pass found out about lost storage pods.
type storeLoss struct {
	// checked says the step ran in this pass.
	checked bool
	// replaced says, per pod, what this pass did to a lost pod.
	replaced []string
	// needsPerson says, per pod, why a lost pod is left alone and what a
	// person can do, in words that do not change from pass to pass.
	needsPerson []string
	// notReady names the pods whose node is NotReady, not yet for long
	// enough, and when they count as lost.
	notReady []string
	// underWay is what an earlier pass reported replacing, while the
	// replaced pods are not all back and Ready ("" when none).
	underWay string
	// lostAfter is spec.failover.nodeLostAfter.
	lostAfter time.Duration
}

// storeView is a storage pod and what its loss is judged on.
type storeView struct {
	pod *corev1.Pod
	// node is the pod's node: nil when the pod is not scheduled, or when
	// the node is gone (nodeGone).
	node     *corev1.Node
	nodeGone bool
	// claim is the name of the pod's PVC ("" when the StatefulSet has no
	// claim template); pvc is nil when it does not exist.
	claim string
	pvc   *corev1.PersistentVolumeClaim
}

// lossVerdict is a storage pod judged.
type lossVerdict struct {
	lost bool
	// nodeLost: the pod's node is lost, so no kubelet runs its grace
	// period and no other node can mount a volume tied to that node.
	nodeLost bool
	// why says why the pod is lost, or why it may soon be, in words that
	// do not change from pass to pass.
	why string
	// lostAt is when a pod whose node is NotReady counts as lost, if its
	// node stays so (zero when the node is Ready, gone, or lost already).
	lostAt time.Time
}

// nodeNotReadySince is when the node stopped being Ready and how it is not
// (NotReady, or unreachable when the node controller stopped hearing from
// its kubelet), or the zero time when it is Ready or has not reported.
func nodeNotReadySince(n *corev1.Node) (time.Time, string) {
	for _, c := range n.Status.Conditions {
		if c.Type != corev1.NodeReady {
			continue
		}
		switch c.Status {
		case corev1.ConditionFalse:
			return c.LastTransitionTime.Time, "NotReady"
		case corev1.ConditionUnknown:
			return c.LastTransitionTime.Time, "unreachable (Ready Unknown)"
		}
	}
	return time.Time{}, ""
}

// judgeStore judges one storage pod at now, its node lost after lostAfter
// NotReady (see the top of the file).
func judgeStore(v storeView, now time.Time, lostAfter time.Duration) lossVerdict {
	node := v.pod.Spec.NodeName
	switch {
	case node == "":
	case v.nodeGone:
		return lossVerdict{lost: true, nodeLost: true, why: fmt.Sprintf("its node %s no longer exists", node)}
	case v.node != nil:
		if since, how := nodeNotReadySince(v.node); how != "" {
			if outOfService(v.node) {
				// As Kubernetes' pod garbage collector: the taint on a
				// node that is not Ready, whatever for how long.
				return lossVerdict{lost: true, nodeLost: true, why: fmt.Sprintf("its node %s is %s and tainted %s: declared shut down", node, how, corev1.TaintNodeOutOfService)}
			}
			why := fmt.Sprintf("its node %s has been %s since %s", node, how, since.UTC().Format(time.RFC3339))
			lostAt := since.Add(lostAfter)
			if !now.Before(lostAt) {
				return lossVerdict{lost: true, nodeLost: true, why: fmt.Sprintf("%s, longer than %s", why, lostAfter)}
			}
			// A PVC being deleted meanwhile is left for when the
			// node is back or lost: a kubelet that may return runs
			// the pod's grace period.
			return lossVerdict{why: why, lostAt: lostAt}
		}
	}
	switch {
	case v.claim == "":
	case v.pvc == nil:
		return lossVerdict{lost: true, why: fmt.Sprintf("its PVC %s no longer exists", v.claim)}
	case v.pvc.DeletionTimestamp != nil:
		return lossVerdict{lost: true, why: fmt.Sprintf("its PVC %s is being deleted", v.claim)}
	}
	return lossVerdict{}
}

// outOfService reports whether n carries Kubernetes' out-of-service taint:
// a person declared the node shut down (non-graceful node shutdown), so
// nothing will run on it again and its pods need not be waited for.
func outOfService(n *corev1.Node) bool {
	for _, t := range n.Spec.Taints {
		if t.Key == corev1.TaintNodeOutOfService {
			return true
		}
	}
	return false
}

// claimName is the PVC the pod mounts from the StatefulSet's claim
// template (the storage pods have one, the WAL volume): the StatefulSet
// controller gives the pod a volume of the template's name that names it.
// "" when the pod has no such volume.
func claimName(sts *appsv1.StatefulSet, pod *corev1.Pod) string {
	if len(sts.Spec.VolumeClaimTemplates) == 0 {
		return ""
	}
	for _, v := range pod.Spec.Volumes {
		if v.Name == sts.Spec.VolumeClaimTemplates[0].Name && v.PersistentVolumeClaim != nil {
			return v.PersistentVolumeClaim.ClaimName
		}
	}
	return ""
}

// viewStore reads what pod's loss is judged on through rd: the cache to
// judge, the API server to confirm before acting.
func viewStore(ctx context.Context, rd client.Reader, sts *appsv1.StatefulSet, pod *corev1.Pod) (storeView, error) {
	v := storeView{pod: pod, claim: claimName(sts, pod)}
	if name := pod.Spec.NodeName; name != "" {
		n := &corev1.Node{}
		err := rd.Get(ctx, client.ObjectKey{Name: name}, n)
		switch {
		case apierrors.IsNotFound(err):
			v.nodeGone = true
		case err != nil:
			return v, fmt.Errorf("get node %s of pod %s: %w", name, pod.Name, err)
		default:
			v.node = n
		}
	}
	if v.claim != "" {
		pvc := &corev1.PersistentVolumeClaim{}
		err := rd.Get(ctx, client.ObjectKey{Namespace: pod.Namespace, Name: v.claim}, pvc)
		switch {
		case apierrors.IsNotFound(err):
		case err != nil:
			return v, fmt.Errorf("get PVC %s of pod %s: %w", v.claim, pod.Name, err)
		default:
			v.pvc = pvc
		}
	}
	return v, nil
}

// replaceLostStores is the step: it judges every storage pod and replaces
// the lost ones. It runs early in the pass, so that nothing that may stop
// a pass (a held-back change, a failed step elsewhere) keeps the
// StatefulSet from being repaired.
func (r *KVClusterReconciler) replaceLostStores(ctx context.Context, p *kvPass) Result {
	c := p.cluster
	lostAfter, err := c.Spec.NodeLostAfter()
	if err != nil {
		return Invalid(err)
	}
	sts := &appsv1.StatefulSet{}
	err = r.Get(ctx, client.ObjectKey{Namespace: c.Namespace, Name: c.StatefulSetName()}, sts)
	if apierrors.IsNotFound(err) {
		p.loss = storeLoss{checked: true, lostAfter: lostAfter}
		return Continue()
	}
	if err != nil {
		return Fail(err)
	}
	if sts.Spec.Selector == nil {
		return Continue()
	}
	loss := storeLoss{checked: true, lostAfter: lostAfter}
	if loss.underWay, err = r.replacementUnderWay(ctx, c, sts); err != nil {
		return Fail(err)
	}
	defer func() { p.loss = loss }()
	var pods corev1.PodList
	if err := r.List(ctx, &pods, client.InNamespace(sts.Namespace), client.MatchingLabels(sts.Spec.Selector.MatchLabels)); err != nil {
		return Fail(fmt.Errorf("list the pods of StatefulSet %s: %w", sts.Name, err))
	}
	now := time.Now()
	var recheck time.Duration
	for i := range pods.Items {
		pod := &pods.Items[i]
		if !metav1.IsControlledBy(pod, sts) {
			continue
		}
		v, err := viewStore(ctx, r.Client, sts, pod)
		if err != nil {
			return Fail(err)
		}
		verdict := judgeStore(v, now, lostAfter)
		if verdict.lost {
			// The cache may lag behind a node that is back, or a
			// pod already replaced.
			live := &corev1.Pod{}
			err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(pod), live)
			if apierrors.IsNotFound(err) {
				continue
			}
			if err != nil {
				return Fail(err)
			}
			if !metav1.IsControlledBy(live, sts) {
				continue
			}
			if v, err = viewStore(ctx, r.APIReader, sts, live); err != nil {
				return Fail(err)
			}
			verdict = judgeStore(v, now, lostAfter)
		}
		if !verdict.lost {
			if !verdict.lostAt.IsZero() {
				loss.notReady = append(loss.notReady, fmt.Sprintf("pod %s: %s; it is replaced at %s if the node stays so",
					pod.Name, verdict.why, verdict.lostAt.UTC().Format(time.RFC3339)))
				recheck = soonest(recheck, verdict.lostAt.Sub(now)+time.Second)
			}
			continue
		}
		did, ask, err := r.replaceLost(ctx, c, sts, v, verdict, lostAfter)
		if did != "" {
			loss.replaced = append(loss.replaced, did)
			log.FromContext(ctx).Info("replaced a lost storage pod", "pod", v.pod.Name, "what", did)
			r.Recorder.Eventf(c, v.pod, corev1.EventTypeWarning, kvapi.ReasonStoreReplaced, "ReplaceLostStore", "%s", truncate(did, maxEventNote))
		}
		if ask != "" {
			loss.needsPerson = append(loss.needsPerson, ask)
		}
		if err != nil {
			return Fail(err)
		}
	}
	if recheck > 0 {
		return Requeue(recheck)
	}
	return Continue()
}

// replacementUnderWay is the StoreLost message of an earlier pass that
// replaced pods, while they are not all back and Ready; "" otherwise. Both
// are read from the API server: the cached cluster may predate that pass's
// status write (a pass that follows at once would then report nothing), and
// a cached pod may not show its deletion yet.
func (r *KVClusterReconciler) replacementUnderWay(ctx context.Context, c *kvapi.KVCluster, sts *appsv1.StatefulSet) (string, error) {
	live := &kvapi.KVCluster{}
	if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(c), live); err != nil {
		return "", client.IgnoreNotFound(err)
	}
	was := conditionOf(live.Status.Conditions, kvapi.ConditionStoreLost)
	if was.Reason != kvapi.ReasonStoreReplaced || sts.Spec.Replicas == nil {
		return "", nil
	}
	var pods corev1.PodList
	if err := r.APIReader.List(ctx, &pods, client.InNamespace(sts.Namespace), client.MatchingLabels(sts.Spec.Selector.MatchLabels)); err != nil {
		return "", fmt.Errorf("list the pods of StatefulSet %s: %w", sts.Name, err)
	}
	ready := map[int]bool{}
	for i := range pods.Items {
		pod := &pods.Items[i]
		ordinal, err := strconv.Atoi(strings.TrimPrefix(pod.Name, sts.Name+"-"))
		if err == nil && metav1.IsControlledBy(pod, sts) && pod.DeletionTimestamp == nil && podReady(pod) {
			ready[ordinal] = true
		}
	}
	for i := range int(*sts.Spec.Replicas) {
		if !ready[i] {
			return was.Message, nil
		}
	}
	return "", nil
}

// volumeState is where a lost pod's volume can be used.
type volumeState int

const (
	// volumeMovable: no volume is bound, or it can attach on other nodes.
	volumeMovable volumeState = iota
	// volumeOnNode: the volume can be used on the lost node alone.
	volumeOnNode
	// volumeGone: the PVC is bound to a PersistentVolume that no longer
	// exists.
	volumeGone
)

// volumeOf says where the bound volume of pvc can be used, and describes
// it.
func (r *KVClusterReconciler) volumeOf(ctx context.Context, pvc *corev1.PersistentVolumeClaim, v storeView) (volumeState, string, error) {
	name := pvc.Spec.VolumeName
	if name == "" {
		return volumeMovable, "no volume bound", nil
	}
	// Read directly: the operator needs no informer on every volume of
	// the cluster for the rare lost node.
	pv := &corev1.PersistentVolume{}
	err := r.APIReader.Get(ctx, client.ObjectKey{Name: name}, pv)
	if apierrors.IsNotFound(err) {
		return volumeGone, fmt.Sprintf("volume %s, which no longer exists", name), nil
	}
	if err != nil {
		return 0, "", fmt.Errorf("get volume %s of PVC %s: %w", name, pvc.Name, err)
	}
	hostname := v.pod.Spec.NodeName
	if v.node != nil && v.node.Labels[corev1.LabelHostname] != "" {
		hostname = v.node.Labels[corev1.LabelHostname]
	}
	if volumeOnNodeAlone(pv, v.pod.Spec.NodeName, hostname) {
		return volumeOnNode, fmt.Sprintf("volume %s, usable on node %s alone", name, v.pod.Spec.NodeName), nil
	}
	return volumeMovable, fmt.Sprintf("volume %s, which other nodes can attach", name), nil
}

// volumeOnNodeAlone reports whether pv can be used on one node only, the
// one named nodeName (hostname is its kubernetes.io/hostname label): every
// term of its required node affinity names that node and no other, by the
// hostname label or by metadata.name. Local volumes and node-local
// provisioners (local-path, TopoLVM, OpenEBS LocalPV) pin volumes so; a
// network volume names a zone, or nothing.
func volumeOnNodeAlone(pv *corev1.PersistentVolume, nodeName, hostname string) bool {
	na := pv.Spec.NodeAffinity
	if na == nil || na.Required == nil || len(na.Required.NodeSelectorTerms) == 0 {
		return false
	}
	names := func(r corev1.NodeSelectorRequirement, key string, want ...string) bool {
		if r.Key != key || r.Operator != corev1.NodeSelectorOpIn || len(r.Values) != 1 {
			return false
		}
		for _, w := range want {
			if r.Values[0] == w {
				return true
			}
		}
		return false
	}
	for _, t := range na.Required.NodeSelectorTerms {
		pinned := false
		for _, r := range t.MatchExpressions {
			pinned = pinned || names(r, corev1.LabelHostname, hostname, nodeName)
		}
		for _, r := range t.MatchFields {
			pinned = pinned || names(r, "metadata.name", nodeName)
		}
		if !pinned {
			return false
		}
	}
	return true
}

// replaceLost acts on a storage pod judged lost, as read from the API
// server: it returns what it did (for the condition and an event), or why
// it leaves the pod to a person. A pod or PVC that changed since it was
// judged is left for the next pass.
func (r *KVClusterReconciler) replaceLost(ctx context.Context, c *kvapi.KVCluster, sts *appsv1.StatefulSet, v storeView, why lossVerdict, lostAfter time.Duration) (did, ask string, err error) {
	pod, node := v.pod, v.pod.Spec.NodeName
	var claimDone string
	if why.nodeLost && v.pvc != nil && v.pvc.DeletionTimestamp == nil {
		state, volume, err := r.volumeOf(ctx, v.pvc, v)
		if err != nil {
			return "", "", err
		}
		switch {
		case state == volumeMovable:
			claimDone = fmt.Sprintf("its PVC %s (%s) is kept and follows it", v.claim, volume)
		case c.Spec.Durability.Mode == contract.DurabilityLocal:
			return "", fmt.Sprintf("pod %s is lost (%s) with its PVC %s (%s): spec.durability.mode is %s, where a store's volume may hold "+
				"the only copy of acknowledged writes the WAL archive had not shipped, so the operator deletes neither the PVC nor the pod; "+
				"a person must act: bring node %s back, or delete PVC %s (forfeiting those writes), and the operator then replaces the pod "+
				"with an empty volume (with spec.durability.mode %s it would have, every write being in the bucket)",
				pod.Name, why.why, v.claim, volume, contract.DurabilityLocal, node, v.claim, contract.DurabilityBucket), nil
		default:
			uid, rv := v.pvc.UID, v.pvc.ResourceVersion
			err := r.Delete(ctx, v.pvc, client.Preconditions{UID: &uid, ResourceVersion: &rv})
			if apierrors.IsConflict(err) {
				return "", "", nil
			}
			if err != nil && !apierrors.IsNotFound(err) {
				return "", "", fmt.Errorf("delete PVC %s of lost pod %s: %w", v.claim, pod.Name, err)
			}
			claimDone = fmt.Sprintf("its PVC %s (%s) deleted, so that it comes back with an empty volume: spec.durability.mode %s "+
				"keeps every acknowledged write in the bucket", v.claim, volume, contract.DurabilityBucket)
		}
	}

	how := "deleted"
	switch {
	case why.nodeLost:
		how = "force-deleted (grace period 0: no kubelet runs it)"
	case pod.DeletionTimestamp != nil:
		// Its kubelet is there and runs the grace period already.
		return "", "", nil
	}
	deleted, err := r.deleteLostPod(ctx, sts, pod, why, lostAfter)
	if err != nil {
		return "", "", err
	}
	var parts []string
	if deleted {
		parts = append(parts, fmt.Sprintf("%s, so that StatefulSet %s recreates it", how, sts.Name))
	}
	if claimDone != "" {
		parts = append(parts, claimDone)
	}
	if len(parts) == 0 {
		return "", "", nil
	}
	return fmt.Sprintf("pod %s lost (%s): %s", pod.Name, why.why, strings.Join(parts, "; ")), "", nil
}

// lostPodDeleteTries bounds how often deleteLostPod reads a changed pod
// again: a kubelet or a status writer may update a pod while a pass acts,
// not without end.
const lostPodDeleteTries = 3

// deleteLostPod deletes pod, judged lost for why, on the condition that it
// is unchanged since it was read: a pod that has become healthy since is
// never deleted. A pod that changed is read again and, if it is the same
// pod, still lost and lost the same way, deleted again; without that, a
// status update that lands between the PVC's delete and the pod's made the
// pass report the PVC alone, and the next pass the pod with a second event.
// It reports whether this call deleted the pod.
func (r *KVClusterReconciler) deleteLostPod(ctx context.Context, sts *appsv1.StatefulSet, pod *corev1.Pod, why lossVerdict, lostAfter time.Duration) (bool, error) {
	for try := 1; ; try++ {
		opts := []client.DeleteOption{client.Preconditions{UID: &pod.UID, ResourceVersion: &pod.ResourceVersion}}
		if why.nodeLost {
			opts = append(opts, client.GracePeriodSeconds(0))
		}
		err := r.Delete(ctx, pod, opts...)
		switch {
		case err == nil:
			return true, nil
		case apierrors.IsNotFound(err):
			return false, nil
		case !apierrors.IsConflict(err):
			return false, fmt.Errorf("delete lost pod %s: %w", pod.Name, err)
		case try == lostPodDeleteTries:
			return false, nil // left for the next pass
		}
		live := &corev1.Pod{}
		err = r.APIReader.Get(ctx, client.ObjectKeyFromObject(pod), live)
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		if err != nil {
			return false, fmt.Errorf("read lost pod %s again: %w", pod.Name, err)
		}
		if live.UID != pod.UID || (!why.nodeLost && live.DeletionTimestamp != nil) {
			return false, nil
		}
		v, err := viewStore(ctx, r.APIReader, sts, live)
		if err != nil {
			return false, err
		}
		if again := judgeStore(v, time.Now(), lostAfter); !again.lost || again.nodeLost != why.nodeLost {
			return false, nil
		}
		pod = live
	}
}

// lossCondition sets StoreLost from the pass. A pass that stopped before
// the check leaves it as it was. A replacement is reported until every
// storage pod is Ready again, not only in the pass that acted.
func lossCondition(p *kvPass) {
	l := p.loss
	if !l.checked {
		return
	}
	c := p.cluster
	conds, gen := &c.Status.Conditions, c.Generation
	replaced := l.replaced
	if l.underWay != "" {
		replaced = append([]string{l.underWay}, replaced...)
	}
	switch {
	case len(l.needsPerson) > 0:
		setCondition(conds, gen, kvapi.ConditionStoreLost, true, kvapi.ReasonManualActionRequired, strings.Join(l.needsPerson, "; "))
	case len(replaced) > 0:
		setCondition(conds, gen, kvapi.ConditionStoreLost, true, kvapi.ReasonStoreReplaced, strings.Join(replaced, "; "))
	case len(l.notReady) > 0:
		setCondition(conds, gen, kvapi.ConditionStoreLost, false, kvapi.ReasonNodeNotReady, strings.Join(l.notReady, "; "))
	default:
		setCondition(conds, gen, kvapi.ConditionStoreLost, false, kvapi.ReasonAsExpected,
			fmt.Sprintf("no storage pod is lost: none is on a node NotReady for longer than %s (spec.failover.nodeLostAfter), out of service or gone, none lacks its PVC", l.lostAfter))
	}
}

// nodeReadinessChanged passes the events of a node that may make a storage
// pod lost or no longer so: its Ready condition or its out-of-service taint
// changed, or it was deleted.
// A node's other status updates are frequent and say nothing of this.
func nodeReadinessChanged() predicate.Funcs {
	ready := func(o client.Object) (corev1.ConditionStatus, time.Time) {
		if n, ok := o.(*corev1.Node); ok {
			for _, c := range n.Status.Conditions {
				if c.Type == corev1.NodeReady {
					return c.Status, c.LastTransitionTime.Time
				}
			}
		}
		return "", time.Time{}
	}
	tainted := func(o client.Object) bool {
		n, ok := o.(*corev1.Node)
		return ok && outOfService(n)
	}
	changed := func(e event.UpdateEvent) bool {
		was, wasSince := ready(e.ObjectOld)
		is, isSince := ready(e.ObjectNew)
		return was != is || !wasSince.Equal(isSince) || tainted(e.ObjectOld) != tainted(e.ObjectNew)
	}
	return predicate.Funcs{
		CreateFunc:  func(event.CreateEvent) bool { return false },
		UpdateFunc:  changed,
		DeleteFunc:  func(event.DeleteEvent) bool { return true },
		GenericFunc: func(event.GenericEvent) bool { return false },
	}
}

// storeLabels select every storage pod and PVC of every KVCluster; the
// instance label names the cluster.
var storeLabels = client.MatchingLabels{contract.LabelName: contract.AppName, contract.LabelComponent: contract.ComponentStore}

// clustersOnNode maps a node to the KVClusters with a storage pod on it.
// A failed List cannot be retried from here: it is logged, and those
// clusters catch up on their next event.
func (r *KVClusterReconciler) clustersOnNode(ctx context.Context, o client.Object) []reconcile.Request {
	var pods corev1.PodList
	if err := r.List(ctx, &pods, storeLabels); err != nil {
		log.FromContext(ctx).Error(err, "cannot list the storage pods on a node whose readiness changed; their clusters are not requeued for it",
			"node", o.GetName())
		return nil
	}
	seen := map[reconcile.Request]bool{}
	var out []reconcile.Request
	for _, p := range pods.Items {
		req := reconcile.Request{NamespacedName: client.ObjectKey{Namespace: p.Namespace, Name: p.Labels[contract.LabelInstance]}}
		if p.Spec.NodeName != o.GetName() || req.Name == "" || seen[req] {
			continue
		}
		seen[req] = true
		out = append(out, req)
	}
	return out
}

// clusterOfStoreClaim maps a storage pod's PVC to its KVCluster: a PVC
// deleted, or being deleted, makes its pod lost.
func clusterOfStoreClaim(_ context.Context, o client.Object) []reconcile.Request {
	l := o.GetLabels()
	if l[contract.LabelName] != contract.AppName || l[contract.LabelComponent] != contract.ComponentStore || l[contract.LabelInstance] == "" {
		return nil
	}
	return []reconcile.Request{{NamespacedName: client.ObjectKey{Namespace: o.GetNamespace(), Name: l[contract.LabelInstance]}}}
}
