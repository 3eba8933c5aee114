package charts

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"

	"github.com/bellows-kv/bellows/hack/grafana"
	"github.com/bellows-kv/bellows/hack/metricnames"
	"github.com/bellows-kv/bellows/internal/contract"
)

const dashboardDir = "bellows/dashboards"

// exported is what the code exports: docs/interfaces.md is the contract; the
// Go sources are what is built. A documented section (Store, Compactor,
// Operator) counts as landed once the code exports any of its names; from
// then on the code, not the docs, decides for that section.
type exported struct {
	docs, code metricnames.Set
	landed     map[string]bool
}

func loadExported(t *testing.T) exported {
	t.Helper()
	docs, err := metricnames.FromInterfacesDoc("../docs/interfaces.md")
	if err != nil {
		t.Fatal(err)
	}
	code, err := metricnames.FromGoSources("..", "bin", "dist", "tmp", "charts")
	if err != nil {
		t.Fatal(err)
	}
	e := exported{docs: docs, code: code, landed: map[string]bool{}}
	for n := range code {
		if m, ok := docs[n]; ok {
			e.landed[m.Section] = true
		}
	}
	return e
}

// check returns why series may not be queried, or nil.
func (e exported) check(series string) error {
	doc, inDocs := e.docs.Series(series)
	if !inDocs {
		return fmt.Errorf("%s is not in docs/interfaces.md's metric tables", series)
	}
	if _, inCode := e.code.Series(series); !inCode && e.landed[doc.Section] {
		return fmt.Errorf("%s: docs/interfaces.md lists it (%s), but the Go sources, which export other %s metrics, do not", series, doc.Section, doc.Section)
	}
	return nil
}

// query is one PromQL expression of a dashboard and where it is.
type query = grafana.Query

// queries returns every panel target's expr and every query variable's
// metric selector.
func queries(t *testing.T, file string, data []byte) []query {
	t.Helper()
	qs, err := grafana.Queries(file, data)
	if err != nil {
		t.Fatal(err)
	}
	return qs
}

// targetLabels are the labels Prometheus (and the Prometheus operator's
// ServiceMonitors) attach to every scraped series.
var targetLabels = map[string]bool{"namespace": true, "pod": true, "job": true, "instance": true, "service": true, "container": true, "endpoint": true}

// selectorName is the metric a selector names, or "".
func selectorName(vs *parser.VectorSelector) string {
	name := vs.Name
	for _, m := range vs.LabelMatchers {
		if m.Name == model.MetricNameLabel && m.Type == labels.MatchEqual {
			name = m.Value
		}
	}
	return name
}

// labelAllowed reports whether label may be used with series (documented
// for its metric, a target label, or le on a histogram's _bucket).
func labelAllowed(docs metricnames.Set, series, label string) bool {
	if targetLabels[label] || label == model.MetricNameLabel {
		return true
	}
	m, ok := docs.Series(series)
	if !ok {
		return true // reported as an unknown metric instead
	}
	if label == "le" {
		return strings.HasSuffix(series, "_bucket")
	}
	_, ok = m.Labels[label]
	return ok
}

// metricsOf parses expr and returns the metric names its selectors name;
// with docs, it also checks every label matcher and every by (...) label
// against the documented labels (and a matcher's value against the
// documented values).
func metricsOf(expr string, docs metricnames.Set) ([]string, error) {
	e, err := parser.NewParser(parser.Options{}).ParseExpr(grafana.IntervalVars.ReplaceAllString(expr, "5m"))
	if err != nil {
		return nil, err
	}
	var names []string
	var errs []error
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		switch n := n.(type) {
		case *parser.VectorSelector:
			name := selectorName(n)
			if name == "" {
				errs = append(errs, fmt.Errorf("selector %s names no metric", n))
				return nil
			}
			names = append(names, name)
			if docs == nil {
				return nil
			}
			for _, m := range n.LabelMatchers {
				if !labelAllowed(docs, name, m.Name) {
					errs = append(errs, fmt.Errorf("%s has no label %q (docs/interfaces.md)", name, m.Name))
					continue
				}
				doc, _ := docs.Series(name)
				if vals := doc.Labels[m.Name]; len(vals) > 0 && m.Type == labels.MatchEqual && !slices.Contains(vals, m.Value) {
					errs = append(errs, fmt.Errorf("%s{%s=%q}: docs/interfaces.md lists %v", name, m.Name, m.Value, vals))
				}
			}
		case *parser.AggregateExpr:
			if docs == nil || n.Without {
				return nil
			}
			// Labels that label_replace makes inside the aggregation are
			// the expression's own, not the metric's.
			made := map[string]bool{}
			parser.Inspect(n.Expr, func(inner parser.Node, _ []parser.Node) error {
				if c, ok := inner.(*parser.Call); ok && c.Func.Name == "label_replace" && len(c.Args) > 1 {
					if dst, ok := c.Args[1].(*parser.StringLiteral); ok {
						made[dst.Val] = true
					}
				}
				return nil
			})
			parser.Inspect(n.Expr, func(inner parser.Node, _ []parser.Node) error {
				if vs, ok := inner.(*parser.VectorSelector); ok {
					for _, l := range n.Grouping {
						if name := selectorName(vs); name != "" && !made[l] && !labelAllowed(docs, name, l) {
							errs = append(errs, fmt.Errorf("%s by (%s): %s has no label %q", n.Op, strings.Join(n.Grouping, ", "), name, l))
						}
					}
				}
				return nil
			})
		}
		return nil
	})
	return names, errors.Join(errs...)
}

