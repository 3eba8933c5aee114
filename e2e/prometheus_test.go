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
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/bellows-kv/bellows/hack/grafana"
	"github.com/bellows-kv/bellows/internal/contract"
)

// prom is the Prometheus hack/e2e.sh runs.
type prom struct {
	url    string
	dir    string // prometheus.yml's directory: rules/ and targets/ under it
	api    promv1.API
	loaded time.Time // when the rules were loaded
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
	path := filepath.Join(p.dir, "targets", "bellows.json")
	var last []byte
	for {
		type group struct {
			Targets []string          `json:"targets"`
			Labels  map[string]string `json:"labels"`
		}
		var groups []group
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
						groups = append(groups, group{
							Targets: []string{fmt.Sprintf("%s:%d", ep.Addresses[0], *port.Port)},
							Labels: map[string]string{"job": svc, "service": svc, "namespace": sl.Namespace,
								"pod": ep.TargetRef.Name, "endpoint": *port.Name},
						})
					}
				}
			}
		}
		if groups == nil {
			groups = []group{}
		}
		b, err := json.Marshal(groups)
		if err != nil {
			t.Errorf("prometheus targets: %v", err)
			return
		}
		if !bytes.Equal(b, last) {
			// Renamed into place: Prometheus never reads a half-written file.
			tmp := path + ".tmp"
			err := os.WriteFile(tmp, b, 0o644)
			if err == nil {
				err = os.Rename(tmp, path)
			}
			if err != nil {
				t.Errorf("prometheus targets: %v", err)
				return
			}
			last = b
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(2 * time.Second):
		}
	}
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
