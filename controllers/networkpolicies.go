package controllers

import (
	"context"
	"fmt"

	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/bellows-kv/bellows/controllers/specs"
)

// Delete: with NetworkPolicies turned off, the operator deletes those it made.
// +kubebuilder:rbac:groups=networking.k8s.io,resources=networkpolicies,verbs=get;list;watch;create;update;delete

// NetworkPolicies says whether the reconcilers make a NetworkPolicy for each
// KVCluster's storage pods and each CompactionPool's workers, and whom it
// lets reach their metrics ports (docs/security.md §4).
type NetworkPolicies struct {
	// Enabled makes them (operator --network-policies). Off, a pass
	// deletes the one its owner controls, if any: turning the policies off
	// takes effect on every cluster and pool as each is reconciled next
	// (at the latest when the operator starts and passes over all).
	Enabled bool
	// OperatorNamespace is the operator's own (POD_NAMESPACE): its pods
	// there may scrape the metrics ports. Empty: its pods in any namespace.
	OperatorNamespace string
	// MonitoringNamespaces may scrape the metrics ports (operator
	// --monitoring-namespace).
	MonitoringNamespaces []string
}

func (n NetworkPolicies) peers() specs.NetworkPolicyPeers {
	return specs.NetworkPolicyPeers{OperatorNamespace: n.OperatorNamespace, MonitoringNamespaces: n.MonitoringNamespaces}
}

// networkPolicyStep ensures the NetworkPolicy build makes for the pass when
// policies are enabled; disabled, it deletes that policy if the pass's owner
// controls it (one someone else made under the name stays).
func networkPolicyStep[P pass](ch children, n NetworkPolicies, build func(P, specs.NetworkPolicyPeers) *networkingv1.NetworkPolicy) step[P] {
	if n.Enabled {
		return childStep("NetworkPolicy", ch, func(p P) *networkingv1.NetworkPolicy { return build(p, n.peers()) }, updateNetworkPolicy)
	}
	return step[P]{"NetworkPolicy", func(ctx context.Context, p P) Result {
		return FailIf(deleteControlled(ctx, ch, p.owner(), build(p, n.peers())))
	}}
}

// updateNetworkPolicy: the whole spec is the operator's.
func updateNetworkPolicy(live, desired *networkingv1.NetworkPolicy) { live.Spec = desired.Spec }

// deleteControlled deletes the object named like desired when owner
// controls it, and records that as an event on owner. An object that does
// not exist, or that owner does not control, is left alone.
func deleteControlled[T client.Object](ctx context.Context, ch children, owner client.Object, desired T) error {
	live := emptyLike(desired)
	kind := kindOf(desired)
	err := ch.client.Get(ctx, client.ObjectKeyFromObject(desired), live)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("get %s %s: %w", kind, desired.GetName(), err)
	}
	if !metav1.IsControlledBy(live, owner) {
		return nil
	}
	uid := live.GetUID()
	if err := ch.client.Delete(ctx, live, client.Preconditions{UID: &uid}); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("delete %s %s: %w", kind, desired.GetName(), err)
	}
	ch.event(owner, "Deleted", kind, desired.GetName())
	return nil
}
