package charts

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

const (
	ruleTests = "testdata/prometheusrule_test.yaml"
	runbooks  = "../docs/runbooks.md"
	// ruleFile is the name prometheusrule_test.yaml's rule_files gives the
	// rendered groups.
	ruleFile = "bellows.rules.yaml"
)

// ruleAPI makes helm template render the PrometheusRule.
var ruleAPI = []string{"--api-versions", "monitoring.coreos.com/v1/PrometheusRule"}

// monitoringAPIs are those of a cluster with the Prometheus operator: the
// chart's ServiceMonitor scrapes the operator, so BellowsOperatorDown is
// rendered too.
var monitoringAPIs = append(slices.Clone(ruleAPI), "--api-versions", "monitoring.coreos.com/v1/ServiceMonitor")

// promRule is one rule of a PrometheusRule's groups.
type promRule struct {
	Alert       string            `json:"alert"`
	Record      string            `json:"record"`
	Expr        string            `json:"expr"`
	For         string            `json:"for"`
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations"`
}

type ruleGroup struct {
	Name  string     `json:"name"`
	Rules []promRule `json:"rules"`
}

// renderedRule renders the chart with the monitoring APIs plus args and
// returns the PrometheusRule and its groups.
func renderedRule(t *testing.T, args ...string) (*unstructured.Unstructured, []ruleGroup) {
	t.Helper()
	objs := render(t, append(slices.Clone(monitoringAPIs), args...)...)
	pr := kinds(objs, "PrometheusRule")
	if len(pr) != 1 {
		t.Fatalf("%d PrometheusRules rendered, want 1", len(pr))
	}
	var spec struct {
		Groups []ruleGroup `json:"groups"`
	}
	into(t, &unstructured.Unstructured{Object: pr[0].Object["spec"].(map[string]any)}, &spec)
	if len(spec.Groups) == 0 {
		t.Fatalf("PrometheusRule %s has no groups", pr[0].GetName())
	}
	return pr[0], spec.Groups
}

func alerts(groups []ruleGroup) []promRule {
	var out []promRule
	for _, g := range groups {
		for _, r := range g.Rules {
			if r.Alert != "" {
				out = append(out, r)
			}
		}
	}
	return out
}

// The alerts the issue asks for, each for one condition.
var wantAlerts = []string{
	"BellowsCompactionBacklogGrowing", // compaction backlog growing for a while
	"BellowsCompactorRefusingJobs",    // workers refusing jobs (cache full)
	"BellowsWarmupStalled",            // warmup not progressing
	"BellowsRegionsWaitingForOwner",   // regions waiting for their previous owner too long
	"BellowsStoreDown",                // a store down
	"BellowsCompactorDown",            // a worker down
	"BellowsCapacityModelInfeasible",  // the capacity model infeasible
	"BellowsCompactionsFailing",       // compactions failing, by final outcome
	// #31:
	"BellowsStoresAbsent",             // no store scraped at all
	"BellowsCompactorsAbsent",         // a pool with workers, none scraped
	"BellowsOperatorDown",             // no operator replica up, or none scraped
	"BellowsOperatorReconcileErrors",  // the operator's reconciles failing
	"BellowsRequestErrorRateHigh",     // requests ending in server-side codes
	"BellowsTransactionAbortRateHigh", // commits aborted by conflicts
	"BellowsFlushesFailing",           // a region's flushes failing
	"BellowsWALVolumeFillingUp",       // a store's WAL volume nearly full
	// #26:
	"BellowsRegionCannotSplit", // a region over its split size that does not split
	// #30:
	"BellowsClockOffsetTooLarge",     // a store refusing requests for its clock
	"BellowsLivenessLeaseLost",       // a running store that cannot renew its liveness lease
	"BellowsRegionsWithoutLiveOwner", // regions the map gives to a dead store, not failed over
	"BellowsWatchStalled",            // a watch stream without a resolved mark for 5 minutes
	"BellowsBackupTooOld",            // a ScheduledBackup without a recent backup
	"BellowsWALArchiveLagging",       // a region's WAL not reaching the archive
	// #52:
	"BellowsStoreMemoryNearLimit", // a store's resident memory near its container's limit
}

