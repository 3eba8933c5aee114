package kubectl_test

// The Kubernetes-facing parts of the plugin against a real kube-apiserver and
// etcd (envtest, the binaries hack/envtest-bins.sh builds; KUBEBUILDER_ASSETS
// or bin/k8s), with the CRDs installed. No operator or kubelet runs: the tests
// write the statuses, pods and events the operator and kubelet would.

import (
	"archive/zip"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	kvapi "github.com/bellows-kv/bellows/api/v1alpha1"
	"github.com/bellows-kv/bellows/cmd/bellows/cli"
	"github.com/bellows-kv/bellows/cmd/bellows/kubectl"
	"github.com/bellows-kv/bellows/controllers/specs"
)

var (
	cfg        *rest.Config
	kubeconfig string // for the commands' --kubeconfig
	c          client.Client
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	root, _ := filepath.Abs(filepath.Join("..", "..", ".."))
	assets := os.Getenv("KUBEBUILDER_ASSETS")
	if assets == "" {
		assets = filepath.Join(root, "bin", "k8s")
	}
	if _, err := os.Stat(filepath.Join(assets, "kube-apiserver")); err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: no kube-apiserver in %s: run `make envtest-bins`, or set KUBEBUILDER_ASSETS\n", assets)
		return 1
	}
	env := &envtest.Environment{
		CRDDirectoryPaths:     []string{filepath.Join(root, "config", "crd", "bases")},
		ErrorIfCRDPathMissing: true,
		BinaryAssetsDirectory: assets,
		Scheme:                kubectl.Scheme(),
	}
	var err error
	if cfg, err = env.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "FAIL: starting envtest:", err)
		return 1
	}
	defer func() { _ = env.Stop() }()
	if c, err = client.New(cfg, client.Options{Scheme: kubectl.Scheme()}); err != nil {
		fmt.Fprintln(os.Stderr, "FAIL:", err)
		return 1
	}
	dir, err := os.MkdirTemp("", "kubectl-bellows-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, "FAIL:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	kubeconfig = filepath.Join(dir, "kubeconfig")
	if err := writeKubeconfig(kubeconfig, cfg); err != nil {
		fmt.Fprintln(os.Stderr, "FAIL: kubeconfig:", err)
		return 1
	}
	return m.Run()
}

// writeKubeconfig writes cfg (envtest's admin) as a kubeconfig file, as a
// user of the plugin has one.
func writeKubeconfig(path string, cfg *rest.Config) error {
	kc := clientcmdapi.NewConfig()
	kc.Clusters["envtest"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["admin"] = &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData, Token: cfg.BearerToken}
	kc.Contexts["envtest"] = &clientcmdapi.Context{Cluster: "envtest", AuthInfo: "admin", Namespace: "default"}
	kc.CurrentContext = "envtest"
	return clientcmd.WriteToFile(*kc, path)
}

// plugin runs `kubectl bellows ARGS` (the command tree kubectl-bellows
// serves) with the test's kubeconfig.
func plugin(t *testing.T, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	cmd := cli.NewKubectlCommand(cli.KubectlPluginName)
	cmd.SetArgs(append(args, "--kubeconfig", kubeconfig))
	var out, errOut bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	err = cmd.ExecuteContext(context.Background())
	return out.String(), errOut.String(), err
}

func namespace(t *testing.T) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "plugin-"}}
	if err := c.Create(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	return ns.Name
}

func cluster(t *testing.T, ns, name, pool string) *kvapi.KVCluster {
	t.Helper()
	ctx := context.Background()
	kc := &kvapi.KVCluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: kvapi.KVClusterSpec{
		Replicas: 2, Bucket: kvapi.BucketSpec{URL: "s3://b"},
	}}
	if pool != "" {
		kc.Spec.CompactionPoolRef = &kvapi.CompactionPoolReference{Name: pool}
	}
	if err := c.Create(ctx, kc); err != nil {
		t.Fatal(err)
	}
	now := metav1.Now()
	kc.Status = kvapi.KVClusterStatus{ObservedGeneration: kc.Generation, Replicas: 2, ReadyReplicas: 2, UpdatedReplicas: 2, Regions: 4,
		RegionAssignment: []kvapi.RegionAssignment{{Pod: name + "-0", Regions: "0,2", Count: 2}, {Pod: name + "-1", Regions: "1,3", Count: 2}},
		Conditions: []metav1.Condition{{Type: kvapi.ConditionReady, Status: metav1.ConditionTrue, Reason: kvapi.ReasonReconciled,
			Message: "2/2 storage pods ready", LastTransitionTime: now, ObservedGeneration: kc.Generation}}}
	if err := c.Status().Update(ctx, kc); err != nil {
		t.Fatal(err)
	}
	return kc
}

