package charts

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/bellows-kv/bellows/controllers/specs"
	"github.com/bellows-kv/bellows/internal/contract"
)

const chart = "bellows"

// helmBin is the helm that `make chart-test` installs (hack/tool.sh): $HELM,
// else bin/helm. A missing helm fails the tests.
func helmBin(t *testing.T) string {
	t.Helper()
	h := os.Getenv("HELM")
	if h == "" {
		h, _ = filepath.Abs("../bin/helm")
	}
	if _, err := os.Stat(h); err != nil {
		t.Fatalf("no helm at %s (%v): run `make chart-test`, which installs it with hack/tool.sh", h, err)
	}
	return h
}

func helm(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(helmBin(t), args...)
	// Keep helm away from the user's config, cache and kubeconfig.
	home := t.TempDir()
	cmd.Env = append(os.Environ(), "HELM_CONFIG_HOME="+home, "HELM_CACHE_HOME="+home, "HELM_DATA_HOME="+home, "KUBECONFIG="+filepath.Join(home, "none"))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if err != nil {
		err = errors.New(err.Error() + ": " + stderr.String() + stdout.String())
	}
	return stdout.String(), err
}

// render runs helm template and returns the objects by "Kind/name".
func render(t *testing.T, args ...string) map[string]*unstructured.Unstructured {
	t.Helper()
	out, err := helm(t, append([]string{"template", "rel", chart, "--namespace", "bellows-system"}, args...)...)
	if err != nil {
		t.Fatalf("helm template %v: %v", args, err)
	}
	objs := map[string]*unstructured.Unstructured{}
	for _, doc := range strings.Split(out, "\n---") {
		var m map[string]any
		if err := yaml.Unmarshal([]byte(doc), &m); err != nil {
			t.Fatalf("rendered YAML: %v\n%s", err, doc)
		}
		if len(m) == 0 {
			continue
		}
		u := &unstructured.Unstructured{Object: m}
		key := u.GetKind() + "/" + u.GetName()
		if objs[key] != nil {
			t.Errorf("%s rendered twice", key)
		}
		objs[key] = u
	}
	return objs
}

func kinds(objs map[string]*unstructured.Unstructured, kind string) []*unstructured.Unstructured {
	var out []*unstructured.Unstructured
	for _, o := range objs {
		if o.GetKind() == kind {
			out = append(out, o)
		}
	}
	return out
}

func into(t *testing.T, u *unstructured.Unstructured, v any) {
	t.Helper()
	data, err := json.Marshal(u.Object)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, v); err != nil {
		t.Fatalf("%s/%s: %v", u.GetKind(), u.GetName(), err)
	}
}

