package operator

import (
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/bellows-kv/bellows/internal/contract"
)

// startAPIServer starts a kube-apiserver and etcd (hack/envtest-bins.sh
// builds them) with the CRDs of config/crd/bases and the ServiceMonitor's,
// stopped when the test ends; the config is an administrator's.
func startAPIServer(t *testing.T) (*envtest.Environment, *rest.Config) {
	t.Helper()
	assets := os.Getenv("KUBEBUILDER_ASSETS")
	if assets == "" {
		assets = filepath.Join("..", "..", "..", "bin", "k8s")
	}
	if _, err := os.Stat(filepath.Join(assets, "kube-apiserver")); err != nil {
		t.Fatalf("no kube-apiserver in %s (make envtest-bins): %v", assets, err)
	}
	env := &envtest.Environment{
		BinaryAssetsDirectory: assets,
		CRDDirectoryPaths:     []string{filepath.Join("..", "..", "..", "config", "crd", "bases"), filepath.Join(assets, "crd")},
		ErrorIfCRDPathMissing: true,
	}
	kube, err := env.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	return env, kube
}

// TestValidateNamesBadNamespaces: a monitoring namespace or an own
// namespace that is not a namespace name is refused, naming its source.
func TestValidateNamesBadNamespaces(t *testing.T) {
	cfg := Default()
	if err := cfg.Validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	if len(cfg.MonitoringNamespaces) != 1 || cfg.MonitoringNamespaces[0] != contract.DefaultMonitoringNamespace || cfg.NetworkPolicies != contract.DefaultNetworkPolicies {
		t.Errorf("defaults: network policies %v, monitoring namespaces %q", cfg.NetworkPolicies, cfg.MonitoringNamespaces)
	}
	cfg.MonitoringNamespaces = []string{"monitoring", "Not_A_Namespace"}
	cfg.Namespace = "bellows.system"
	err := cfg.Validate()
	if err == nil || !strings.Contains(err.Error(), `--monitoring-namespace: "Not_A_Namespace" is not a namespace name`) ||
		!strings.Contains(err.Error(), `$POD_NAMESPACE: "bellows.system" is not a namespace name`) {
		t.Errorf("Validate: %v", err)
	}
	cfg.MonitoringNamespaces, cfg.Namespace = nil, ""
	if err := cfg.Validate(); err != nil {
		t.Errorf("no monitoring namespace, no own namespace: %v", err)
	}
}

// TestOwnNamespace: POD_NAMESPACE names it.
func TestOwnNamespace(t *testing.T) {
	t.Setenv(contract.PodNamespaceEnv, "ops")
	if ns := OwnNamespace(); ns != "ops" {
		t.Errorf("OwnNamespace %q with %s=ops", ns, contract.PodNamespaceEnv)
	}
}

// TestProbesAnswerOnTheMetricsPort: the kubelet's probes go to the metrics
// port (the operator has no other), at /healthz and /readyz exactly.
func TestProbesAnswerOnTheMetricsPort(t *testing.T) {
	mux := http.NewServeMux()
	for path, h := range probeHandlers() {
		mux.Handle(path, h) // as controller-runtime's metrics server adds ExtraHandlers
	}
	srv := httptest.NewServer(mux)
	defer srv.Close()
	for _, path := range []string{contract.PathHealthz, contract.PathReadyz} {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("GET %s: %s %q; want 200", path, resp.Status, body)
		}
	}
}