func pool(t *testing.T, ns, name string) *kvapi.CompactionPool {
	t.Helper()
	ctx := context.Background()
	p := &kvapi.CompactionPool{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: kvapi.CompactionPoolSpec{
		MinReplicas: 1, MaxReplicas: 4, CacheBytes: resource.MustParse("1Gi"),
	}}
	if err := c.Create(ctx, p); err != nil {
		t.Fatal(err)
	}
	desired := int32(1)
	p.Status = kvapi.CompactionPoolStatus{Replicas: 1, ReadyReplicas: 1, DesiredReplicas: &desired,
		Conditions: []metav1.Condition{{Type: kvapi.ConditionReady, Status: metav1.ConditionTrue, Reason: kvapi.ReasonReconciled,
			Message: "1/1 workers ready", LastTransitionTime: metav1.Now()}}}
	if err := c.Status().Update(ctx, p); err != nil {
		t.Fatal(err)
	}
	return p
}

// pod makes a pod with labels, Ready or not, as the kubelet reports it.
func pod(t *testing.T, ns, name string, labels map[string]string, ready bool) {
	t.Helper()
	ctx := context.Background()
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "bellows", Image: "bellows.test/bellows:1"}}}}
	if err := c.Create(ctx, p); err != nil {
		t.Fatal(err)
	}
	cond := corev1.ConditionFalse
	p.Status.Phase = corev1.PodPending
	p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "bellows", Ready: ready, RestartCount: 1,
		State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}}}}
	if ready {
		cond, p.Status.Phase = corev1.ConditionTrue, corev1.PodRunning
		p.Status.ContainerStatuses[0].State = corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}
	}
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: cond}}
	if err := c.Status().Update(ctx, p); err != nil {
		t.Fatal(err)
	}
}

func event(t *testing.T, ns, kind, object, reason, message string, at time.Time) {
	t.Helper()
	e := &corev1.Event{ObjectMeta: metav1.ObjectMeta{Namespace: ns, GenerateName: object + "."},
		InvolvedObject: corev1.ObjectReference{Kind: kind, Namespace: ns, Name: object},
		Reason:         reason, Message: message, Type: corev1.EventTypeNormal,
		FirstTimestamp: metav1.NewTime(at), LastTimestamp: metav1.NewTime(at), Count: 1}
	if err := c.Create(context.Background(), e); err != nil {
		t.Fatal(err)
	}
}

// demo is a Ready cluster "demo" with pool "workers": two storage pods
// (demo-1 not Ready), one worker, events of theirs and one of another
// cluster's.
func demo(t *testing.T) (ns string) {
	t.Helper()
	ns = namespace(t)
	kc := cluster(t, ns, "demo", "workers")
	p := pool(t, ns, "workers")
	pod(t, ns, "demo-0", specs.StoreSelectorLabels(kc), true)
	pod(t, ns, "demo-1", specs.StoreSelectorLabels(kc), false)
	pod(t, ns, "workers-7d9f-x2", specs.PoolSelectorLabels(p), true)
	base := time.Now().Add(-time.Hour)
	event(t, ns, "KVCluster", "demo", "Created", "created the StatefulSet demo", base)
	event(t, ns, "Pod", "demo-1", "BackOff", "Back-off restarting failed container", base.Add(2*time.Minute))
	event(t, ns, "CompactionPool", "workers", "Scaled", "scaled to 1 worker", base.Add(time.Minute))
	event(t, ns, "KVCluster", "other", "Created", "not demo's", base.Add(3*time.Minute))
	return ns
}