// checkDashboard returns every problem with the queries of one dashboard
// and the metric names they use.
func checkDashboard(t *testing.T, e exported, file string, data []byte) ([]error, map[string]bool) {
	used := map[string]bool{}
	var errs []error
	qs := queries(t, file, data)
	if len(qs) == 0 {
		errs = append(errs, fmt.Errorf("%s: no queries", file))
	}
	for _, q := range qs {
		names, err := metricsOf(q.Expr, e.docs)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %q: %v", q.Where, q.Expr, err))
			continue
		}
		for _, n := range names {
			if err := e.check(n); err != nil {
				errs = append(errs, fmt.Errorf("%s: %v", q.Where, err))
			}
			if m, ok := e.docs.Series(n); ok {
				used[m.Name] = true
			}
		}
	}
	return errs, used
}

// TestDashboardQueriesUseExportedMetrics parses every query of every
// dashboard with the PromQL parser and fails on a metric the code does not
// export (docs/interfaces.md until a role's metrics land in the Go sources).
func TestDashboardQueriesUseExportedMetrics(t *testing.T) {
	e := loadExported(t)
	files, err := filepath.Glob(filepath.Join(dashboardDir, "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 3 {
		t.Fatalf("dashboards %v, want storage, compaction, autoscaler", files)
	}
	used := map[string]map[string]bool{}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		errs, u := checkDashboard(t, e, f, data)
		for _, err := range errs {
			t.Error(err)
		}
		used[strings.TrimSuffix(filepath.Base(f), ".json")] = u
	}
	// What each dashboard must show (the list).
	want := map[string][]string{
		"storage": {"bellows_kv_request_duration_seconds", "bellows_block_cache_hits_total", "bellows_block_cache_misses_total", "bellows_region_sst_files",
			"bellows_flush_errors_total", "bellows_write_stalls_total", "bellows_build_info"}, // #31: errors and versions
		"compaction": {"bellows_compactions_total", "bellows_compaction_queue_depth", "bellows_compaction_pending_bytes",
			"bellows_warmup_progress_ratio", "bellows_warmup_bytes_total", "bellows_build_info"},
	}
	// The autoscaler dashboard: every model input and output the operator registers.
	for n := range e.code {
		if strings.HasPrefix(n, "bellows_autoscaler_") {
			want["autoscaler"] = append(want["autoscaler"], n)
		}
	}
	if len(want["autoscaler"]) < 12 {
		t.Errorf("found %d bellows_autoscaler_* metrics in the Go sources, want the 12 of docs/interfaces.md", len(want["autoscaler"]))
	}
	for d, names := range want {
		for _, n := range names {
			if !used[d][n] {
				t.Errorf("dashboard %s does not show %s", d, n)
			}
		}
	}
}

