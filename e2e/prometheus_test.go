//go:build e2e

package e2e

// A real Prometheus (Debian's, started by hack/e2e.sh with PROMETHEUS_URL
// and PROMETHEUS_DIR set) scrapes the operator, the stores and the workers
// while the scenarios run. Debian builds Prometheus without Kubernetes
// service discovery, so discoverTargets does its part: it lists the
// EndpointSlices' "metrics" ports every few seconds and keeps a file_sd
// file current, labelling targets as the Prometheus operator does for a
// ServiceMonitor (job = the Service's name). The chart's PrometheusRule is
// loaded into it at the start; at the end every dashboard query must
// return a series and every alert rule must have evaluated without error.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/api"
	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	kvapi "github.com/bellows-kv/bellows/api/v1alpha1"
	"github.com/bellows-kv/bellows/controllers/specs"
	"github.com/bellows-kv/bellows/hack/grafana"
	"github.com/bellows-kv/bellows/internal/contract"
	"github.com/bellows-kv/bellows/internal/tlsconfig"
)

// prom is the Prometheus hack/e2e.sh runs.
type prom struct {
	url    string
	dir    string // prometheus.yml's directory: rules/ and targets/ under it
	api    promv1.API
	loaded time.Time // when the rules were loaded
	// tlsNamespace is the namespace whose monitoring certificate the TLS
	// scrape job uses, once enableTLS added it (discoverTargets' alone).
	tlsNamespace string
}

func newProm(t *testing.T) *prom {
	t.Helper()
	p := &prom{url: os.Getenv("PROMETHEUS_URL"), dir: os.Getenv("PROMETHEUS_DIR")}
	if p.url == "" || p.dir == "" {
		t.Fatal("PROMETHEUS_URL or PROMETHEUS_DIR is not set: run the tests with `make e2e` (hack/e2e.sh starts Prometheus)")
	}
	c, err := api.NewClient(api.Config{Address: p.url})
	if err != nil {
		t.Fatal(err)
	}
	p.api = promv1.NewAPI(c)
	eventually(t, time.Minute, "Prometheus to be ready at "+p.url, func(ctx context.Context) (bool, string, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.url+"/-/ready", nil)
		if err != nil {
			return false, "", err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false, err.Error(), nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, resp.Status, nil
	})
	return p
}

// metricsNamespaces are where the targets are: the operator's and the
// scenarios' namespaces.
var metricsNamespaces = []string{operatorNS, ns}

