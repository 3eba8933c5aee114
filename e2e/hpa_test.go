//go:build e2e

// The adapter's Service has no selector, so its endpoints are written as v1
// Endpoints (deprecated for readers since 1.33): the EndpointSlice mirroring
// controller makes the EndpointSlice from them.
//lint:file-ignore SA1019 v1 Endpoints are how a selector-less Service's endpoints are written

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kvapi "github.com/bellows-kv/bellows/api/v1alpha1"
)

// The aggregation layer's registration of prometheus-adapter, which
// hack/e2e.sh runs on this machine (not in a pod): an APIService for
// external.metrics.k8s.io whose Service has no selector and one endpoint,
// the node's address (the API server routes to endpoints directly:
// --enable-aggregator-routing).
const (
	adapterNS      = "bellows-e2e-metrics"
	adapterService = "prometheus-adapter"
	externalAPI    = "v1beta1.external.metrics.k8s.io"
	externalMetric = "bellows-compactionpool-desired-replicas" // config/autoscaling/prometheus-adapter.yaml
)

// hpaScenario: the pool in External mode is sized by a real
// autoscaling/v2 HorizontalPodAutoscaler (config/autoscaling/hpa.yaml)
// through its /scale subresource, from the operator's published
// recommendation served by a real metrics API (prometheus-adapter over the
// real Prometheus, via the chart's recording rule). Under compaction demand
// the pool grows; after it, it shrinks to the HPA's minReplicas; and the
// operator never writes spec.replicas meanwhile (checked at every poll from
// the pool's managedFields).
func hpaScenario(t *testing.T, e *env, kv *kvClient, l *ledger) {
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	e.registerAdapter(t, ctx)

	// Idle, in External mode: the operator publishes a recommendation of 1
	// and leaves spec.replicas alone.
	// (The mode as docs/guide/autoscaling.md sets it.)
	e.patchPool(t, ctx, `{"spec":{"cacheBytes":"1Mi","transferRateBytesPerSecond":20000,"minReplicas":1,"maxReplicas":3,"autoscaling":{"syncPeriod":"5s","scaleUpStabilizationWindow":"0s","scaleDownStabilizationWindow":"15s"}}}`)
	e.run(t, "kubectl", "patch", "compactionpool", poolName, "-n", ns, "--type", "merge", "-p", `{"spec":{"autoscaling":{"mode":"External"}}}`)
	defer e.patchPool(t, context.Background(), `{"spec":{"autoscaling":{"mode":"Model"}}}`)
	e.awaitPool(t, "the External pool to publish a recommendation of 1", func(p *kvapi.CompactionPool) bool {
		return ptr.Deref(p.Status.DesiredReplicas, 0) == 1
	})
	eventually(t, 2*time.Minute, "the external metric to be served for the pool", func(ctx context.Context) (bool, string, error) {
		v, err := e.externalMetric(poolName)
		return err == nil && v == 1, fmt.Sprintf("value %v, error %v", v, err), nil
	})

	e.run(t, "kubectl", "apply", "-n", ns, "-f", "config/autoscaling/hpa.yaml")
	defer func() {
		if _, err := e.try("kubectl", "delete", "-n", ns, "-f", "config/autoscaling/hpa.yaml", "--ignore-not-found"); err != nil {
			t.Errorf("deleting the HPA: %v", err)
		}
	}()
	var hpa autoscalingv2.HorizontalPodAutoscaler
	eventually(t, 2*time.Minute, "the HPA to read the pool's metric and want 1 worker", func(ctx context.Context) (bool, string, error) {
		if err := e.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "workers"}, &hpa); err != nil {
			return false, "", err
		}
		active := false
		var conds []string
		for _, c := range hpa.Status.Conditions {
			conds = append(conds, fmt.Sprintf("%s=%s %s: %s", c.Type, c.Status, c.Reason, c.Message))
			if c.Type == autoscalingv2.ScalingActive && c.Status == corev1.ConditionTrue {
				active = true
			}
		}
		return active && hpa.Status.DesiredReplicas == 1 && len(hpa.Status.CurrentMetrics) > 0,
			fmt.Sprintf("desired %d, metrics %s; %s", hpa.Status.DesiredReplicas, metricsString(hpa.Status.CurrentMetrics), strings.Join(conds, "; ")), nil
	})
	// Every change of spec.replicas from now on is the HPA's: the field's
	// manager is not the one that writes the pool's status (the operator).
	// (Before, in Model mode, the operator wrote it; a value nobody changes
	// keeps its last writer.)
	var start kvapi.CompactionPool
	if err := e.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: poolName}, &start); err != nil {
		t.Fatal(err)
	}
	last := ptr.Deref(start.Spec.Replicas, 0)
	changedByHPA := func(p *kvapi.CompactionPool) error {
		r := ptr.Deref(p.Spec.Replicas, 0)
		if r == last {
			return nil
		}
		owners, statusWriters := replicasManagers(p)
		if len(owners) == 0 {
			return fmt.Errorf("spec.replicas changed from %d to %d and has no manager", last, r)
		}
		for _, o := range owners {
			if slices.Contains(statusWriters, o) {
				return fmt.Errorf("spec.replicas changed from %d to %d by %q, which writes the pool's status (the operator), in External mode; managers of spec.replicas %v", last, r, o, owners)
			}
		}
		last = r
		return nil
	}

	d := startDemand(t, ctx, kv, l, "h")
	grown := e.sizeCacheUntilGrown(t, "the HPA to grow the pool to 2 or more workers", changedByHPA)
	owners, _ := replicasManagers(&grown)
	t.Logf("grown to %d workers; spec.replicas written by %v", ptr.Deref(grown.Spec.Replicas, 0), owners)
	if err := e.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "workers"}, &hpa); err != nil {
		t.Fatal(err)
	}
	t.Logf("HPA: desired %d, current metrics %s", hpa.Status.DesiredReplicas, metricsString(hpa.Status.CurrentMetrics))
	t.Logf("kubectl get hpa:\n%s", e.run(t, "kubectl", "get", "hpa", "workers", "-n", ns))
	if hpa.Status.DesiredReplicas < 2 {
		t.Errorf("HPA desires %d replicas while the pool has %d", hpa.Status.DesiredReplicas, ptr.Deref(grown.Spec.Replicas, 0))
	}
	e.awaitWorkersWhere(t, "every worker of the grown pool (2 or more) Ready", func(spec int32) bool { return spec >= 2 })

	d.stopIssuing()
	d.wait()
	var shrunk kvapi.CompactionPool
	eventually(t, 3*time.Minute, "the HPA to shrink the pool to 1 without demand", func(ctx context.Context) (bool, string, error) {
		if err := e.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: poolName}, &shrunk); err != nil {
			return false, "", err
		}
		if err := changedByHPA(&shrunk); err != nil {
			t.Fatal(err)
		}
		return ptr.Deref(shrunk.Spec.Replicas, 0) == 1, fmt.Sprintf("replicas %d, recommendation %d", ptr.Deref(shrunk.Spec.Replicas, 0), ptr.Deref(shrunk.Status.DesiredReplicas, 0)), nil
	})
	e.awaitWorkers(t, 1)
	d.check(t)
	verifyLedger(t, ctx, kv, l)
}

