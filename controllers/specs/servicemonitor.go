package specs

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/bellows-kv/bellows/internal/contract"
)

// ServiceMonitorGVK is the Prometheus-operator's ServiceMonitor. The operator
// writes ServiceMonitors as unstructured objects, and only when the API
// server knows the kind.
var ServiceMonitorGVK = schema.GroupVersionKind{Group: "monitoring.coreos.com", Version: "v1", Kind: "ServiceMonitor"}

// buildServiceMonitor scrapes the "metrics" port of the Services labelled
// with selector.
func buildServiceMonitor(meta metav1.ObjectMeta, selector map[string]string) *unstructured.Unstructured {
	sm := &unstructured.Unstructured{}
	sm.SetGroupVersionKind(ServiceMonitorGVK)
	sm.SetName(meta.Name)
	sm.SetNamespace(meta.Namespace)
	sm.SetLabels(meta.Labels)
	sm.SetOwnerReferences(meta.OwnerReferences)
	match := map[string]any{}
	for k, v := range selector {
		match[k] = v
	}
	spec := map[string]any{
		"selector":  map[string]any{"matchLabels": match},
		"endpoints": []any{map[string]any{"port": contract.PortNameMetrics, "path": contract.PathMetrics, "interval": contract.ScrapeInterval.String()}},
	}
	sm.Object["spec"] = spec
	StampHash(sm, spec)
	return sm
}
