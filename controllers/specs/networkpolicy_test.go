package specs

import (
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

// TestNetworkPoliciesAdmitExactlyTheirPeers pins the ingress rules of both
// policies, port by port and peer by peer: the stores' gRPC port open to
// all, the workers' to the namespace's storage pods, both metrics ports to
// the operator's pods in its namespace and to the monitoring namespaces.
func TestNetworkPoliciesAdmitExactlyTheirPeers(t *testing.T) {
	tcp := ptr.To(corev1.ProtocolTCP)
	grpc := []networkingv1.NetworkPolicyPort{{Protocol: tcp, Port: ptr.To(intstr.FromString("grpc"))}}
	metrics := []networkingv1.NetworkPolicyPort{{Protocol: tcp, Port: ptr.To(intstr.FromString("metrics"))}}
	operatorIn := func(ns *metav1.LabelSelector) networkingv1.NetworkPolicyPeer {
		return networkingv1.NetworkPolicyPeer{
			PodSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"app.kubernetes.io/part-of": "bellows", "app.kubernetes.io/component": "operator"}},
			NamespaceSelector: ns,
		}
	}
	namespaces := func(names ...string) networkingv1.NetworkPolicyPeer {
		return networkingv1.NetworkPolicyPeer{NamespaceSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
			{Key: "kubernetes.io/metadata.name", Operator: metav1.LabelSelectorOpIn, Values: names},
		}}}
	}
	chartMetrics := []networkingv1.NetworkPolicyPeer{
		operatorIn(&metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": "bellows-system"}}),
		namespaces("monitoring"),
	}
	stores := []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{
		"app.kubernetes.io/name": "bellows", "app.kubernetes.io/component": "store",
	}}}}

	cases := []struct {
		name     string
		np       *networkingv1.NetworkPolicy
		wantName string
		selects  map[string]string
		want     []networkingv1.NetworkPolicyIngressRule
	}{
		{"store", BuildStoreNetworkPolicy(defaultedCluster(), chartPeers), "kv-store", StoreSelectorLabels(defaultedCluster()),
			[]networkingv1.NetworkPolicyIngressRule{{Ports: grpc}, {Ports: metrics, From: chartMetrics}}},
		{"pool", BuildPoolNetworkPolicy(defaultedPool(), chartPeers), "w-compactor", PoolSelectorLabels(defaultedPool()),
			[]networkingv1.NetworkPolicyIngressRule{{Ports: grpc, From: stores}, {Ports: metrics, From: chartMetrics}}},
		// An operator that does not know its namespace admits its pods in
		// any; the monitoring namespaces are sorted, without repeats.
		{"store, other peers", BuildStoreNetworkPolicy(fullCluster(), otherPeers), "big-store", StoreSelectorLabels(fullCluster()),
			[]networkingv1.NetworkPolicyIngressRule{{Ports: grpc}, {Ports: metrics, From: []networkingv1.NetworkPolicyPeer{
				operatorIn(&metav1.LabelSelector{}), namespaces("monitoring", "prometheus"),
			}}}},
		// No monitoring namespace: the operator alone.
		{"pool, no monitoring", BuildPoolNetworkPolicy(fullPool(), NetworkPolicyPeers{OperatorNamespace: "ops"}), "workers-compactor", PoolSelectorLabels(fullPool()),
			[]networkingv1.NetworkPolicyIngressRule{{Ports: grpc, From: stores}, {Ports: metrics, From: []networkingv1.NetworkPolicyPeer{
				operatorIn(&metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": "ops"}}),
			}}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			np := c.np
			if np.Name != c.wantName {
				t.Errorf("name %q, want %q", np.Name, c.wantName)
			}
			if !reflect.DeepEqual(np.Spec.PodSelector, metav1.LabelSelector{MatchLabels: c.selects}) {
				t.Errorf("selects %v, want the pods' selector %v", np.Spec.PodSelector, c.selects)
			}
			// Ingress only: egress (the bucket, the API server, peers) is
			// not restricted.
			if !reflect.DeepEqual(np.Spec.PolicyTypes, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}) || np.Spec.Egress != nil {
				t.Errorf("policy types %v, egress %v: want Ingress only", np.Spec.PolicyTypes, np.Spec.Egress)
			}
			if !reflect.DeepEqual(np.Spec.Ingress, c.want) {
				t.Errorf("ingress\n got %+v\nwant %+v", np.Spec.Ingress, c.want)
			}
			if ref := metav1.GetControllerOf(np); ref == nil || SpecHash(np) == "" {
				t.Errorf("owner %+v, spec hash %q", ref, SpecHash(np))
			}
		})
	}

	// The peers change the hash (the operator rewrites the policy when its
	// flags change); their order does not.
	a := BuildStoreNetworkPolicy(defaultedCluster(), NetworkPolicyPeers{OperatorNamespace: "o", MonitoringNamespaces: []string{"a", "b"}})
	b := BuildStoreNetworkPolicy(defaultedCluster(), NetworkPolicyPeers{OperatorNamespace: "o", MonitoringNamespaces: []string{"b", "a", "b"}})
	d := BuildStoreNetworkPolicy(defaultedCluster(), NetworkPolicyPeers{OperatorNamespace: "o", MonitoringNamespaces: []string{"a"}})
	if SpecHash(a) != SpecHash(b) || SpecHash(a) == SpecHash(d) {
		t.Errorf("hashes: a,b %s; b,a,b %s; a %s", SpecHash(a), SpecHash(b), SpecHash(d))
	}
}
