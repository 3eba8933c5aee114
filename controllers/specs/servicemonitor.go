package specs

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	kvapi "github.com/bellows-kv/bellows/api/v1alpha1"
	"github.com/bellows-kv/bellows/internal/contract"
)

// ServiceMonitorGVK is the Prometheus-operator's ServiceMonitor. The operator
// writes ServiceMonitors as unstructured objects, and only when the API
// server knows the kind.
var ServiceMonitorGVK = schema.GroupVersionKind{Group: "monitoring.coreos.com", Version: "v1", Kind: "ServiceMonitor"}

// buildServiceMonitor scrapes the "metrics" port of the Services labelled
// with selector; with TLS, over HTTPS with the namespace's monitoring
// client certificate (kvapi.MonitoringTLSSecretName), checking the pods'
// node certificates against the namespace's CA and their fixed name.
func buildServiceMonitor(meta metav1.ObjectMeta, selector map[string]string, withTLS bool) *unstructured.Unstructured {
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
	endpoint := map[string]any{"port": contract.PortNameMetrics, "path": contract.PathMetrics, "interval": contract.ScrapeInterval.String()}
	if withTLS {
		key := func(k string) map[string]any {
			return map[string]any{"secret": map[string]any{"name": kvapi.MonitoringTLSSecretName, "key": k}}
		}
		endpoint["scheme"] = "https"
		endpoint["tlsConfig"] = map[string]any{
			"ca": key(CACertKey), "cert": key(corev1.TLSCertKey),
			"keySecret":  map[string]any{"name": kvapi.MonitoringTLSSecretName, "key": corev1.TLSPrivateKeyKey},
			"serverName": contract.TLSServerName,
		}
	}
	spec := map[string]any{
		"selector":  map[string]any{"matchLabels": match},
		"endpoints": []any{endpoint},
	}
	sm.Object["spec"] = spec
	StampHash(sm, spec)
	return sm
}