func TestTemplatePrometheusRule(t *testing.T) {
	cases := []struct {
		name string
		args []string
		want bool
	}{
		{"auto without the API", nil, false},
		{"auto with the API", ruleAPI, true},
		{"auto with the group version", []string{"--api-versions", "monitoring.coreos.com/v1"}, true},
		// A live cluster lists every kind it serves: one with only the
		// ServiceMonitor CRD (envtest's) has no PrometheusRule to create.
		{"auto on a cluster serving only ServiceMonitor", []string{"--api-versions", "monitoring.coreos.com/v1", "--api-versions", "monitoring.coreos.com/v1/ServiceMonitor"}, false},
		{"auto with another group", []string{"--api-versions", "monitoring.example.com/v1/PrometheusRule"}, false},
		{"disabled with the API", append([]string{"--set", "prometheusRule.enabled=false"}, ruleAPI...), false},
		{"enabled without the API", []string{"--set", "prometheusRule.enabled=true"}, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			objs := render(t, c.args...)
			pr := objs["PrometheusRule/rel-bellows"]
			if (pr != nil) != c.want {
				t.Fatalf("PrometheusRule rendered = %v, want %v", pr != nil, c.want)
			}
		})
	}
	// The ServiceMonitor is gated the same way.
	objs := render(t, "--api-versions", "monitoring.coreos.com/v1", "--api-versions", "monitoring.coreos.com/v1/ServiceMonitor")
	if objs["ServiceMonitor/rel-bellows-operator"] == nil {
		t.Errorf("no ServiceMonitor on a cluster serving it")
	}
	objs = render(t, "--api-versions", "monitoring.coreos.com/v1", "--api-versions", "monitoring.coreos.com/v1/PrometheusRule")
	if objs["ServiceMonitor/rel-bellows-operator"] != nil {
		t.Errorf("a ServiceMonitor on a cluster serving only PrometheusRule")
	}

	pr, groups := renderedRule(t, "--set", "prometheusRule.labels.release=prom",
		"--set", "prometheusRule.storeJob=kv-.+-headless", "--set", "prometheusRule.runbookURL=https://example.com/rb.md")
	if pr.GetNamespace() != "bellows-system" || pr.GetLabels()["release"] != "prom" || pr.GetLabels()["app.kubernetes.io/part-of"] != "bellows" {
		t.Errorf("PrometheusRule %s/%s labels %v", pr.GetNamespace(), pr.GetName(), pr.GetLabels())
	}
	var names []string
	for _, a := range alerts(groups) {
		names = append(names, a.Alert)
		if (a.Alert == "BellowsStoreDown" || a.Alert == "BellowsStoresAbsent") && !strings.Contains(a.Expr, `job=~"kv-.+-headless"`) {
			t.Errorf("storeJob not in %s: %s", a.Alert, a.Expr)
		}
		if want := "https://example.com/rb.md#" + strings.ToLower(a.Alert); a.Annotations["runbook_url"] != want {
			t.Errorf("%s runbook_url %q, want %q", a.Alert, a.Annotations["runbook_url"], want)
		}
	}
	if !slices.Equal(slices.Sorted(slices.Values(names)), slices.Sorted(slices.Values(wantAlerts))) {
		t.Errorf("alerts %v, want %v", names, wantAlerts)
	}

	// The operator's job and the WAL PVCs follow the values; without the
	// chart's ServiceMonitor the operator's job is unknown unless given, and
	// BellowsStoresAbsent goes with expectStores.
	byName := func(groups []ruleGroup) map[string]promRule {
		out := map[string]promRule{}
		for _, a := range alerts(groups) {
			out[a.Alert] = a
		}
		return out
	}
	rules := byName(groups)
	for alert, want := range map[string]string{
		"BellowsOperatorDown":            `absent(up{job="rel-bellows-operator-metrics", namespace="bellows-system"} == 1)`,
		"BellowsOperatorReconcileErrors": `{job="rel-bellows-operator-metrics", namespace="bellows-system"}`,
		"BellowsWALVolumeFillingUp":      `{persistentvolumeclaim=~"wal-.+"}`,
	} {
		if !strings.Contains(rules[alert].Expr, want) {
			t.Errorf("%s: %s does not contain %s", alert, rules[alert].Expr, want)
		}
	}
	_, groups = renderedRule(t, "--set", "prometheusRule.operatorJob=ops/bellows", "--set", "prometheusRule.walPVC=wal-kv-.+")
	rules = byName(groups)
	if e := rules["BellowsOperatorDown"].Expr; !strings.Contains(e, `up{job="ops/bellows"`) {
		t.Errorf("operatorJob not in BellowsOperatorDown: %s", e)
	}
	if e := rules["BellowsWALVolumeFillingUp"].Expr; strings.Count(e, `persistentvolumeclaim=~"wal-kv-.+"`) != 2 {
		t.Errorf("walPVC not in both selectors of BellowsWALVolumeFillingUp: %s", e)
	}
	_, groups = renderedRule(t, "--set", "serviceMonitor.enabled=false", "--set", "prometheusRule.expectStores=false")
	rules = byName(groups)
	for _, a := range []string{"BellowsOperatorDown", "BellowsStoresAbsent"} {
		if _, ok := rules[a]; ok {
			t.Errorf("%s rendered with serviceMonitor.enabled=false and prometheusRule.expectStores=false", a)
		}
	}
	if _, ok := rules["BellowsOperatorReconcileErrors"]; !ok {
		t.Errorf("BellowsOperatorReconcileErrors not rendered without the ServiceMonitor")
	}
	_, groups = renderedRule(t, "--set", "serviceMonitor.enabled=false", "--set", "prometheusRule.operatorJob=ops")
	if _, ok := byName(groups)["BellowsOperatorDown"]; !ok {
		t.Errorf("BellowsOperatorDown not rendered with prometheusRule.operatorJob set")
	}
}

