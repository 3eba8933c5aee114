package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kvapi "github.com/bellows-kv/bellows/api/v1alpha1"
	"github.com/bellows-kv/bellows/cmd/bellows/kubectl"
	"github.com/bellows-kv/bellows/internal/contract"
)

// What status says of a cluster the operator has not caught up with, that
// is paused, and whose pool is missing. (The envtest suite of
// cmd/bellows/kubectl runs the command against an API server.)
func TestStatusTextOfAPausedClusterWithoutItsPool(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	c := &kvapi.KVCluster{ObjectMeta: metav1.ObjectMeta{Name: "demo", Namespace: "ns", Generation: 3,
		Annotations: map[string]string{contract.PausedAnnotation: "true"}}}
	c.Spec.Replicas = 3
	c.Status = kvapi.KVClusterStatus{ObservedGeneration: 2, Replicas: 3, ReadyReplicas: 1, Conditions: []metav1.Condition{{
		Type: kvapi.ConditionReady, Status: metav1.ConditionFalse, Reason: kvapi.ReasonPodsNotReady, Message: "1/3 storage pods ready",
		LastTransitionTime: metav1.NewTime(now.Add(-90 * time.Second))}}}
	var out bytes.Buffer
	if err := printStatus(&out, "text", &kubectl.Status{Cluster: c, PoolMissing: "workers"}, now); err != nil {
		t.Fatal(err)
	}
	got := strings.Join(strings.Fields(out.String()), " ")
	for _, want := range []string{
		"Paused: yes: the operator leaves it alone",
		"Stores: 1/3 ready, 0 updated (spec: 3)",
		"Observed: generation 2 of 3: the operator has not caught up with the latest spec",
		"Ready: False PodsNotReady: 1/3 storage pods ready (90s ago)",
		"CompactionPool: workers does not exist (compactionPoolRef)",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("status lacks %q:\n%s", want, out.String())
		}
	}
	if strings.Contains(got, "Recent events") {
		t.Errorf("an events header with no events:\n%s", out.String())
	}
}

func TestKubeErrorsSayWhatToDo(t *testing.T) {
	err := kubeError(&kubectl.NotFoundError{Name: "demo", Namespace: "ns", Existing: []string{"a"}}, 0)
	var ue *userError
	if !errors.As(err, &ue) || err.Error() != `no KVCluster "demo" in namespace "ns" (there are: a); give -n NAMESPACE for another namespace`+
		"\n  hint: `kubectl get kvclusters -A` lists them in every namespace" {
		t.Errorf("not found: %q", err)
	}
	err = kubeError(&kubectl.RegionNotFoundError{Region: "region-9", Cluster: "demo", Regions: []string{"region-000", "region-001"}}, 0)
	if err.Error() != `KVCluster demo has no region "region-9"; its regions are region-000, region-001 (`+"`kubectl bellows regions demo` lists them)" {
		t.Errorf("region not found: %q", err)
	}
	// A deadline names the command's own --timeout (it said 0s before).
	err = kubeError(fmt.Errorf("region-003 at demo-0: %w", context.DeadlineExceeded), time.Minute)
	if !strings.Contains(err.Error(), "no answer within --timeout 1m0s") {
		t.Errorf("deadline: %q", err)
	}
}

// Run as kubectl-bellows, the plugin's help names it as kubectl users type
// it; under bellows it is `bellows kubectl`.
func TestPluginNamesItselfAsKubectlRunsIt(t *testing.T) {
	for use, want := range map[string]string{KubectlPluginName: "kubectl bellows regions [CLUSTER]", "kubectl": "bellows kubectl regions [CLUSTER]"} {
		root := NewKubectlCommand(use)
		if use == "kubectl" {
			parent := NewRootCommand()
			root = parent
			root.SetArgs([]string{"kubectl", "regions", "--help"})
		} else {
			root.SetArgs([]string{"regions", "--help"})
		}
		var out bytes.Buffer
		root.SetOut(&out)
		if err := root.Execute(); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(out.String(), want) || !strings.Contains(out.String(), "--kubeconfig") || !strings.Contains(out.String(), "-n, --namespace") {
			t.Errorf("%s regions --help lacks %q or kubectl's flags:\n%s", use, want, out.String())
		}
	}
}

// With no kubeconfig, no --server and no pod around it, the plugin says
// no cluster is configured, instead of calling localhost:8080 and blaming
// a store.
func TestPluginWithoutAClusterSaysSo(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "kubeconfig")
	t.Setenv("KUBECONFIG", missing) // not ~/.kube/config, which this machine may have
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	t.Setenv("KUBERNETES_SERVICE_PORT", "")
	for _, args := range [][]string{{"status"}, {"regions", "demo"}, {"backups", "demo"}} {
		root := NewKubectlCommand(KubectlPluginName)
		root.SetArgs(args)
		var out bytes.Buffer
		root.SetOut(&out)
		root.SetErr(&out)
		err := root.Execute()
		if err == nil || !strings.Contains(err.Error(), "no Kubernetes cluster found: no kubeconfig names a cluster (looked at "+missing+")") ||
			!strings.Contains(err.Error(), "hint: give --kubeconfig FILE, or set KUBECONFIG") {
			t.Errorf("kubectl bellows %s without a cluster: %v", strings.Join(args, " "), err)
		}
		if err != nil && (strings.Contains(err.Error(), "localhost:8080") || strings.Contains(err.Error(), "the store failed")) {
			t.Errorf("kubectl bellows %s without a cluster: %v", strings.Join(args, " "), err)
		}
	}
	// A plain error is no store's failure.
	if err := explain(errors.New("reading KVClusters: failed to get server groups"), time.Second); strings.Contains(err.Error(), "the store failed") {
		t.Errorf("explain of an error of the plugin's own: %q", err)
	}
}
