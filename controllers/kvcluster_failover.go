package controllers

// The FailingOver condition: whether the cluster has regions without a live
// owner. Failover itself is the stores' (their balancer moves the regions
// of a store whose liveness lease ran out, docs/failover.md §5); the
// operator reads what the balancer's store exports,
// bellows_regions_without_live_owner, so that a person looking at the
// KVCluster sees the blip while it lasts and an event says when it began
// and ended.

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kvapi "github.com/bellows-kv/bellows/api/v1alpha1"
)

// How often a pass looks again at the stores' gauge, since no Kubernetes
// object changes when the balancer moves regions: failoverRecheck while
// regions have no live owner or a storage pod is not Ready (its lease may
// run out next), failoverPoll otherwise (a store paused or cut off can
// keep its pod Ready).
const (
	failoverRecheck = 5 * time.Second
	failoverPoll    = 30 * time.Second
)

// failoverState is what a pass read of the stores' failover gauge.
type failoverState struct {
	checked bool
	// ownerless is the most regions a Ready pod's balancer found without a
	// live owner, at pod.
	ownerless int
	pod       string
	// answered counts the Ready pods that said; unanswered says why the
	// others did not.
	answered   int
	unanswered []string
	notReady   bool
}

// observeFailover reads every Ready storage pod's count of regions without
// a live owner (only the balancer's store counts them).
func (r *KVClusterReconciler) observeFailover(ctx context.Context, p *kvPass) Result {
	c := p.cluster
	sts := &appsv1.StatefulSet{}
	err := r.Get(ctx, client.ObjectKey{Namespace: c.Namespace, Name: c.StatefulSetName()}, sts)
	if apierrors.IsNotFound(err) || err == nil && sts.Spec.Selector == nil {
		return Continue() // no stores yet: nothing to say
	}
	if err != nil {
		return Fail(err)
	}
	var pods corev1.PodList
	if err := r.List(ctx, &pods, client.InNamespace(sts.Namespace), client.MatchingLabels(sts.Spec.Selector.MatchLabels)); err != nil {
		return Fail(fmt.Errorf("list the pods of StatefulSet %s: %w", sts.Name, err))
	}
	f := failoverState{checked: true}
	for i := range pods.Items {
		pod := &pods.Items[i]
		if !metav1.IsControlledBy(pod, sts) {
			continue
		}
		if !pod.DeletionTimestamp.IsZero() || !podReady(pod) {
			f.notReady = true
			continue
		}
		n, err := r.StoreGauges.RegionsWithoutLiveOwner(ctx, c, pod)
		if err != nil {
			f.unanswered = append(f.unanswered, fmt.Sprintf("%s: %s", pod.Name, truncate(err.Error(), 200)))
			continue
		}
		f.answered++
		if n > f.ownerless {
			f.ownerless, f.pod = n, pod.Name
		}
	}
	sort.Strings(f.unanswered)
	p.failover = f
	if f.ownerless > 0 || f.notReady {
		return Requeue(failoverRecheck)
	}
	return Requeue(failoverPoll)
}

// failoverCondition sets FailingOver from the pass. A pass that stopped
// before the check, or found no stores, leaves it as it was.
func failoverCondition(p *kvPass) {
	f := p.failover
	if !f.checked {
		return
	}
	c := p.cluster
	conds, gen := &c.Status.Conditions, c.Generation
	switch {
	case f.ownerless > 0:
		setCondition(conds, gen, kvapi.ConditionFailingOver, true, kvapi.ReasonRegionsWithoutLiveOwner,
			fmt.Sprintf("%d region(s) have no live owner: the region map gives them to a store whose liveness lease ran out, and the balancer (at %s) moves them to living stores; requests for them are retried until it has", f.ownerless, f.pod))
	case f.answered == 0:
		why := "no storage pod is Ready"
		if len(f.unanswered) > 0 {
			why = "no Ready storage pod answered: " + strings.Join(f.unanswered, "; ")
		}
		meta.SetStatusCondition(conds, metav1.Condition{Type: kvapi.ConditionFailingOver, Status: metav1.ConditionUnknown,
			Reason: kvapi.ReasonStoresUnanswered, Message: why, ObservedGeneration: gen})
	default:
		setCondition(conds, gen, kvapi.ConditionFailingOver, false, kvapi.ReasonEveryRegionOwned,
			fmt.Sprintf("every region has a live owner (asked of %d Ready storage pod(s))", f.answered))
	}
}