// discoverTargets keeps targets/bellows.json current until ctx ends: every
// ready or serving address of a "metrics" port of an EndpointSlice in
// metricsNamespaces, labelled job and service (the Service's name),
// namespace, pod and endpoint (the port's name).
func (p *prom) discoverTargets(ctx context.Context, t *testing.T, e *env) {
	type group struct {
		Targets []string          `json:"targets"`
		Labels  map[string]string `json:"labels"`
	}
	// Three scrape jobs: plaintext pods (a cluster with TLS Disabled), the
	// stores and workers over TLS, and the operator over TLS with its
	// self-signed certificate (hack/e2e.sh's bellows-operator).
	const plain, withTLS, operator = "targets", "tls-targets", "operator-targets"
	files := map[string]*targetFile{}
	for _, kind := range []string{plain, withTLS, operator} {
		files[kind] = &targetFile{path: filepath.Join(p.dir, kind, "bellows.json")}
	}
	for {
		groups := map[string][]group{plain: {}, withTLS: {}, operator: {}}
		for _, n := range metricsNamespaces {
			var list discoveryv1.EndpointSliceList
			if err := e.c.List(ctx, &list, client.InNamespace(n)); err != nil {
				if ctx.Err() != nil {
					return
				}
				t.Logf("prometheus targets: listing EndpointSlices in %s: %v", n, err)
				continue
			}
			for _, sl := range list.Items {
				svc := sl.Labels[discoveryv1.LabelServiceName]
				for _, port := range sl.Ports {
					if ptr.Deref(port.Name, "") != contract.PortNameMetrics || port.Port == nil {
						continue
					}
					for _, ep := range sl.Endpoints {
						if ep.TargetRef == nil || len(ep.Addresses) == 0 {
							continue
						}
						// The stores and workers serve /metrics over TLS
						// (docs/security.md): scraped by the TLS job with
						// the namespace's monitoring certificate.
						var pod corev1.Pod
						isTLS := ep.TargetRef.Kind == "Pod" &&
							e.c.Get(ctx, client.ObjectKey{Namespace: sl.Namespace, Name: ep.TargetRef.Name}, &pod) == nil && specs.PodServesTLS(&pod)
						kind := plain
						switch {
						case sl.Namespace == operatorNS:
							kind = operator
						case isTLS:
							kind = withTLS
						}
						if kind == withTLS {
							if ok, err := p.enableTLS(ctx, e, sl.Namespace); !ok {
								if err != nil && ctx.Err() == nil {
									t.Logf("prometheus targets: %v", err)
								}
								continue
							}
						}
						groups[kind] = append(groups[kind], group{
							Targets: []string{fmt.Sprintf("%s:%d", ep.Addresses[0], *port.Port)},
							Labels: map[string]string{"job": svc, "service": svc, "namespace": sl.Namespace,
								"pod": ep.TargetRef.Name, "endpoint": *port.Name},
						})
					}
				}
			}
		}
		for kind, f := range files {
			if err := f.write(groups[kind]); err != nil {
				t.Errorf("prometheus targets: %v", err)
				return
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(2 * time.Second):
		}
	}
}

// targetFile is a file_sd file, rewritten when its targets change.
type targetFile struct {
	path string
	last []byte
}

func (f *targetFile) write(groups any) error {
	b, err := json.Marshal(groups)
	if err != nil || bytes.Equal(b, f.last) {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(f.path), 0o755); err != nil {
		return err
	}
	// Renamed into place: Prometheus never reads a half-written file.
	tmp := f.path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	if err := os.Rename(tmp, f.path); err != nil {
		return err
	}
	f.last = b
	return nil
}

// enableTLS gives Prometheus a scrape job for the pods that serve TLS: it
// writes namespace's monitoring certificate (which the operator issues with
// the namespace's first cluster or pool) where the job reads it, adds the
// job to prometheus.yml and reloads. ok is false until the certificate
// exists. One namespace's: the e2e's TLS pods are all in ns.
func (p *prom) enableTLS(ctx context.Context, e *env, namespace string) (ok bool, err error) {
	if p.tlsNamespace != "" {
		return p.tlsNamespace == namespace, nil
	}
	var s corev1.Secret
	if err := e.c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: kvapi.MonitoringTLSSecretName}, &s); err != nil {
		return false, client.IgnoreNotFound(err)
	}
	dir := filepath.Join(p.dir, "tls")
	if err := tlsconfig.WriteDir(dir, s.Data[specs.CACertKey], s.Data[corev1.TLSCertKey], s.Data[corev1.TLSPrivateKeyKey]); err != nil {
		return false, err
	}
	cfgPath := filepath.Join(p.dir, "prometheus.yml")
	cfg, err := os.ReadFile(cfgPath)
	if err != nil {
		return false, err
	}
	// prometheus.yml (hack/e2e.sh) ends in its scrape_configs list.
	job := fmt.Sprintf(`- job_name: bellows-tls
  scheme: https
  tls_config: {ca_file: %q, cert_file: %q, key_file: %q, server_name: %q}
  file_sd_configs:
  - {files: [%q], refresh_interval: 5s}
`, filepath.Join(dir, tlsconfig.CAFile), filepath.Join(dir, tlsconfig.CertFile), filepath.Join(dir, tlsconfig.KeyFile),
		tlsconfig.ServerName, filepath.Join(p.dir, "tls-targets", "*.json"))
	if !bytes.HasSuffix(cfg, []byte("\n")) {
		cfg = append(cfg, '\n')
	}
	if err := os.WriteFile(cfgPath, append(cfg, job...), 0o644); err != nil {
		return false, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.url+"/-/reload", nil)
	if err != nil {
		return false, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false, fmt.Errorf("reloading Prometheus with the TLS job: %w", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return false, fmt.Errorf("reloading Prometheus with the TLS job: %s", resp.Status)
	}
	p.tlsNamespace = namespace
	return true, nil
}