// registerAdapter registers the prometheus-adapter hack/e2e.sh runs with
// the aggregation layer, lets the HPA controller read external metrics,
// and waits for the APIService to be Available. Removed when the test ends.
func (e *env) registerAdapter(t *testing.T, ctx context.Context) {
	t.Helper()
	port, err := strconv.Atoi(os.Getenv("PROMETHEUS_ADAPTER_PORT"))
	if err != nil {
		t.Fatalf("PROMETHEUS_ADAPTER_PORT %q: run the tests with `make e2e` (hack/e2e.sh runs prometheus-adapter)", os.Getenv("PROMETHEUS_ADAPTER_PORT"))
	}
	var nodes corev1.NodeList
	if err := e.c.List(ctx, &nodes); err != nil || len(nodes.Items) == 0 {
		t.Fatalf("listing nodes: %v (%d)", err, len(nodes.Items))
	}
	var nodeIP string
	for _, a := range nodes.Items[0].Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			nodeIP = a.Address
		}
	}
	if nodeIP == "" {
		t.Fatalf("node %s has no InternalIP", nodes.Items[0].Name)
	}
	apiService := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
		"metadata": map[string]any{"name": externalAPI},
		"spec": map[string]any{
			"group": "external.metrics.k8s.io", "version": "v1beta1",
			"service":               map[string]any{"namespace": adapterNS, "name": adapterService, "port": int64(443)},
			"insecureSkipTLSVerify": true, "groupPriorityMinimum": int64(100), "versionPriority": int64(100),
		},
	}}
	objs := []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: adapterNS}},
		&corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Namespace: adapterNS, Name: adapterService},
			Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "https", Port: 443, TargetPort: intstr.FromInt(port)}}},
		},
		&corev1.Endpoints{
			ObjectMeta: metav1.ObjectMeta{Namespace: adapterNS, Name: adapterService},
			Subsets: []corev1.EndpointSubset{{
				Addresses: []corev1.EndpointAddress{{IP: nodeIP}},
				Ports:     []corev1.EndpointPort{{Name: "https", Port: int32(port)}},
			}},
		},
		// The HPA controller (its own service account, as the controller
		// manager runs with --use-service-account-credentials) reads
		// external metrics.
		&rbacv1.ClusterRole{
			ObjectMeta: metav1.ObjectMeta{Name: "bellows-e2e-external-metrics-reader"},
			Rules:      []rbacv1.PolicyRule{{APIGroups: []string{"external.metrics.k8s.io"}, Resources: []string{"*"}, Verbs: []string{"get", "list", "watch"}}},
		},
		&rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "bellows-e2e-external-metrics-reader"},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "bellows-e2e-external-metrics-reader"},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: "kube-system", Name: "horizontal-pod-autoscaler"}},
		},
		apiService,
	}
	for _, o := range objs {
		if err := e.c.Create(ctx, o); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatalf("creating %T %s: %v", o, o.GetName(), err)
		}
	}
	t.Cleanup(func() {
		for i := len(objs) - 1; i >= 0; i-- {
			if err := e.c.Delete(context.Background(), objs[i]); err != nil && !apierrors.IsNotFound(err) {
				t.Errorf("deleting %T %s: %v", objs[i], objs[i].GetName(), err)
			}
		}
	})
	eventually(t, 2*time.Minute, "the external metrics APIService to be Available", func(ctx context.Context) (bool, string, error) {
		got := &unstructured.Unstructured{}
		got.SetGroupVersionKind(apiService.GroupVersionKind())
		if err := e.c.Get(ctx, client.ObjectKey{Name: externalAPI}, got); err != nil {
			return false, "", err
		}
		conds, _, _ := unstructured.NestedSlice(got.Object, "status", "conditions")
		for _, c := range conds {
			m, _ := c.(map[string]any)
			if m["type"] == "Available" {
				return m["status"] == "True", fmt.Sprintf("Available=%v %v: %v", m["status"], m["reason"], m["message"]), nil
			}
		}
		return false, "no Available condition", nil
	})
}

