package controllers

// The envtest suite: every test in this package that needs an API server
// runs against one real kube-apiserver + etcd (built by hack/envtest-bins.sh)
// with the operator's reconcilers running in a manager, and a real
// kube-controller-manager running only the garbage collector, so owner
// references are tested by actual deletion. Missing binaries fail the suite.

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap/zapcore"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	kvapi "github.com/bellows-kv/bellows/api/v1alpha1"
	"github.com/bellows-kv/bellows/autoscaler"
)

// suiteDefaultImage is the operator's --default-image in the suite.
const suiteDefaultImage = "registry.test/bellows:v0.0.0-suite"

// suiteNetworkPolicies are the suite's operator's: the chart's defaults for
// an operator in bellows-system.
var suiteNetworkPolicies = NetworkPolicies{Enabled: true, OperatorNamespace: "bellows-system", MonitoringNamespaces: []string{"monitoring"}}

// unmanagedLabel on a KVCluster or CompactionPool hides it from the suite's
// manager (its cache selects objects without the label), for a test that
// runs reconcilers of its own on it, configured otherwise. Their children do
// not carry it: the manager sees them, and ignores them for their owner is
// not in its cache.
const unmanagedLabel = "test.bellows.dev/unmanaged"

var (
	testEnv     *envtest.Environment
	cfg         *rest.Config
	k8sClient   client.Client
	testScheme  = runtime.NewScheme()
	testMetrics *AutoscalerMetrics
	testReg     = prometheus.NewRegistry()
	assetsDir   string
	fed         = &fedSource{obs: map[string]autoscaler.Observation{}}
	held        = &heldRegions{n: map[string]int{}, ownerless: map[string]int{}}
)

// heldRegions is the suite's StoreGauges: the regions a storage pod holds,
// and those its balancer found without a live owner, are what the test set
// for it (namespace/name), 0 when it set none.
type heldRegions struct {
	mu        sync.Mutex
	n         map[string]int
	ownerless map[string]int
}

func (h *heldRegions) set(ns, pod string, n int)                 { h.put(h.n, ns, pod, n) }
func (h *heldRegions) setWithoutLiveOwner(ns, pod string, n int) { h.put(h.ownerless, ns, pod, n) }

func (h *heldRegions) RegionsHeld(_ context.Context, _ *kvapi.KVCluster, pod *corev1.Pod) (int, error) {
	return h.get(h.n, pod), nil
}

func (h *heldRegions) RegionsWithoutLiveOwner(_ context.Context, _ *kvapi.KVCluster, pod *corev1.Pod) (int, error) {
	return h.get(h.ownerless, pod), nil
}

func (h *heldRegions) put(m map[string]int, ns, pod string, n int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	m[ns+"/"+pod] = n
}

func (h *heldRegions) get(m map[string]int, pod *corev1.Pod) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return m[pod.Namespace+"/"+pod.Name]
}

// fedSource is the test's metrics source: tests set the observation of a
// pool; the autoscaler reads it like a scrape.
type fedSource struct {
	mu  sync.Mutex
	obs map[string]autoscaler.Observation
	// grow adds to a pool's Queued at every observation: a queue that
	// grows while the pool is too small.
	grow map[string]float64
}

// growQueue makes the pool's queue grow by n compactions per observation
// (0 stops it).
func (f *fedSource) growQueue(pool string, n float64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.grow == nil {
		f.grow = map[string]float64{}
	}
	f.grow[pool] = n
}

func (f *fedSource) set(pool string, o autoscaler.Observation) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.obs[pool] = o
}

func (f *fedSource) Observe(_ context.Context, t autoscaler.Targets) (autoscaler.Observation, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	o, ok := f.obs[t.Pool]
	if !ok {
		return autoscaler.Observation{}, fmt.Errorf("no metrics fed for %s", t.Pool)
	}
	if n := f.grow[t.Pool]; n != 0 {
		o.Queued += n
		f.obs[t.Pool] = o
	}
	return o, nil
}