func readYAML(t *testing.T, path string, v any) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(data, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

func TestHelmLint(t *testing.T) {
	for _, args := range [][]string{
		nil,
		{"--set", "samples.enabled=true", "--set", "samples.bucketSecret.create=true"},
		{"--set", "serviceMonitor.enabled=true", "--set", "dashboards.enabled=false"},
		{"--set", "prometheusRule.enabled=true"},
		{"--set", "networkPolicy.enabled=false"},
		{"--set", "networkPolicy.monitoringNamespaces=null"},
	} {
		if out, err := helm(t, append([]string{"lint", "--strict", chart}, args...)...); err != nil {
			t.Errorf("helm lint %v: %v", args, err)
		} else if !strings.Contains(out, "0 chart(s) failed") {
			t.Errorf("helm lint %v: %s", args, out)
		}
	}
}

// TestTemplateDefaults: the operator and its RBAC, no ServiceMonitor or
// PrometheusRule without the API, no samples.
func TestTemplateDefaults(t *testing.T) {
	objs := render(t)
	for _, want := range []string{
		"ServiceAccount/rel-bellows-operator", "ClusterRole/rel-bellows-operator", "ClusterRoleBinding/rel-bellows-operator",
		"Role/rel-bellows-operator-leader-election", "RoleBinding/rel-bellows-operator-leader-election",
		"Deployment/rel-bellows-operator", "Service/rel-bellows-operator-metrics", "PodDisruptionBudget/rel-bellows-operator",
		"NetworkPolicy/rel-bellows-operator",
	} {
		if objs[want] == nil {
			t.Errorf("no %s", want)
		}
	}
	for _, kind := range []string{"ServiceMonitor", "PrometheusRule", "KVCluster", "CompactionPool", "Secret", "CustomResourceDefinition"} {
		if n := len(kinds(objs, kind)); n != 0 {
			t.Errorf("%d %s rendered by default", n, kind)
		}
	}

	// The Deployment runs what config/manager runs, under the restricted profile.
	var dep appsv1.Deployment
	into(t, objs["Deployment/rel-bellows-operator"], &dep)
	var mgr appsv1.Deployment
	data, err := os.ReadFile("../config/manager/manager.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, doc := range strings.Split(string(data), "\n---") {
		if strings.Contains(doc, "kind: Deployment") {
			if err := yaml.Unmarshal([]byte(doc), &mgr); err != nil {
				t.Fatal(err)
			}
		}
	}
	if len(mgr.Spec.Template.Spec.Containers) != 1 || len(dep.Spec.Template.Spec.Containers) != 1 {
		t.Fatalf("containers: chart %d, config/manager %d", len(dep.Spec.Template.Spec.Containers), len(mgr.Spec.Template.Spec.Containers))
	}
	c, mc := dep.Spec.Template.Spec.Containers[0], mgr.Spec.Template.Spec.Containers[0]
	if *dep.Spec.Replicas != *mgr.Spec.Replicas {
		t.Errorf("replicas %d, config/manager %d", *dep.Spec.Replicas, *mgr.Spec.Replicas)
	}
	for _, a := range []string{"operator", "--leader-elect=true", "--metrics-bind-address=:8080",
		"--network-policies=true", "--monitoring-namespace=" + contract.DefaultMonitoringNamespace} {
		if !slices.Contains(c.Args, a) {
			t.Errorf("args %q lack %q", c.Args, a)
		}
	}
	// A pinned image, the same as kubectl apply -k installs, and the pods
	// of clusters and pools without spec.image run it too.
	if c.Image != mc.Image || strings.HasSuffix(c.Image, ":latest") {
		t.Errorf("image %q, config/manager %q", c.Image, mc.Image)
	}
	if !slices.Contains(c.Args, "--default-image="+c.Image) {
		t.Errorf("args %q do not make the operator's image the pods' default", c.Args)
	}
	// The replicas prefer different nodes, like config/manager's.
	if a := dep.Spec.Template.Spec.Affinity; a == nil || a.PodAntiAffinity == nil ||
		!reflect.DeepEqual(a.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution[0].PodAffinityTerm.LabelSelector.MatchLabels, dep.Spec.Selector.MatchLabels) ||
		!reflect.DeepEqual(a.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution[0].PodAffinityTerm.TopologyKey, mgr.Spec.Template.Spec.Affinity.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution[0].PodAffinityTerm.TopologyKey) {
		t.Errorf("operator replicas have no default anti-affinity on their own pods: %+v", a)
	}
	var pdb policyv1.PodDisruptionBudget
	into(t, objs["PodDisruptionBudget/rel-bellows-operator"], &pdb)
	if pdb.Spec.MaxUnavailable == nil || pdb.Spec.MaxUnavailable.IntValue() != 1 || !reflect.DeepEqual(pdb.Spec.Selector.MatchLabels, dep.Spec.Selector.MatchLabels) {
		t.Errorf("operator PDB %+v does not allow one eviction of the operator's pods", pdb.Spec)
	}
	if !reflect.DeepEqual(c.Resources, mc.Resources) {
		t.Errorf("resources %v, config/manager %v", c.Resources, mc.Resources)
	}
	// One port, TLS: the probes go to the metrics port over HTTPS.
	for _, get := range []*corev1.HTTPGetAction{c.LivenessProbe.HTTPGet, c.ReadinessProbe.HTTPGet} {
		if get.Port.String() != "metrics" || get.Scheme != corev1.URISchemeHTTPS {
			t.Errorf("probe %+v: want HTTPS on the metrics port", get)
		}
	}
	if c.LivenessProbe.HTTPGet.Path != "/healthz" || c.ReadinessProbe.HTTPGet.Path != "/readyz" {
		t.Errorf("probes %+v %+v", c.LivenessProbe.HTTPGet, c.ReadinessProbe.HTTPGet)
	}
	ports := map[string]int32{}
	for _, p := range c.Ports {
		ports[p.Name] = p.ContainerPort
	}
	if !reflect.DeepEqual(ports, map[string]int32{"metrics": 8080}) {
		t.Errorf("ports %v, want the metrics port alone", ports)
	}
	sc, psc := c.SecurityContext, dep.Spec.Template.Spec.SecurityContext
	if sc == nil || psc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
		sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
		sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) ||
		psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("not restricted: container %+v pod %+v", sc, psc)
	}
	// The stores' and workers' NetworkPolicies let the operator's pods
	// scrape them: by these labels, in the namespace it learns from
	// POD_NAMESPACE. The chart and config/manager label and tell it so.
	for _, d := range []*appsv1.Deployment{&dep, &mgr} {
		for k, v := range specs.OperatorPodLabels() {
			if d.Spec.Template.Labels[k] != v {
				t.Errorf("%s: pod labels %v lack %s=%s", d.Name, d.Spec.Template.Labels, k, v)
			}
		}
		env := d.Spec.Template.Spec.Containers[0].Env
		if !slices.ContainsFunc(env, func(e corev1.EnvVar) bool {
			return e.Name == contract.PodNamespaceEnv && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.namespace"
		}) {
			t.Errorf("%s: env %v does not give the operator its namespace", d.Name, env)
		}
	}
	if dep.Spec.Template.Spec.ServiceAccountName != "rel-bellows-operator" {
		t.Errorf("service account %q", dep.Spec.Template.Spec.ServiceAccountName)
	}

	// The ClusterRole's rules are controller-gen's; the leader-election Role
	// is config/rbac's.
	var cr, gen rbacv1.ClusterRole
	into(t, objs["ClusterRole/rel-bellows-operator"], &cr)
	readYAML(t, "../config/rbac/role.yaml", &gen)
	if len(gen.Rules) == 0 || !reflect.DeepEqual(cr.Rules, gen.Rules) {
		t.Errorf("ClusterRole rules differ from config/rbac/role.yaml:\nchart %v\nconfig %v", cr.Rules, gen.Rules)
	}
	var le, genLE rbacv1.Role
	into(t, objs["Role/rel-bellows-operator-leader-election"], &le)
	readYAML(t, "../config/rbac/leader_election_role.yaml", &genLE)
	if !reflect.DeepEqual(le.Rules, genLE.Rules) || le.Namespace != "bellows-system" {
		t.Errorf("leader-election Role %v in %q, config/rbac %v", le.Rules, le.Namespace, genLE.Rules)
	}
	var crb rbacv1.ClusterRoleBinding
	into(t, objs["ClusterRoleBinding/rel-bellows-operator"], &crb)
	if crb.RoleRef.Name != cr.Name || len(crb.Subjects) != 1 || crb.Subjects[0].Name != "rel-bellows-operator" || crb.Subjects[0].Namespace != "bellows-system" {
		t.Errorf("ClusterRoleBinding %+v", crb)
	}

	// The metrics Service selects the operator's pods.
	var svc corev1.Service
	into(t, objs["Service/rel-bellows-operator-metrics"], &svc)
	for k, v := range svc.Spec.Selector {
		if dep.Spec.Template.Labels[k] != v {
			t.Errorf("Service selector %s=%s does not match the pod labels %v", k, v, dep.Spec.Template.Labels)
		}
	}
	if len(svc.Spec.Selector) == 0 {
		t.Errorf("Service has no selector")
	}
}