func TestStatusShowsClusterPoolPodsAndItsEvents(t *testing.T) {
	ns := demo(t)
	k, err := kubectl.NewKube(cfg, ns)
	if err != nil {
		t.Fatal(err)
	}
	st, err := k.Status(context.Background(), "demo", 10)
	if err != nil {
		t.Fatal(err)
	}
	var pods, events []string
	for _, p := range append(st.Stores, st.Workers...) {
		pods = append(pods, p.Name)
	}
	for _, e := range st.Events {
		events = append(events, e.Reason)
	}
	if st.Pool == nil || st.Pool.Name != "workers" || !slices.Equal(pods, []string{"demo-0", "demo-1", "workers-7d9f-x2"}) {
		t.Errorf("pool %v, pods %v", st.Pool, pods)
	}
	if !slices.Equal(events, []string{"Created", "Scaled", "BackOff"}) {
		t.Errorf("events %v, want demo's and its pool's, oldest first", events)
	}
	if st, _ := k.Status(context.Background(), "demo", 1); len(st.Events) != 1 || st.Events[0].Reason != "BackOff" {
		t.Errorf("--events 1: %v, want only the newest", st.Events)
	}

	out, _, err := plugin(t, "status", "demo", "-n", ns)
	if err != nil {
		t.Fatalf("status: %v\n%s", err, out)
	}
	for _, want := range []string{
		"KVCluster: demo (namespace " + ns + ")",
		"Stores: 2/2 ready, 2 updated (spec: 2)",
		"Regions: 4",
		"Ready: True Reconciled: 2/2 storage pods ready",
		"demo-1 2 1,3",
		"CompactionPool: workers",
		"Workers: 1/1 ready, desired 1",
		"demo-0 store 1/1 Running 1",
		"demo-1 store 0/1 CrashLoopBackOff 1",
		"workers-7d9f-x2 worker 1/1 Running",
		"Normal BackOff pod/demo-1 Back-off restarting failed container",
	} {
		if !strings.Contains(squeeze(out), want) {
			t.Errorf("status lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "not demo's") {
		t.Errorf("status shows another cluster's event:\n%s", out)
	}
	// The namespace's only cluster needs no name.
	if out2, _, err := plugin(t, "status", "-n", ns, "-o", "json"); err != nil || !strings.Contains(out2, `"name": "demo"`) {
		t.Errorf("status -o json without a name: %v\n%s", err, out2)
	}
}

// squeeze reads runs of white space as one space, as a reader of aligned
// columns does.
func squeeze(s string) string { return strings.Join(strings.Fields(s), " ") }

func TestStatusOfAClusterThatIsNotThereListsThoseThatAre(t *testing.T) {
	ns := namespace(t)
	_, _, err := plugin(t, "status", "demo", "-n", ns)
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf(`no KVCluster "demo" in namespace %q (there is none)`, ns)) {
		t.Fatalf("status in an empty namespace: %v", err)
	}
	cluster(t, ns, "alpha", "")
	cluster(t, ns, "beta", "")
	_, _, err = plugin(t, "status", "demo", "-n", ns)
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf(`no KVCluster "demo" in namespace %q (there are: alpha, beta)`, ns)) ||
		!strings.Contains(err.Error(), "kubectl get kvclusters -A") {
		t.Fatalf("status of a missing cluster: %v", err)
	}
	_, _, err = plugin(t, "regions", "-n", ns)
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf(`name a KVCluster: namespace %q has 2 (there are: alpha, beta)`, ns)) {
		t.Fatalf("regions without a name among two: %v", err)
	}
}

func TestRegionsWithNoReadyStoreSaysWhy(t *testing.T) {
	ns := namespace(t)
	kc := cluster(t, ns, "demo", "")
	pod(t, ns, "demo-0", specs.StoreSelectorLabels(kc), false)
	_, _, err := plugin(t, "regions", "demo", "-n", ns)
	var nr *kubectl.NoReadyStoreError
	if !errors.As(err, &nr) || !strings.Contains(err.Error(), "no storage pod of KVCluster "+ns+"/demo is Ready (demo-0 CrashLoopBackOff)") {
		t.Fatalf("regions with no Ready store: %v", err)
	}
	_, _, err = plugin(t, "flush", "demo", "region-000", "-n", ns)
	if !errors.As(err, &nr) {
		t.Fatalf("flush with no Ready store: %v", err)
	}
}

func TestReportHoldsTheResourcesPodsEventsAndSaysWhatIsMissing(t *testing.T) {
	ns := demo(t)
	file := filepath.Join(t.TempDir(), "out.zip")
	out, _, err := plugin(t, "report", "demo", "-n", ns, "-f", file, "--operator-namespace", ns)
	if err != nil || out != "wrote "+file+"\n" {
		t.Fatalf("report: %v\n%s", err, out)
	}
	z, err := zip.OpenReader(file)
	if err != nil {
		t.Fatal(err)
	}
	defer z.Close()
	files := map[string]string{}
	for _, f := range z.File {
		rc, err := f.Open()
		if err != nil {
			t.Fatal(err)
		}
		var b bytes.Buffer
		_, _ = b.ReadFrom(rc)
		rc.Close()
		files[f.Name] = b.String()
	}
	for name, want := range map[string]string{
		"kvcluster.yaml":      "kind: KVCluster",
		"compactionpool.yaml": "kind: CompactionPool",
		"pods.yaml":           "name: workers-7d9f-x2",
		"events.yaml":         "Back-off restarting failed container",
		"README.txt":          "Entries:",
	} {
		if !strings.Contains(files[name], want) {
			t.Errorf("%s lacks %q:\n%s", name, want, files[name])
		}
	}
	if strings.Contains(files["events.yaml"], "not demo's") {
		t.Error("the report holds another cluster's event")
	}
	// envtest runs no kubelet: the logs cannot be read, and README says so.
	readme := files["README.txt"]
	for _, want := range []string{"logs/demo-0/bellows.log", "logs/demo-1/bellows.previous.log", "no operator pods found"} {
		if !strings.Contains(readme, want) {
			t.Errorf("README.txt lacks %q:\n%s", want, readme)
		}
	}
	if _, _, err := plugin(t, "report", "nope", "-n", ns, "-f", filepath.Join(t.TempDir(), "x.zip")); err == nil || !strings.Contains(err.Error(), `no KVCluster "nope"`) {
		t.Errorf("report of a missing cluster: %v", err)
	}
}