// TestCodeMetricsAreDocumented: every bellows_ metric the Go sources register
// is in docs/interfaces.md ("change them here first"), and the operator
// registers exactly the documented autoscaler metrics.
func TestCodeMetricsAreDocumented(t *testing.T) {
	e := loadExported(t)
	for n, m := range e.code {
		if strings.HasPrefix(n, "bellows_") {
			if _, ok := e.docs[n]; !ok {
				t.Errorf("%s (%s) is not in docs/interfaces.md", n, m.Section)
			}
		}
	}
	var docOp, codeOp []string
	for n, m := range e.docs {
		if strings.HasPrefix(m.Section, "Operator") {
			docOp = append(docOp, n)
		}
	}
	for n := range e.code {
		if strings.HasPrefix(n, "bellows_autoscaler_") || strings.HasPrefix(n, "bellows_scheduled_backup_") {
			codeOp = append(codeOp, n)
		}
	}
	slices.Sort(docOp)
	slices.Sort(codeOp)
	if !slices.Equal(docOp, codeOp) {
		t.Errorf("operator metrics\ndocs %v\ncode %v", docOp, codeOp)
	}
	if !e.landed["Operator (autoscaler)"] {
		t.Errorf("the operator section is not recognised as landed; sections %v", slices.Sorted(maps.Keys(e.landed)))
	}
}

