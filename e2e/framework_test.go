//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	kvapi "github.com/bellows-kv/bellows/api/v1alpha1"
	"github.com/bellows-kv/bellows/controllers/specs"
	"github.com/bellows-kv/bellows/internal/contract"
)

// env is what every scenario uses.
type env struct {
	root       string // the repository
	kubeconfig string
	helm       string
	kubectl    string
	artifacts  string
	c          client.Client
}

func newEnv(t *testing.T) *env {
	t.Helper()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	e := &env{
		root:       root,
		kubeconfig: os.Getenv("KUBECONFIG"),
		helm:       envOr("HELM", filepath.Join(root, "bin/helm")),
		kubectl:    envOr("KUBECTL", filepath.Join(root, "bin/k8s/kubectl")),
		artifacts:  envOr("E2E_ARTIFACTS", t.TempDir()),
	}
	if e.kubeconfig == "" {
		t.Fatal("KUBECONFIG is not set: run the tests with `make e2e` (hack/e2e.sh)")
	}
	// The client logs the API server's warnings (a deprecated API, say).
	ctrllog.SetLogger(zap.New(zap.WriteTo(os.Stderr)))
	cfg, err := clientcmd.BuildConfigFromFlags("", e.kubeconfig)
	if err != nil {
		t.Fatalf("kubeconfig %s: %v", e.kubeconfig, err)
	}
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := kvapi.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if e.c, err = client.New(cfg, client.Options{Scheme: scheme}); err != nil {
		t.Fatal(err)
	}
	return e
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

// run runs a command (kubectl, helm) and fails the test with its output when it fails.
func (e *env) run(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := e.try(name, args...)
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return out
}

func (e *env) try(name string, args ...string) (string, error) {
	bin := map[string]string{"kubectl": e.kubectl, "helm": e.helm}[name]
	if bin == "" {
		bin = name
	}
	cmd := exec.Command(bin, args...)
	cmd.Dir = e.root
	cmd.Env = append(os.Environ(), "KUBECONFIG="+e.kubeconfig)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

// eventually polls cond every interval until it returns true, an error, or
// timeout passes; the last non-empty status it returned goes into the failure.
func eventually(t *testing.T, timeout time.Duration, what string, cond func(ctx context.Context) (bool, string, error)) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	last := ""
	for {
		ok, status, err := cond(ctx)
		if err != nil && ctx.Err() == nil {
			last = "error: " + err.Error()
		} else if status != "" {
			last = status
		}
		if ok && err == nil {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("timed out after %s waiting for %s (last: %s)", timeout, what, last)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// series is one scrape of a /metrics endpoint: `name{l1="v1",l2="v2"}` (labels
// sorted) → value, for counters, gauges and untyped metrics.
type series map[string]float64

// scrape reads a store's or worker's /metrics (over TLS with the
// namespace's monitoring certificate when the pod serves TLS).
func (e *env) scrape(ctx context.Context, p *corev1.Pod) (series, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	hc, err := metricsClient(ctx, e.c, p)
	if err != nil {
		return nil, err
	}
	url := metricsURL(p)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return nil, fmt.Errorf("GET %s: %s: %s", url, resp.Status, b)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", url, err)
	}
	out := series{}
	for name, f := range families {
		for _, m := range f.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
			}
			sort.Strings(labels)
			key := name
			if len(labels) > 0 {
				key += "{" + strings.Join(labels, ",") + "}"
			}
			switch {
			case m.Counter != nil:
				out[key] = m.GetCounter().GetValue()
			case m.Gauge != nil:
				out[key] = m.GetGauge().GetValue()
			case m.Untyped != nil:
				out[key] = m.GetUntyped().GetValue()
			}
		}
	}
	return out, nil
}

// sum adds every series of metric whose labels include all of want ("k=v").
func (s series) sum(metric string, want ...string) float64 {
	var total float64
	for k, v := range s {
		name, labels, _ := strings.Cut(k, "{")
		if name != metric {
			continue
		}
		ok := true
		for _, w := range want {
			k, val, _ := strings.Cut(w, "=")
			if !strings.Contains(labels, fmt.Sprintf("%s=%q", k, val)) {
				ok = false
			}
		}
		if ok {
			total += v
		}
	}
	return total
}

func metricsURL(p *corev1.Pod) string {
	scheme := "http"
	if specs.PodServesTLS(p) {
		scheme = "https"
	}
	return fmt.Sprintf("%s://%s:%d/metrics", scheme, p.Status.PodIP, contract.MetricsPort)
}

// podReady says whether a pod is Ready and not being deleted.
func podReady(p *corev1.Pod) bool {
	if p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning {
		return false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// dump writes what helps to diagnose a failure into the artifacts
// directory: every object of the test's namespaces, the events, and each
// container's log (current and previous).
func (e *env) dump(t *testing.T, namespaces ...string) {
	t.Helper()
	dir := filepath.Join(e.artifacts, strings.ReplaceAll(t.Name(), "/", "_"))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Logf("dump: %v", err)
		return
	}
	write := func(name, content string) { _ = os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644) }
	out, _ := e.try("kubectl", "get", "nodes,pv,pods,deploy,sts,svc,endpointslices,pvc,cm,kvclusters,compactionpools", "-A", "-o", "wide")
	write("objects.txt", out)
	out, _ = e.try("kubectl", "get", "events", "-A", "--sort-by=.lastTimestamp")
	write("events.txt", out)
	for _, ns := range namespaces {
		out, _ = e.try("kubectl", "get", "kvclusters,compactionpools,pods,sts,deploy", "-n", ns, "-o", "yaml")
		write(ns+"-objects.yaml", out)
		var pods corev1.PodList
		if err := e.c.List(context.Background(), &pods, client.InNamespace(ns)); err != nil {
			continue
		}
		for _, p := range pods.Items {
			for _, prev := range []bool{false, true} {
				out, err := e.try("kubectl", "logs", "-n", ns, p.Name, "--all-containers", fmt.Sprintf("--previous=%t", prev))
				if err == nil && out != "" {
					write(fmt.Sprintf("%s-%s-previous=%t.log", ns, p.Name, prev), out)
				}
			}
		}
	}
	t.Logf("diagnostics in %s", dir)
}
