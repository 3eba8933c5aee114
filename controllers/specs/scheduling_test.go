package specs

import (
	"testing"

	corev1 "k8s.io/api/core/v1"

	kvapi "github.com/bellows-kv/bellows/api/v1alpha1"
)

// TestDefaultPlacementSpreadsAndCanBeReplaced: without scheduling settings
// the stores prefer distinct nodes and zones; what a user sets replaces the
// default, and an empty affinity or constraint list opts out of it.
func TestDefaultPlacementSpreadsAndCanBeReplaced(t *testing.T) {
	c := defaultedCluster()
	spec := buildTemplate(c)
	aa := spec.Affinity.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution
	if len(aa) != 1 || aa[0].PodAffinityTerm.TopologyKey != hostnameTopologyKey || !matches(aa[0].PodAffinityTerm.LabelSelector.MatchLabels, StoreSelectorLabels(c)) {
		t.Errorf("default anti-affinity %+v", spec.Affinity)
	}
	if len(spec.TopologySpreadConstraints) != 1 || spec.TopologySpreadConstraints[0].WhenUnsatisfiable != corev1.ScheduleAnyway {
		t.Errorf("default spread %+v must be a preference", spec.TopologySpreadConstraints)
	}

	c.Spec.Scheduling = kvapi.SchedulingSpec{Affinity: &corev1.Affinity{}, TopologySpreadConstraints: []corev1.TopologySpreadConstraint{}}
	spec = buildTemplate(c)
	if spec.Affinity != nil || spec.TopologySpreadConstraints != nil {
		t.Errorf("opted out, but got affinity %+v and spread %+v", spec.Affinity, spec.TopologySpreadConstraints)
	}

	own := &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
		NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "disk", Operator: corev1.NodeSelectorOpIn, Values: []string{"nvme"}}}}},
	}}}
	c.Spec.Scheduling = kvapi.SchedulingSpec{Affinity: own, NodeSelector: map[string]string{"a": "b"}}
	spec = buildTemplate(c)
	if spec.Affinity != own || spec.NodeSelector["a"] != "b" || len(spec.TopologySpreadConstraints) != 1 {
		t.Errorf("user affinity not used as written: %+v", spec)
	}
}

func buildTemplate(c *kvapi.KVCluster) corev1.PodSpec {
	cm, err := BuildStoreConfigMap(c)
	if err != nil {
		panic(err)
	}
	return BuildStoreStatefulSet(c, cm, nil).Spec.Template.Spec
}

func matches(got, want map[string]string) bool {
	if len(got) != len(want) {
		return false
	}
	for k, v := range want {
		if got[k] != v {
			return false
		}
	}
	return true
}