// rulesIn counts the alerting and recording rules of groups.
func rulesIn(groups []ruleGroup) int {
	n := 0
	for _, g := range groups {
		n += len(g.Rules)
	}
	return n
}

// checkRules checks every rule expression like the dashboards' queries:
// parsed with the PromQL parser, each metric exported (docs/interfaces.md and
// the Go sources) with its documented labels; other components' metrics
// (`up`, the kubelet's, controller-runtime's) only as docs/interfaces.md's
// "Exported by others" table lists them.
func checkRules(e exported, groups []ruleGroup) ([]error, map[string]bool) {
	var errs []error
	used := map[string]bool{}
	for _, g := range groups {
		for _, r := range g.Rules {
			name := r.Alert + r.Record
			names, err := metricsOf(r.Expr, e.docs)
			if err != nil {
				errs = append(errs, fmt.Errorf("rule %s: %q: %v", name, r.Expr, err))
				continue
			}
			for _, n := range names {
				used[n] = true
				if err := e.check(n); err != nil {
					errs = append(errs, fmt.Errorf("rule %s: %v", name, err))
				}
			}
		}
	}
	return errs, used
}

// TestPrometheusRuleUsesExportedMetrics: every alert's expression names only
// exported metrics, and every alert has a severity, a summary and a
// description that name the labels of what fired, and a runbook_url at its
// section of docs/runbooks.md.
func TestPrometheusRuleUsesExportedMetrics(t *testing.T) {
	e := loadExported(t)
	_, groups := renderedRule(t)
	errs, used := checkRules(e, groups)
	for _, err := range errs {
		t.Error(err)
	}
	for _, n := range []string{"bellows_compaction_debt_bytes", "bellows_compactor_rejections_total", "bellows_warmup_progress_ratio",
		"bellows_regions_waiting", "up", "bellows_compactions_total", "bellows_autoscaler_compaction_size_bytes", "bellows_autoscaler_cache_bytes",
		"bellows_autoscaler_replicas", "bellows_kv_request_duration_seconds_count", "bellows_flush_errors_total",
		"controller_runtime_reconcile_errors_total", "kubelet_volume_stats_available_bytes", "kubelet_volume_stats_capacity_bytes"} {
		if !used[n] {
			t.Errorf("no rule reads %s", n)
		}
	}

	anchors := runbookAnchors(t)
	base := "https://github.com/bellows-kv/bellows/blob/main/docs/runbooks.md#"
	for _, a := range alerts(groups) {
		if s := a.Labels["severity"]; s != "warning" && s != "critical" {
			t.Errorf("%s: severity %q", a.Alert, s)
		}
		for _, k := range []string{"summary", "description"} {
			// An absence has no series whose labels it could name.
			if strings.HasPrefix(a.Expr, "absent(") {
				continue
			}
			if !strings.Contains(a.Annotations[k], "$labels.") {
				t.Errorf("%s: %s %q names no label value", a.Alert, k, a.Annotations[k])
			}
		}
		url := a.Annotations["runbook_url"]
		anchor, ok := strings.CutPrefix(url, base)
		if !ok || !anchors[anchor] {
			t.Errorf("%s: runbook_url %q is not a section of docs/runbooks.md (%s…)", a.Alert, url, base)
		}
	}
}