func findAssets() (string, error) {
	dir := os.Getenv("KUBEBUILDER_ASSETS")
	if dir == "" {
		dir = filepath.Join("..", "bin", "k8s")
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	for _, b := range []string{"kube-apiserver", "etcd", "kube-controller-manager", "crd/monitoring.coreos.com_servicemonitors.yaml"} {
		if _, err := os.Stat(filepath.Join(abs, b)); err != nil {
			return "", fmt.Errorf("envtest asset %s missing in %s: run `make envtest-bins` (hack/envtest-bins.sh builds them from the Go module proxy)", b, abs)
		}
	}
	return abs, nil
}

func TestMain(m *testing.M) {
	os.Exit(runSuite(m))
}

func runSuite(m *testing.M) int {
	ctrl.SetLogger(zap.New(zap.WriteTo(os.Stderr), zap.UseDevMode(false), zap.Level(zapLevel())))
	var err error
	assetsDir, err = findAssets()
	if err != nil {
		fmt.Fprintln(os.Stderr, "FAIL:", err)
		return 1
	}
	_ = clientgoscheme.AddToScheme(testScheme)
	_ = kvapi.AddToScheme(testScheme)

	testEnv = &envtest.Environment{
		CRDDirectoryPaths:     []string{filepath.Join("..", "config", "crd", "bases")},
		ErrorIfCRDPathMissing: true,
		BinaryAssetsDirectory: assetsDir,
		Scheme:                testScheme,
	}
	cfg, err = testEnv.Start()
	if err != nil {
		fmt.Fprintln(os.Stderr, "FAIL: starting envtest:", err)
		return 1
	}
	defer func() { _ = testEnv.Stop() }()

	stopKCM, err := startGarbageCollector()
	if err != nil {
		fmt.Fprintln(os.Stderr, "FAIL: starting kube-controller-manager:", err)
		return 1
	}
	defer stopKCM()

	k8sClient, err = client.New(cfg, client.Options{Scheme: testScheme})
	if err != nil {
		fmt.Fprintln(os.Stderr, "FAIL:", err)
		return 1
	}
	managed, err := labels.Parse("!" + unmanagedLabel)
	if err != nil {
		fmt.Fprintln(os.Stderr, "FAIL:", err)
		return 1
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 testScheme,
		Cache:                  cache.Options{DefaultLabelSelector: managed},
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "FAIL:", err)
		return 1
	}
	testMetrics = NewAutoscalerMetrics(testReg)
	if err := (&KVClusterReconciler{Client: mgr.GetClient(), Scheme: mgr.GetScheme(), Recorder: mgr.GetEventRecorder("bellows-operator"),
		DefaultImage: suiteDefaultImage, NetworkPolicies: suiteNetworkPolicies, StoreGauges: held}).SetupWithManager(mgr); err != nil {
		fmt.Fprintln(os.Stderr, "FAIL:", err)
		return 1
	}
	if err := (&CompactionPoolReconciler{Client: mgr.GetClient(), Recorder: mgr.GetEventRecorder("bellows-operator"),
		Source: fed, Clock: clock.RealClock{}, Metrics: testMetrics, DefaultImage: suiteDefaultImage,
		NetworkPolicies: suiteNetworkPolicies}).SetupWithManager(mgr); err != nil {
		fmt.Fprintln(os.Stderr, "FAIL:", err)
		return 1
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	code := m.Run()
	cancel()
	if err := <-done; err != nil {
		fmt.Fprintln(os.Stderr, "manager:", err)
	}
	return code
}

func zapLevel() zapcore.Level {
	if os.Getenv("TEST_VERBOSE") != "" {
		return -1
	}
	return 2 // errors only
}

// startGarbageCollector runs the real kube-controller-manager against the
// envtest API server with only the garbage collector, and returns a
// function that stops exactly that process.
func startGarbageCollector() (func(), error) {
	user, err := testEnv.AddUser(envtest.User{Name: "kube-controller-manager", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return nil, err
	}
	kubeconfig, err := user.KubeConfig()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "bellows-kcm-")
	if err != nil {
		return nil, err
	}
	path := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(path, kubeconfig, 0o600); err != nil {
		return nil, err
	}
	cmd := exec.Command(filepath.Join(assetsDir, "kube-controller-manager"),
		"--kubeconfig="+path,
		"--controllers=garbagecollector",
		"--leader-elect=false",
		"--secure-port=0",
		"--concurrent-gc-syncs=5",
	)
	logf, err := os.Create(filepath.Join(dir, "kcm.log"))
	if err != nil {
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	return func() {
		_ = cmd.Process.Kill()
		<-exited
		_ = logf.Close()
		if os.Getenv("KEEP_KCM_LOG") == "" {
			_ = os.RemoveAll(dir)
		} else {
			fmt.Fprintln(os.Stderr, "kube-controller-manager log:", logf.Name())
		}
	}, nil
}

// newNamespace creates a fresh namespace for one test.
func newNamespace(t *testing.T) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "t-"}}
	if err := k8sClient.Create(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	return ns.Name
}

// eventually bounds every wait for the operator. It only matters when
// something is wrong: a passing wait returns as soon as its condition
// holds. It is generous because `make test` runs this suite next to the
// CPU-heavy storage-engine tests on small CI machines, where the API
// server, etcd, the garbage collector and the manager all compete for CPU.
const (
	eventually = 2 * time.Minute
	poll       = 100 * time.Millisecond
)