// externalMetric reads the pool's external metric as the HPA does.
func (e *env) externalMetric(pool string) (float64, error) {
	path := fmt.Sprintf("/apis/external.metrics.k8s.io/v1beta1/namespaces/%s/%s?labelSelector=%s",
		ns, externalMetric, url.QueryEscape("compactionpool="+pool))
	out, err := e.try("kubectl", "get", "--raw", path)
	if err != nil {
		return 0, fmt.Errorf("%s: %v", strings.TrimSpace(out), err)
	}
	var list struct {
		Items []struct {
			Value string `json:"value"`
		} `json:"items"`
	}
	if err := json.Unmarshal([]byte(out), &list); err != nil {
		return 0, fmt.Errorf("%s: %v", out, err)
	}
	if len(list.Items) != 1 {
		return 0, fmt.Errorf("%d values: %s", len(list.Items), out)
	}
	q, err := resource.ParseQuantity(list.Items[0].Value)
	if err != nil {
		return 0, err
	}
	return q.AsApproximateFloat64(), nil
}

// replicasManagers returns the field managers owning the pool's
// spec.replicas, and those that write its status (the operator).
func replicasManagers(p *kvapi.CompactionPool) (replicas, status []string) {
	for _, mf := range p.ManagedFields {
		if mf.FieldsV1 == nil {
			continue
		}
		var f map[string]map[string]any
		if err := json.Unmarshal(mf.FieldsV1.GetRawBytes(), &f); err != nil {
			continue
		}
		if _, ok := f["f:spec"]["f:replicas"]; ok {
			replicas = append(replicas, mf.Manager)
		}
		if mf.Subresource == "status" {
			status = append(status, mf.Manager)
		}
	}
	return replicas, status
}

func metricsString(ms []autoscalingv2.MetricStatus) string {
	var parts []string
	for _, m := range ms {
		if m.External != nil {
			v := m.External.Current.AverageValue
			if v == nil {
				v = m.External.Current.Value
			}
			parts = append(parts, fmt.Sprintf("%s=%v", m.External.Metric.Name, v))
		}
	}
	return strings.Join(parts, ", ")
}