// runbookAnchors returns GitHub's anchors of docs/runbooks.md's headings and
// checks that each alert's section says what it means, what to check and
// what to do.
func runbookAnchors(t *testing.T) map[string]bool {
	t.Helper()
	data, err := os.ReadFile(runbooks)
	if err != nil {
		t.Fatal(err)
	}
	anchors := map[string]bool{}
	sections := map[string]string{}
	cur := ""
	for _, line := range strings.Split(string(data), "\n") {
		if h, ok := strings.CutPrefix(line, "## "); ok {
			cur = strings.TrimSpace(h)
			anchors[githubAnchor(cur)] = true
			continue
		}
		if h, ok := strings.CutPrefix(line, "### "); ok {
			anchors[githubAnchor(h)] = true
		}
		if cur != "" {
			sections[cur] += line + "\n"
		}
	}
	for _, a := range wantAlerts {
		body, ok := sections[a]
		if !ok {
			t.Errorf("docs/runbooks.md has no section ## %s", a)
			continue
		}
		for _, part := range []string{"What it means", "What to check", "What to do"} {
			if !strings.Contains(body, part) {
				t.Errorf("docs/runbooks.md ## %s does not say %q", a, part)
			}
		}
	}
	return anchors
}

var notAnchor = regexp.MustCompile(`[^\p{L}\p{N}\- _]`)

// githubAnchor is the id GitHub gives a Markdown heading.
func githubAnchor(h string) string {
	h = notAnchor.ReplaceAllString(strings.ToLower(strings.TrimSpace(h)), "")
	return strings.ReplaceAll(h, " ", "-")
}

// TestRuleCheckRejects: the rule check fails on what it must fail on.
func TestRuleCheckRejects(t *testing.T) {
	e := loadExported(t)
	for _, c := range []struct{ expr, want string }{
		{`rate(bellows_nope_total[5m]) > 0`, "bellows_nope_total"},
		{`up{job="x"} == 0 and bellows_regions_waiting{region="r"} > 0`, `no label "region"`},
		{`sum by (pod) (rate(bellows_compactions_total{result="lost"}[5m])) > 0`, "success failure"},
		{`process_cpu_seconds_total > 1`, "process_cpu_seconds_total"},
		{`bellows_regions >`, "unexpected"},
		{`rate(bellows_kv_request_duration_seconds_count{code="Unavailabe"}[5m]) > 0`, "Unavailable"},
		{`increase(controller_runtime_reconcile_errors_total{controller="kvclusters"}[5m]) > 0`, "kvcluster compactionpool"},
		{`kubelet_volume_stats_available_bytes{node="n1"} < 1`, `no label "node"`},
	} {
		errs, _ := checkRules(e, []ruleGroup{{Name: "g", Rules: []promRule{{Alert: "A", Expr: c.expr}}}})
		if len(errs) == 0 || !strings.Contains(fmt.Sprint(errs), c.want) {
			t.Errorf("%s: errors %v do not mention %q", c.expr, errs, c.want)
		}
	}
	good := `up{job=~".+-headless"} == 0 or sum by (namespace, pod, location) (rate(bellows_compactions_total{result="failure"}[5m])) > 0`
	if errs, _ := checkRules(e, []ruleGroup{{Name: "g", Rules: []promRule{{Alert: "A", Expr: good}}}}); len(errs) != 0 {
		t.Errorf("%s: %v", good, errs)
	}
}