// TestTemplateNetworkPolicy: the operator's pods admit only the monitoring
// namespaces, to the metrics port; the operator is told the same namespaces
// for the stores' and workers' policies, and to make none when the chart
// makes none.
func TestTemplateNetworkPolicy(t *testing.T) {
	cases := []struct {
		name       string
		args       []string
		enabled    bool
		namespaces []string
		arg        string
	}{
		{"defaults", nil, true, []string{"monitoring"}, "monitoring"},
		{"two namespaces", []string{"--set", "networkPolicy.monitoringNamespaces={prometheus,monitoring}"}, true, []string{"prometheus", "monitoring"}, "prometheus,monitoring"},
		// No monitoring namespace: no ingress at all (an empty list, not
		// an absent one, which would admit everyone).
		{"no monitoring namespace", []string{"--set", "networkPolicy.monitoringNamespaces=null"}, true, nil, ""},
		{"disabled", []string{"--set", "networkPolicy.enabled=false"}, false, nil, "monitoring"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			objs := render(t, c.args...)
			var dep appsv1.Deployment
			into(t, objs["Deployment/rel-bellows-operator"], &dep)
			args := dep.Spec.Template.Spec.Containers[0].Args
			for _, a := range []string{fmt.Sprintf("--network-policies=%t", c.enabled), "--monitoring-namespace=" + c.arg} {
				if !slices.Contains(args, a) {
					t.Errorf("args %q lack %q", args, a)
				}
			}
			u := objs["NetworkPolicy/rel-bellows-operator"]
			if (u != nil) != c.enabled {
				t.Fatalf("NetworkPolicy rendered = %v, want %v", u != nil, c.enabled)
			}
			if u == nil {
				return
			}
			if _, ok, _ := unstructured.NestedSlice(u.Object, "spec", "ingress"); !ok {
				t.Fatalf("spec.ingress absent: every source would be admitted")
			}
			var np networkingv1.NetworkPolicy
			into(t, u, &np)
			if !reflect.DeepEqual(np.Spec.PodSelector.MatchLabels, dep.Spec.Selector.MatchLabels) || np.Namespace != "bellows-system" {
				t.Errorf("selects %v in %q, want the operator's pods %v", np.Spec.PodSelector.MatchLabels, np.Namespace, dep.Spec.Selector.MatchLabels)
			}
			if !reflect.DeepEqual(np.Spec.PolicyTypes, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}) {
				t.Errorf("policy types %v, want Ingress only", np.Spec.PolicyTypes)
			}
			var want []networkingv1.NetworkPolicyIngressRule
			if len(c.namespaces) > 0 {
				want = []networkingv1.NetworkPolicyIngressRule{{
					Ports: []networkingv1.NetworkPolicyPort{{Port: ptr.To(intstr.FromString("metrics")), Protocol: ptr.To(corev1.ProtocolTCP)}},
					From: []networkingv1.NetworkPolicyPeer{{NamespaceSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
						{Key: "kubernetes.io/metadata.name", Operator: metav1.LabelSelectorOpIn, Values: c.namespaces},
					}}}},
				}}
			}
			if len(np.Spec.Ingress) != len(want) || (len(want) > 0 && !reflect.DeepEqual(np.Spec.Ingress, want)) {
				t.Errorf("ingress\n got %+v\nwant %+v", np.Spec.Ingress, want)
			}
			// The port it names is the operator's metrics port.
			if !slices.ContainsFunc(dep.Spec.Template.Spec.Containers[0].Ports, func(p corev1.ContainerPort) bool {
				return p.Name == "metrics" && p.ContainerPort == 8080
			}) {
				t.Errorf("no container port named metrics: %v", dep.Spec.Template.Spec.Containers[0].Ports)
			}
		})
	}
}