// TestDashboardCheckRejects: the check fails on what it must fail on.
func TestDashboardCheckRejects(t *testing.T) {
	e := loadExported(t)
	// A store section whose code has landed but lacks a documented name.
	landedStore := exported{docs: e.docs, code: metricnames.Set{"bellows_regions": {Name: "bellows_regions", Type: metricnames.Gauge}}, landed: map[string]bool{"Store": true}}
	cases := []struct {
		name string
		e    exported
		expr string
		want string
	}{
		{"unknown metric", e, `sum(rate(bellows_nope_total[$__rate_interval]))`, "bellows_nope_total"},
		{"bucket of a gauge", e, `bellows_regions_bucket`, "bellows_regions_bucket"},
		{"parse error", e, `sum(rate(bellows_regions[5m])`, "unclosed"},
		{"a Grafana variable outside quotes", e, `bellows_regions{pod=~"$pod"} > $threshold`, ""},
		{"no metric name", e, `{pod="x"}`, "names no metric"},
		{"documented, not exported by landed code", landedStore, `rate(bellows_block_cache_hits_total[5m])`, "do not"},
		{"regex on __name__", e, `{__name__=~"bellows_.*"}`, "names no metric"},
		{"undocumented label", e, `bellows_compactions_total{op="get"}`, `no label "op"`},
		{"undocumented label value", e, `bellows_compactions_total{location="cloud"}`, "local remote"},
		{"grouping by an undocumented label", e, `sum by (region) (rate(bellows_block_cache_hits_total[5m]))`, `no label "region"`},
		{"le on a count", e, `sum by (le) (rate(bellows_kv_request_duration_seconds_count[5m]))`, `no label "le"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dash := fmt.Sprintf(`{"panels":[{"type":"row","panels":[{"title":"x","targets":[{"refId":"A","expr":%q}]}]}]}`, c.expr)
			errs, _ := checkDashboard(t, c.e, "test.json", []byte(dash))
			if len(errs) == 0 {
				t.Fatalf("no error for %s", c.expr)
			}
			if !strings.Contains(fmt.Sprint(errs), c.want) {
				t.Errorf("errors %v do not mention %q", errs, c.want)
			}
		})
	}
	// And accepts the good ones: histogram series, Grafana intervals, landed code.
	good := exported{docs: e.docs, code: metricnames.Set{"bellows_kv_request_duration_seconds": {Type: metricnames.Histogram}}, landed: map[string]bool{"Store": true}}
	dash := `{"panels":[{"targets":[{"refId":"A","expr":"histogram_quantile(0.9, sum by (le) (rate(bellows_kv_request_duration_seconds_bucket{op=\"get\", namespace=~\"$namespace\"}[$__rate_interval])))"}]}],
	  "templating":{"list":[{"name":"ns","type":"query","query":{"query":"label_values(bellows_kv_request_duration_seconds_count, namespace)"}}]}}`
	if errs, used := checkDashboard(t, good, "good.json", []byte(dash)); len(errs) != 0 || !used["bellows_kv_request_duration_seconds"] {
		t.Errorf("good dashboard: %v (used %v)", errs, used)
	}
}

// TestContractMetricsAreExported: the metric names the operator's autoscaler
// reads (internal/contract) are exported by the pods and documented, so a
// rename on either side fails here, not as a silent "metrics unavailable".
func TestContractMetricsAreExported(t *testing.T) {
	e := loadExported(t)
	for _, name := range []string{
		contract.MetricCompactorInflight, contract.MetricCompactorRate, contract.MetricCompactorTransferRate,
		contract.MetricCompactionRequested, contract.MetricCompactionRequestedBytes,
		contract.MetricCompactionQueueDepth, contract.MetricCompactionPendingBytes,
		contract.MetricClusterRegions, contract.MetricStoreRegions, contract.MetricStoreRegionsWaiting,
	} {
		if _, ok := e.code.Series(name); !ok {
			t.Errorf("%s: the autoscaler reads it, no Go source exports it", name)
		}
		if _, ok := e.docs.Series(name); !ok {
			t.Errorf("%s: the autoscaler reads it, docs/interfaces.md does not list it", name)
		}
	}
}

// TestDashboardsSelectByKVCluster: the storage and compaction dashboards
// have a KVCluster variable listing the clusters by name (their stores' job
// is <cluster>-headless), and every selector of a store metric is narrowed
// by it and by the namespace; the storage dashboard shows the requests'
// errors by code and the transactions' outcomes.
func TestDashboardsSelectByKVCluster(t *testing.T) {
	e := loadExported(t)
	for _, name := range []string{"storage", "compaction"} {
		file := filepath.Join(dashboardDir, name+".json")
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		var d struct {
			Templating struct {
				List []struct {
					Name, Label, Regex string
					Query              any
				} `json:"list"`
			} `json:"templating"`
		}
		if err := json.Unmarshal(data, &d); err != nil {
			t.Fatal(err)
		}
		found := false
		for _, v := range d.Templating.List {
			if v.Name != "cluster" {
				continue
			}
			found = true
			if v.Label != "KVCluster" || !strings.Contains(fmt.Sprint(v.Query), "bellows_regions") || !strings.Contains(fmt.Sprint(v.Query), ", job)") {
				t.Errorf("%s: variable cluster: label %q, query %v; want KVCluster, the stores' job values", file, v.Label, v.Query)
			}
			// Grafana's regex with named groups: the text shown and the value used.
			re, err := regexp.Compile(strings.Trim(v.Regex, "/"))
			if err != nil {
				t.Fatalf("%s: variable cluster: regex %q: %v", file, v.Regex, err)
			}
			m := re.FindStringSubmatch("demo-headless")
			if m == nil || m[re.SubexpIndex("text")] != "demo" || m[re.SubexpIndex("value")] != "demo-headless" {
				t.Errorf("%s: variable cluster: regex %q on demo-headless: %q, want text demo, value demo-headless", file, v.Regex, m)
			}
			if re.MatchString("workers-compactor") {
				t.Errorf("%s: variable cluster: regex %q lists a worker job", file, v.Regex)
			}
		}
		if !found {
			t.Errorf("%s: no variable cluster", file)
		}

		for _, q := range queries(t, file, data) {
			if strings.Contains(q.Where, "variable") {
				continue
			}
			ex, err := parser.NewParser(parser.Options{}).ParseExpr(grafana.IntervalVars.ReplaceAllString(q.Expr, "5m"))
			if err != nil {
				t.Fatalf("%s: %v", q.Where, err)
			}
			parser.Inspect(ex, func(n parser.Node, _ []parser.Node) error {
				vs, ok := n.(*parser.VectorSelector)
				if !ok {
					return nil
				}
				if m, ok := e.docs.Series(selectorName(vs)); !ok || m.Section != "Store" {
					return nil
				}
				has := map[string]bool{}
				for _, lm := range vs.LabelMatchers {
					has[lm.Name+lm.Type.String()+lm.Value] = true
				}
				if !has[`job=~$cluster`] || !has[`namespace=~$namespace`] {
					t.Errorf("%s: %s is not narrowed to the selected KVClusters and namespaces", q.Where, vs)
				}
				return nil
			})
		}
	}

	data, err := os.ReadFile(filepath.Join(dashboardDir, "storage.json"))
	if err != nil {
		t.Fatal(err)
	}
	var all []string
	for _, q := range queries(t, "storage.json", data) {
		all = append(all, q.Expr)
	}
	for _, want := range []string{"sum by (code)", `code=~"Unknown|Internal|Unavailable|DataLoss|DeadlineExceeded|Unimplemented"`, `op="commit-txn", code="Aborted"`} {
		if !strings.Contains(strings.Join(all, "\n"), want) {
			t.Errorf("storage.json: no query with %s", want)
		}
	}
}
