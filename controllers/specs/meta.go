package specs

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	kvapi "github.com/bellows-kv/bellows/api/v1alpha1"
	"github.com/bellows-kv/bellows/internal/contract"
)

// SelectorLabels are the immutable labels that select a component's pods.
func SelectorLabels(instance, component string) map[string]string {
	return map[string]string{
		contract.LabelName:      contract.AppName,
		contract.LabelInstance:  instance,
		contract.LabelComponent: component,
	}
}

// CommonLabels are SelectorLabels plus the informational ones; every object
// the operator makes carries them.
func CommonLabels(instance, component string) map[string]string {
	l := SelectorLabels(instance, component)
	l[contract.LabelManagedBy] = contract.ManagedBy
	l[contract.LabelPartOf] = contract.AppName
	return l
}

// StoreSelectorLabels select a KVCluster's storage pods.
func StoreSelectorLabels(c *kvapi.KVCluster) map[string]string {
	return SelectorLabels(c.Name, contract.ComponentStore)
}

// PoolSelectorLabels select a CompactionPool's workers.
func PoolSelectorLabels(p *kvapi.CompactionPool) map[string]string {
	return SelectorLabels(p.Name, contract.ComponentCompactor)
}

// PoolSelector is the label selector of a pool's workers, as /scale reports it.
func PoolSelector(p *kvapi.CompactionPool) string {
	return labels.SelectorFromSet(PoolSelectorLabels(p)).String()
}

// HashOf is a short, stable hash of v's JSON encoding.
func HashOf(v any) string {
	data, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("HashOf: %v", err)) // only called on API types, which always marshal
	}
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])[:16]
}

// StampHash sets the spec-hash annotation of obj to the hash of what, which
// must describe everything the operator owns in obj, together with obj's
// labels and other annotations.
func StampHash(obj metav1.Object, what any) {
	a := obj.GetAnnotations()
	if a == nil {
		a = map[string]string{}
	}
	delete(a, contract.SpecHashAnnotation)
	a[contract.SpecHashAnnotation] = HashOf(struct {
		Labels      map[string]string
		Annotations map[string]string
		What        any
	}{obj.GetLabels(), a, what})
	obj.SetAnnotations(a)
}

// SpecHash is the spec-hash annotation StampHash set on obj.
func SpecHash(obj metav1.Object) string { return obj.GetAnnotations()[contract.SpecHashAnnotation] }

func clusterMeta(c *kvapi.KVCluster, name string) metav1.ObjectMeta {
	return metav1.ObjectMeta{
		Name:            name,
		Namespace:       c.Namespace,
		Labels:          CommonLabels(c.Name, contract.ComponentStore),
		OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(c, kvapi.GroupVersion.WithKind("KVCluster"))},
	}
}

func poolMeta(p *kvapi.CompactionPool, name string) metav1.ObjectMeta {
	return metav1.ObjectMeta{
		Name:            name,
		Namespace:       p.Namespace,
		Labels:          CommonLabels(p.Name, contract.ComponentCompactor),
		OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(p, kvapi.GroupVersion.WithKind("CompactionPool"))},
	}
}

// buildOneAtATimePDB lets at most one of the pods selector picks be
// voluntarily disrupted at a time.
func buildOneAtATimePDB(meta metav1.ObjectMeta, selector map[string]string) *policyv1.PodDisruptionBudget {
	pdb := &policyv1.PodDisruptionBudget{
		ObjectMeta: meta,
		Spec: policyv1.PodDisruptionBudgetSpec{
			MaxUnavailable: ptr.To(intstr.FromInt32(1)),
			Selector:       &metav1.LabelSelector{MatchLabels: selector},
		},
	}
	StampHash(pdb, pdb.Spec)
	return pdb
}

// servicePorts are a role's Service ports: its gRPC port and the metrics
// port, both targeting the container ports by name.
func servicePorts(grpcPort int32) []corev1.ServicePort {
	return []corev1.ServicePort{
		{Name: contract.PortNameGRPC, Port: grpcPort, TargetPort: intstr.FromString(contract.PortNameGRPC), Protocol: corev1.ProtocolTCP},
		{Name: contract.PortNameMetrics, Port: contract.MetricsPort, TargetPort: intstr.FromString(contract.PortNameMetrics), Protocol: corev1.ProtocolTCP},
	}
}

// containerPorts are a role's container ports, named as servicePorts target them.
func containerPorts(grpcPort int32) []corev1.ContainerPort {
	return []corev1.ContainerPort{
		{Name: contract.PortNameGRPC, ContainerPort: grpcPort, Protocol: corev1.ProtocolTCP},
		{Name: contract.PortNameMetrics, ContainerPort: contract.MetricsPort, Protocol: corev1.ProtocolTCP},
	}
}