func TestTemplateServiceMonitor(t *testing.T) {
	api := []string{"--api-versions", "monitoring.coreos.com/v1/ServiceMonitor"}
	cases := []struct {
		name string
		args []string
		want bool
	}{
		{"auto without the API", nil, false},
		{"auto with the API", api, true},
		{"auto with the group version", []string{"--api-versions", "monitoring.coreos.com/v1"}, true},
		{"auto with another group", []string{"--api-versions", "monitoring.example.com/v1/ServiceMonitor"}, false},
		{"disabled with the API", append([]string{"--set", "serviceMonitor.enabled=false"}, api...), false},
		{"enabled without the API", []string{"--set", "serviceMonitor.enabled=true"}, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			objs := render(t, c.args...)
			sm := objs["ServiceMonitor/rel-bellows-operator"]
			if (sm != nil) != c.want {
				t.Fatalf("ServiceMonitor rendered = %v, want %v", sm != nil, c.want)
			}
			if sm == nil {
				return
			}
			var svc corev1.Service
			into(t, objs["Service/rel-bellows-operator-metrics"], &svc)
			sel, _, _ := unstructured.NestedStringMap(sm.Object, "spec", "selector", "matchLabels")
			for k, v := range sel {
				if svc.Labels[k] != v {
					t.Errorf("ServiceMonitor selects %s=%s; Service labels %v", k, v, svc.Labels)
				}
			}
			eps, _, _ := unstructured.NestedSlice(sm.Object, "spec", "endpoints")
			if len(eps) != 1 || eps[0].(map[string]any)["port"] != "metrics" || eps[0].(map[string]any)["scheme"] != "https" {
				t.Errorf("endpoints %v: want the metrics port over https", eps)
			}
		})
	}
}

