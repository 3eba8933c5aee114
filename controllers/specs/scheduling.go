package specs

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kvapi "github.com/bellows-kv/bellows/api/v1alpha1"
)

// Topology keys of the default spread (well-known node labels).
const (
	hostnameTopologyKey = "kubernetes.io/hostname"
	zoneTopologyKey     = "topology.kubernetes.io/zone"
)

// applyScheduling puts s into spec, with the default placement for what s
// leaves unset: a preferred pod anti-affinity on the node and a zone spread
// among the pods that selector matches. Both defaults are preferences, so
// a single node or a cluster without zones still schedules every pod; a
// replica that shares a node with another loses only the spread. A user
// opts out with an empty (non-nil) affinity or constraint list.
func applyScheduling(spec *corev1.PodSpec, s kvapi.SchedulingSpec, selector map[string]string) {
	spec.NodeSelector = s.NodeSelector
	spec.Tolerations = s.Tolerations
	spec.Affinity = s.Affinity
	if spec.Affinity == nil {
		spec.Affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{
			PreferredDuringSchedulingIgnoredDuringExecution: []corev1.WeightedPodAffinityTerm{{
				Weight: 100,
				PodAffinityTerm: corev1.PodAffinityTerm{
					LabelSelector: &metav1.LabelSelector{MatchLabels: selector},
					TopologyKey:   hostnameTopologyKey,
				},
			}},
		}}
	}
	spec.TopologySpreadConstraints = s.TopologySpreadConstraints
	if spec.TopologySpreadConstraints == nil {
		spec.TopologySpreadConstraints = []corev1.TopologySpreadConstraint{{
			MaxSkew:           1,
			TopologyKey:       zoneTopologyKey,
			WhenUnsatisfiable: corev1.ScheduleAnyway,
			LabelSelector:     &metav1.LabelSelector{MatchLabels: selector},
		}}
	}
	// Opted out: write no field rather than an empty one.
	if len(spec.TopologySpreadConstraints) == 0 {
		spec.TopologySpreadConstraints = nil
	}
	if *spec.Affinity == (corev1.Affinity{}) {
		spec.Affinity = nil
	}
}