// loadRules renders the chart's PrometheusRule as a cluster with the
// Prometheus operator would get it, writes its groups as a rule file and
// has Prometheus reload, waiting until it lists them.
func (p *prom) loadRules(t *testing.T, e *env) {
	t.Helper()
	out := e.run(t, "helm", "template", release, "charts/bellows", "--namespace", operatorNS,
		"--api-versions", "monitoring.coreos.com/v1/PrometheusRule", "--show-only", "templates/prometheusrule.yaml")
	var rule struct {
		Kind string `json:"kind"`
		Spec struct {
			Groups []any `json:"groups"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal([]byte(out), &rule); err != nil {
		t.Fatalf("the rendered PrometheusRule: %v\n%s", err, out)
	}
	if rule.Kind != "PrometheusRule" || len(rule.Spec.Groups) == 0 {
		t.Fatalf("helm template rendered no PrometheusRule groups:\n%s", out)
	}
	b, err := yaml.Marshal(map[string]any{"groups": rule.Spec.Groups})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(p.dir, "rules", "bellows.yaml"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	resp, err := http.Post(p.url+"/-/reload", "", nil)
	if err != nil {
		t.Fatalf("reloading Prometheus: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("reloading Prometheus: %s", resp.Status)
	}
	p.loaded = time.Now()
	eventually(t, time.Minute, "Prometheus to list the chart's alert rules", func(ctx context.Context) (bool, string, error) {
		rs, err := p.api.Rules(ctx)
		if err != nil {
			return false, "", err
		}
		return len(rs.Groups) == len(rule.Spec.Groups), fmt.Sprintf("%d groups of %d", len(rs.Groups), len(rule.Spec.Groups)), nil
	})
}

// monitoring: the operator, the stores and the workers are scraped; every
// dashboard panel's query returns at least one series; every rule has
// evaluated since it was loaded, without error.
func (e *env) monitoring(t *testing.T, p *prom) {
	// Scraped: a target up for each component's Service (the jobs the
	// chart's alert rules and dashboards select).
	jobs := map[string]string{
		"operator": release + "-operator-metrics",
		"stores":   clusterName + "-headless",
		"workers":  poolName + "-compactor",
	}
	eventually(t, time.Minute, "a target up in Prometheus for the operator, the stores and the workers", func(ctx context.Context) (bool, string, error) {
		ts, err := p.api.Targets(ctx)
		if err != nil {
			return false, "", err
		}
		up := map[string]int{}
		for _, a := range ts.Active {
			if a.Health == promv1.HealthGood {
				up[string(a.Labels["job"])]++
			}
		}
		var missing []string
		for what, job := range jobs {
			if up[job] == 0 {
				missing = append(missing, fmt.Sprintf("%s (job %s)", what, job))
			}
		}
		return len(missing) == 0, fmt.Sprintf("targets up by job %v; none up for %v", up, missing), nil
	})

	// A control: a query of a metric nobody exports returns nothing, so an
	// empty dashboard query below would be caught.
	if v, _, err := p.api.Query(context.Background(), `bellows_e2e_no_such_metric{namespace=~".+"}`, time.Now()); err != nil || seriesIn(v) != 0 {
		t.Fatalf("control query: %v series, error %v; want none", v, err)
	}

	// Every dashboard query, with every variable at "All".
	files, err := filepath.Glob(filepath.Join(e.root, "charts/bellows/dashboards/*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no dashboards under charts/bellows/dashboards: %v", err)
	}
	var empty []string
	n := 0
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		qs, err := grafana.Queries(filepath.Base(f), data)
		if err != nil {
			t.Fatal(err)
		}
		for _, q := range qs {
			n++
			expr := grafana.AllValues(q.Expr, "2m")
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			v, warnings, err := p.api.Query(ctx, expr, time.Now())
			cancel()
			switch {
			case err != nil:
				t.Errorf("%s: %s: %v", q.Where, expr, err)
			case len(warnings) > 0:
				t.Errorf("%s: %s: warnings %v", q.Where, expr, warnings)
			case seriesIn(v) == 0:
				empty = append(empty, fmt.Sprintf("%s: %s", q.Where, expr))
			}
		}
	}
	if len(empty) > 0 {
		t.Errorf("%d of %d dashboard queries return no series after the scenarios ran:\n%s", len(empty), n, strings.Join(empty, "\n"))
	}
	t.Logf("%d dashboard queries from %d dashboards each returned a series", n-len(empty), len(files))

	// Every rule (alerting and recording) evaluated, since it was loaded,
	// without error.
	eventually(t, time.Minute, "every rule evaluated without error since it was loaded", func(ctx context.Context) (bool, string, error) {
		rs, err := p.api.Rules(ctx)
		if err != nil {
			return false, "", err
		}
		var bad []string
		rules := 0
		for _, g := range rs.Groups {
			for _, r := range g.Rules {
				var name, lastError string
				var health promv1.RuleHealth
				var last time.Time
				switch r := r.(type) {
				case promv1.AlertingRule:
					name, health, lastError, last = r.Name, r.Health, r.LastError, r.LastEvaluation
				case promv1.RecordingRule:
					name, health, lastError, last = r.Name, r.Health, r.LastError, r.LastEvaluation
				default:
					continue
				}
				rules++
				switch {
				case health != promv1.RuleHealthGood:
					bad = append(bad, fmt.Sprintf("%s: health %s, error %q", name, health, lastError))
				case last.Before(p.loaded):
					bad = append(bad, fmt.Sprintf("%s: not evaluated since the rules were loaded", name))
				}
			}
		}
		if rules == 0 {
			return false, "no rules listed", nil
		}
		slices.Sort(bad)
		return len(bad) == 0, fmt.Sprintf("%d alerting rules; %s", rules, strings.Join(bad, "; ")), nil
	})
}

// seriesIn counts the series of an instant query's result.
func seriesIn(v model.Value) int {
	switch v := v.(type) {
	case model.Vector:
		return len(v)
	case model.Matrix:
		return len(v)
	case *model.Scalar:
		return 1
	}
	return 0
}