func TestTemplateSamples(t *testing.T) {
	objs := render(t, "--set", "samples.enabled=true", "--set", "image.tag=v9.9.9")
	kvc, cp := objs["KVCluster/demo"], objs["CompactionPool/workers"]
	if kvc == nil || cp == nil {
		t.Fatalf("samples not rendered: %v", slices.Sorted(func(yield func(string) bool) {
			for k := range objs {
				if !yield(k) {
					return
				}
			}
		}))
	}
	if objs["Secret/bellows-bucket"] != nil {
		t.Errorf("bucket Secret created although bucketSecret.create is false")
	}
	for _, o := range []*unstructured.Unstructured{kvc, cp} {
		if img, _, _ := unstructured.NestedString(o.Object, "spec", "image"); img != "ghcr.io/bellows-kv/bellows:v9.9.9" {
			t.Errorf("%s image %q", o.GetKind(), img)
		}
		if o.GetNamespace() != "bellows-system" {
			t.Errorf("%s namespace %q", o.GetKind(), o.GetNamespace())
		}
	}
	// The KVCluster is config/samples' with the pool and the Secret wired in.
	var sample map[string]any
	readYAML(t, "../config/samples/kv_v1alpha1_kvcluster.yaml", &sample)
	wantSpec := sample["spec"].(map[string]any)
	gotSpec := kvc.Object["spec"].(map[string]any)
	delete(gotSpec, "image")
	if !reflect.DeepEqual(gotSpec, wantSpec) {
		t.Errorf("KVCluster spec\n got %v\nwant %v (config/samples)", gotSpec, wantSpec)
	}
	readYAML(t, "../config/samples/kv_v1alpha1_compactionpool.yaml", &sample)
	gotSpec = cp.Object["spec"].(map[string]any)
	delete(gotSpec, "image")
	if !reflect.DeepEqual(gotSpec, sample["spec"]) {
		t.Errorf("CompactionPool spec\n got %v\nwant %v (config/samples)", gotSpec, sample["spec"])
	}

	objs = render(t, "--set", "samples.enabled=true", "--set", "samples.bucketSecret.create=true", "--set", "samples.bucketSecret.name=creds")
	if objs["Secret/creds"] == nil {
		t.Errorf("bucketSecret.create did not create the Secret")
	}
	if ref, _, _ := unstructured.NestedString(objs["KVCluster/demo"].Object, "spec", "bucket", "credentialsSecretRef", "name"); ref != "creds" {
		t.Errorf("credentialsSecretRef %q, want creds", ref)
	}
	// The workers open the same bucket: the pool gets the same Secret.
	if ref, _, _ := unstructured.NestedString(objs["CompactionPool/workers"].Object, "spec", "bucket", "credentialsSecretRef", "name"); ref != "creds" {
		t.Errorf("CompactionPool bucket.credentialsSecretRef %q, want creds", ref)
	}
}

// TestChartCRDsAreGenerated: crds/ holds exactly controller-gen's CRDs.
func TestChartCRDsAreGenerated(t *testing.T) {
	objs := render(t, "--include-crds")
	crds := kinds(objs, "CustomResourceDefinition")
	gen, err := filepath.Glob("../config/crd/bases/*.yaml")
	if err != nil || len(gen) == 0 {
		t.Fatalf("config/crd/bases: %v %v", gen, err)
	}
	if len(crds) != len(gen) {
		t.Fatalf("%d CRDs in the chart, %d in config/crd/bases", len(crds), len(gen))
	}
	for _, f := range gen {
		var want map[string]any
		readYAML(t, f, &want)
		name := want["metadata"].(map[string]any)["name"].(string)
		got := objs["CustomResourceDefinition/"+name]
		if got == nil || !reflect.DeepEqual(got.Object, want) {
			t.Errorf("chart CRD %s differs from %s; run make generate", name, f)
		}
	}
}

