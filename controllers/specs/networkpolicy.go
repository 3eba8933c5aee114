package specs

// The NetworkPolicies of a KVCluster's storage pods and of a CompactionPool's
// workers (docs/security.md §4). Each admits ingress only; egress stays open,
// since the stores reach the bucket, the API server and their peers, and the
// workers the bucket.
//
// What no policy names still reaches the pods:
//   - the kubelet's probes and a worker's preStop /drain: they come from the
//     pod's node, which NetworkPolicy implementations (Calico, Cilium,
//     kube-router, ...) let reach the node's own pods;
//   - `kubectl port-forward` (the kubectl plugin's way to the stores): the
//     kubelet connects inside the pod's network namespace, past the policy.

import (
	"slices"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	kvapi "github.com/bellows-kv/bellows/api/v1alpha1"
	"github.com/bellows-kv/bellows/internal/contract"
)

// NetworkPolicyPeers are who, besides the kubelet, may reach the metrics
// ports (/metrics, /healthz, /readyz): the operator's pods, whose autoscaler
// scrapes the workers and the stores, and the monitoring namespaces.
type NetworkPolicyPeers struct {
	// OperatorNamespace is the operator's namespace. Empty (an operator
	// that does not know it: run outside a pod, or without POD_NAMESPACE):
	// pods labelled as the operator's (OperatorPodLabels) in any namespace.
	OperatorNamespace string
	// MonitoringNamespaces are the namespaces whose pods (Prometheus) may
	// scrape the metrics ports; none: only the operator.
	MonitoringNamespaces []string
}

// OperatorPodLabels select the operator's pods. The chart and
// config/manager label them so whatever the release's name or nameOverride.
func OperatorPodLabels() map[string]string {
	return map[string]string{contract.LabelPartOf: contract.AppName, contract.LabelComponent: contract.ComponentOperator}
}

// AnyStorePodLabels select the storage pods of every KVCluster: any cluster
// may offload compactions to a pool of its namespace.
func AnyStorePodLabels() map[string]string {
	return map[string]string{contract.LabelName: contract.AppName, contract.LabelComponent: contract.ComponentStore}
}

// BuildStoreNetworkPolicy is `<cluster>-store`: the gRPC port is open to
// every source (clients, in the cluster or through a load balancer; the
// peer stores, which forward requests and commit transactions; the
// operator's Admin calls); the metrics port only to the operator's pods and
// the monitoring namespaces that peers name.
func BuildStoreNetworkPolicy(c *kvapi.KVCluster, peers NetworkPolicyPeers) *networkingv1.NetworkPolicy {
	return buildNetworkPolicy(clusterMeta(c, c.NetworkPolicyName()), StoreSelectorLabels(c), []networkingv1.NetworkPolicyIngressRule{
		// No From: every source.
		{Ports: namedPort(contract.PortNameGRPC)},
		{Ports: namedPort(contract.PortNameMetrics), From: peers.metricsPeers()},
	})
}

// BuildPoolNetworkPolicy is `<pool>-compactor`: the workers' gRPC port is
// open only to storage pods of the pool's namespace, of any KVCluster (a
// worker takes jobs from the stores and streams their outputs back); the
// metrics port only to the operator's pods and the monitoring namespaces
// that peers name.
func BuildPoolNetworkPolicy(p *kvapi.CompactionPool, peers NetworkPolicyPeers) *networkingv1.NetworkPolicy {
	return buildNetworkPolicy(poolMeta(p, p.NetworkPolicyName()), PoolSelectorLabels(p), []networkingv1.NetworkPolicyIngressRule{
		// A peer with only a pod selector: pods of the policy's namespace.
		{Ports: namedPort(contract.PortNameGRPC), From: []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{MatchLabels: AnyStorePodLabels()}}}},
		{Ports: namedPort(contract.PortNameMetrics), From: peers.metricsPeers()},
	})
}

// buildNetworkPolicy admits to the pods selector picks what rules say, and
// nothing else: policy type Ingress only.
func buildNetworkPolicy(meta metav1.ObjectMeta, selector map[string]string, rules []networkingv1.NetworkPolicyIngressRule) *networkingv1.NetworkPolicy {
	np := &networkingv1.NetworkPolicy{
		ObjectMeta: meta,
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: selector},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
			Ingress:     rules,
		},
	}
	StampHash(np, np.Spec)
	return np
}

// namedPort is the container port of that name (containerPorts), over TCP.
func namedPort(name string) []networkingv1.NetworkPolicyPort {
	return []networkingv1.NetworkPolicyPort{{Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To(intstr.FromString(name))}}
}

// metricsPeers are the operator's pods and every pod of the monitoring
// namespaces (sorted and without repeats, so the policy does not change
// with the order they were given in).
func (p NetworkPolicyPeers) metricsPeers() []networkingv1.NetworkPolicyPeer {
	operator := networkingv1.NetworkPolicyPeer{
		PodSelector: &metav1.LabelSelector{MatchLabels: OperatorPodLabels()},
		// Empty: every namespace.
		NamespaceSelector: &metav1.LabelSelector{},
	}
	if p.OperatorNamespace != "" {
		operator.NamespaceSelector = &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: p.OperatorNamespace}}
	}
	peers := []networkingv1.NetworkPolicyPeer{operator}
	monitoring := slices.Compact(slices.Sorted(slices.Values(p.MonitoringNamespaces)))
	if len(monitoring) > 0 {
		// A NetworkPolicy names namespaces by their labels; the API server
		// labels every namespace with its name (kubernetes.io/metadata.name).
		peers = append(peers, networkingv1.NetworkPolicyPeer{NamespaceSelector: &metav1.LabelSelector{
			MatchExpressions: []metav1.LabelSelectorRequirement{{Key: corev1.LabelMetadataName, Operator: metav1.LabelSelectorOpIn, Values: monitoring}},
		}})
	}
	return peers
}