// promtoolBin is the promtool that `make chart-test` installs
// (hack/promtool.sh): $PROMTOOL, else bin/promtool. A missing promtool fails
// the test unless SKIP_PROMTOOL=1 says to skip it.
func promtoolBin(t *testing.T) string {
	t.Helper()
	p := os.Getenv("PROMTOOL")
	if p == "" {
		p, _ = filepath.Abs("../bin/promtool")
	}
	if _, err := os.Stat(p); err != nil {
		if os.Getenv("SKIP_PROMTOOL") == "1" {
			t.Skipf("no promtool at %s (%v) and SKIP_PROMTOOL=1: the alert rules are not checked or unit-tested", p, err)
		}
		t.Fatalf("no promtool at %s (%v): run `make promtool` (hack/promtool.sh), or `make chart-test`, which installs it; SKIP_PROMTOOL=1 skips this test", p, err)
	}
	return p
}

func promtool(t *testing.T, dir string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(promtoolBin(t), args...)
	cmd.Dir = dir
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if err != nil {
		err = errors.New(err.Error() + ": " + out.String())
	}
	return out.String(), err
}

// ruleTestFile is the part of a `promtool test rules` file this test reads.
type ruleTestFile struct {
	RuleFiles []string `json:"rule_files"`
	Tests     []struct {
		AlertRuleTest []struct {
			EvalTime  string `json:"eval_time"`
			Alertname string `json:"alertname"`
			ExpAlerts []any  `json:"exp_alerts"`
		} `json:"alert_rule_test"`
	} `json:"tests"`
}

// TestPrometheusRuleUnitTests renders the PrometheusRule, writes its groups
// as a rule file and runs `promtool check rules` and `promtool test rules`
// with charts/testdata/prometheusrule_test.yaml, which must have for every
// alert a case where it fires and one where it does not.
func TestPrometheusRuleUnitTests(t *testing.T) {
	promtoolBin(t)
	pr, groups := renderedRule(t)
	dir := t.TempDir()
	rules, err := yaml.Marshal(map[string]any{"groups": pr.Object["spec"].(map[string]any)["groups"]})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, ruleFile), rules, 0o644); err != nil {
		t.Fatal(err)
	}
	tests, err := os.ReadFile(ruleTests)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, filepath.Base(ruleTests)), tests, 0o644); err != nil {
		t.Fatal(err)
	}

	var tf ruleTestFile
	if err := yaml.Unmarshal(tests, &tf); err != nil {
		t.Fatalf("%s: %v", ruleTests, err)
	}
	if !slices.Equal(tf.RuleFiles, []string{ruleFile}) {
		t.Errorf("%s: rule_files %v, want [%s]", ruleTests, tf.RuleFiles, ruleFile)
	}
	fires, quiet := map[string]bool{}, map[string]bool{}
	for _, tc := range tf.Tests {
		for _, a := range tc.AlertRuleTest {
			if len(a.ExpAlerts) > 0 {
				fires[a.Alertname] = true
			} else {
				quiet[a.Alertname] = true
			}
		}
	}
	for _, a := range alerts(groups) {
		if !fires[a.Alert] {
			t.Errorf("%s: no case where %s fires", ruleTests, a.Alert)
		}
		if !quiet[a.Alert] {
			t.Errorf("%s: no case where %s does not fire", ruleTests, a.Alert)
		}
	}

	if out, err := promtool(t, dir, "check", "rules", ruleFile); err != nil {
		t.Fatalf("promtool check rules: %v", err)
	} else if want := fmt.Sprintf("SUCCESS: %d rules found", rulesIn(groups)); !strings.Contains(out, want) {
		t.Errorf("promtool check rules: %s (want %q)", out, want)
	}
	if out, err := promtool(t, dir, "test", "rules", filepath.Base(ruleTests)); err != nil {
		t.Fatalf("promtool test rules %s: %v", ruleTests, err)
	} else if !strings.Contains(out, "SUCCESS") {
		t.Errorf("promtool test rules: %s", out)
	}
}