func TestTemplateDashboards(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(dashboardDir, "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("dashboards: %v %v", files, err)
	}
	objs := render(t)
	cms := kinds(objs, "ConfigMap")
	if len(cms) != len(files) {
		t.Fatalf("%d dashboard ConfigMaps for %d dashboards", len(cms), len(files))
	}
	for _, f := range files {
		base := strings.TrimSuffix(filepath.Base(f), ".json")
		cm := objs["ConfigMap/rel-bellows-dashboard-"+base]
		if cm == nil {
			t.Errorf("no ConfigMap for %s", f)
			continue
		}
		if cm.GetLabels()["grafana_dashboard"] != "1" {
			t.Errorf("%s labels %v", cm.GetName(), cm.GetLabels())
		}
		data, _, _ := unstructured.NestedString(cm.Object, "data", "bellows-"+base+".json")
		want, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if strings.TrimSpace(data) != strings.TrimSpace(string(want)) {
			t.Errorf("%s: data differs from %s", cm.GetName(), f)
		}
		var d struct {
			UID   string `json:"uid"`
			Title string `json:"title"`
		}
		if err := json.Unmarshal([]byte(data), &d); err != nil || d.UID == "" || d.Title == "" {
			t.Errorf("%s: not a dashboard (%v): uid %q title %q", cm.GetName(), err, d.UID, d.Title)
		}
	}

	objs = render(t, "--set", "dashboards.label=my_dashboards", "--set", "dashboards.labelValue=yes",
		"--set", "dashboards.namespace=monitoring", "--set", "dashboards.annotations.grafana_folder=Bellows")
	for _, cm := range kinds(objs, "ConfigMap") {
		if cm.GetLabels()["my_dashboards"] != "yes" || cm.GetLabels()["grafana_dashboard"] != "" ||
			cm.GetNamespace() != "monitoring" || cm.GetAnnotations()["grafana_folder"] != "Bellows" {
			t.Errorf("%s: labels %v namespace %q annotations %v", cm.GetName(), cm.GetLabels(), cm.GetNamespace(), cm.GetAnnotations())
		}
	}
	if n := len(kinds(render(t, "--set", "dashboards.enabled=false"), "ConfigMap")); n != 0 {
		t.Errorf("%d ConfigMaps with dashboards.enabled=false", n)
	}
}

// TestValuesSchemaRejects: values.schema.json catches bad values.
func TestValuesSchemaRejects(t *testing.T) {
	for _, set := range []string{
		"operator.replicas=-1",
		"operator.metricsPort=70000",
		"image.pullPolicy=Sometimes",
		"serviceMonitor.enabled=maybe",
		"prometheusRule.enabled=maybe",
		"prometheusRule.runbookURL=docs/runbooks.md",
		"prometheusRule.storeJob=",
		"prometheusRule.walPVC=",
		"prometheusRule.expectStores=maybe",
		"operator.securityContext.allowPrivilegeEscalation=true",
		"operator.podSecurityContext.runAsNonRoot=false",
		"samples.compactionPool.spec.autoscaling.mode=Magic",
		"samples.compactionPool.spec.maxReplicas=0",
		"samples.kvCluster.spec.engine.offload=Sometimes",
		"samples.kvCluster.spec.replicas=0",
		"samples.kvCluster.name=Not_A_Name",
		"operator.scrapeTimeout=soon",
		"networkPolicy.enabled=maybe",
		"networkPolicy.monitoringNamespaces={Not_A_Namespace}",
		"networkPolicy.monitoringNamespaces={monitoring,monitoring}",
		"nosuchvalue=1",
	} {
		if _, err := helm(t, "template", "rel", chart, "--set", set); err == nil {
			t.Errorf("--set %s accepted", set)
		} else if !strings.Contains(err.Error(), "schema") {
			t.Errorf("--set %s: failed, but not on the schema: %v", set, err)
		}
	}
}
