// Package operator is the composition root of `bellows operator`: the
// controller-runtime manager that runs the KVCluster and CompactionPool
// reconcilers and the autoscaler. The CLI only binds flags to Config.
package operator

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	kvapi "github.com/bellows-kv/bellows/api/v1alpha1"
	"github.com/bellows-kv/bellows/autoscaler"
	"github.com/bellows-kv/bellows/controllers"
	"github.com/bellows-kv/bellows/internal/contract"
	"github.com/bellows-kv/bellows/internal/version"
)

// The operator serves controller-runtime's global registry, so
// bellows_build_info joins it once per process, here rather than in Run.
func init() { metrics.Registry.MustRegister(version.NewBuildInfo()) }

// Config is everything the operator runs with.
type Config struct {
	MetricsAddr string
	ProbeAddr   string
	// LeaderElect elects one active replica through the Lease
	// contract.LeaderElectionID in LeaderElectionNS (the pod's namespace
	// when empty).
	LeaderElect      bool
	LeaderElectionNS string
	// ScrapeTimeout bounds one scrape of a pod's /metrics.
	ScrapeTimeout time.Duration
	// DefaultImage runs the pods of a KVCluster or CompactionPool that
	// names no image. The chart passes the operator's own image.
	DefaultImage string
	// NetworkPolicies makes a NetworkPolicy for each KVCluster's storage
	// pods and each CompactionPool's workers; off, the operator deletes
	// those it made.
	NetworkPolicies bool
	// MonitoringNamespaces are the namespaces whose pods (Prometheus) the
	// NetworkPolicies let reach the metrics ports; none: only the operator.
	MonitoringNamespaces []string
	// Namespace is the operator's own, where its pods (which scrape the
	// metrics ports) run: OwnNamespace. Empty: the NetworkPolicies admit
	// the operator's pods in any namespace.
	Namespace string
	// Development logs for humans.
	Development bool
	// Kube is the API server to run against; nil loads it the usual way
	// (--kubeconfig, $KUBECONFIG, in-cluster).
	Kube *rest.Config
}

// Default is the operator's configuration before flags.
func Default() Config {
	return Config{
		MetricsAddr:          fmt.Sprintf(":%d", contract.OperatorMetricsPort),
		ProbeAddr:            "0",
		LeaderElect:          true,
		ScrapeTimeout:        contract.DefaultScrapeTimeout,
		DefaultImage:         contract.Image(version.Version),
		NetworkPolicies:      contract.DefaultNetworkPolicies,
		MonitoringNamespaces: []string{contract.DefaultMonitoringNamespace},
	}
}

// serviceAccountNamespace is where Kubernetes writes a pod's namespace.
const serviceAccountNamespace = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

// OwnNamespace is the namespace the operator runs in: $POD_NAMESPACE (the
// chart sets it from the downward API), else the one its ServiceAccount's
// token was mounted with, else "" (not in a pod).
func OwnNamespace() string {
	if ns := os.Getenv(contract.PodNamespaceEnv); ns != "" {
		return ns
	}
	if data, err := os.ReadFile(serviceAccountNamespace); err == nil {
		return strings.TrimSpace(string(data))
	}
	return ""
}

// Validate reports every problem, each naming its flag.
func (c Config) Validate() error {
	var errs []error
	if c.ScrapeTimeout <= 0 {
		errs = append(errs, fmt.Errorf("--scrape-timeout: %v must be positive", c.ScrapeTimeout))
	}
	if c.DefaultImage == "" || strings.ContainsAny(c.DefaultImage, " \t\n") {
		errs = append(errs, fmt.Errorf("--default-image: %q is not an image reference such as %s", c.DefaultImage, contract.Image("v1.2.3")))
	}
	for _, ns := range c.MonitoringNamespaces {
		if msgs := validation.IsDNS1123Label(ns); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("--monitoring-namespace: %q is not a namespace name: %s", ns, strings.Join(msgs, "; ")))
		}
	}
	if msgs := validation.IsDNS1123Label(c.Namespace); c.Namespace != "" && len(msgs) > 0 {
		errs = append(errs, fmt.Errorf("$%s: %q is not a namespace name: %s", contract.PodNamespaceEnv, c.Namespace, strings.Join(msgs, "; ")))
	}
	return errors.Join(errs...)
}

// probeChecks are the checks of /healthz and /readyz: served on the
// metrics port (probeHandlers) and, with --health-probe-bind-address, by
// the manager's plaintext probe server (addProbeChecks).
var probeChecks = map[string]healthz.Checker{"ping": healthz.Ping}

// probeHandlers serve /healthz and /readyz on the metrics port. A
// healthz.Handler reads the path below its own (a check's name; none: all
// of them), as the manager's probe server mounts it.
func probeHandlers() map[string]http.Handler {
	h := map[string]http.Handler{}
	for _, path := range []string{contract.PathHealthz, contract.PathReadyz} {
		h[path] = http.StripPrefix(path, &healthz.Handler{Checks: probeChecks})
	}
	return h
}

// addProbeChecks registers probeChecks with the manager. Its probe server
// (--health-probe-bind-address) serves only the checks registered: without
// them it answers 404 on /healthz and /readyz.
func addProbeChecks(mgr manager.Manager) error {
	for name, check := range probeChecks {
		if err := mgr.AddHealthzCheck(name, check); err != nil {
			return fmt.Errorf("health check %s: %w", name, err)
		}
		if err := mgr.AddReadyzCheck(name, check); err != nil {
			return fmt.Errorf("readiness check %s: %w", name, err)
		}
	}
	return nil
}

// Run starts the manager and blocks until ctx is done.
func Run(ctx context.Context, o Config) error {
	ctrl.SetLogger(zap.New(zap.UseDevMode(o.Development)))
	mgr, scheme, err := newManager(o)
	if err != nil {
		return err
	}
	recorder := mgr.GetEventRecorder("bellows-operator")
	policies := controllers.NetworkPolicies{Enabled: o.NetworkPolicies, OperatorNamespace: o.Namespace, MonitoringNamespaces: o.MonitoringNamespaces}
	logNetworkPolicies(policies)
	if err := (&controllers.KVClusterReconciler{Client: mgr.GetClient(), Scheme: scheme, Recorder: recorder, DefaultImage: o.DefaultImage,
		NetworkPolicies: policies}).SetupWithManager(mgr); err != nil {
		return err
	}
	if err := (&controllers.BackupReconciler{Client: mgr.GetClient(), Recorder: recorder}).SetupWithManager(mgr); err != nil {
		return err
	}
	if err := (&controllers.ScheduledBackupReconciler{Client: mgr.GetClient(), Recorder: recorder,
		Metrics: controllers.NewScheduleMetrics(metrics.Registry)}).SetupWithManager(mgr); err != nil {
		return err
	}
	if err := (&controllers.CompactionPoolReconciler{
		Client:          mgr.GetClient(),
		Recorder:        recorder,
		Source:          &autoscaler.Scraper{Client: &http.Client{Timeout: o.ScrapeTimeout}},
		Clock:           clock.RealClock{},
		Metrics:         controllers.NewAutoscalerMetrics(metrics.Registry),
		DefaultImage:    o.DefaultImage,
		NetworkPolicies: policies,
	}).SetupWithManager(mgr); err != nil {
		return err
	}
	return mgr.Start(ctx)
}

// newManager is the operator's manager, its metrics and probe servers set
// up, before any controller joins it.
func newManager(o Config) (manager.Manager, *runtime.Scheme, error) {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return nil, nil, err
	}
	if err := kvapi.AddToScheme(scheme); err != nil {
		return nil, nil, err
	}
	cfg := o.Kube
	if cfg == nil {
		var err error
		if cfg, err = ctrl.GetConfig(); err != nil {
			return nil, nil, fmt.Errorf("kubeconfig: %w", err)
		}
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme: scheme,
		// The operator reads only the Secrets it made (certificates): it
		// neither caches nor watches the others of the cluster.
		Cache: cache.Options{ByObject: map[client.Object]cache.ByObject{
			&corev1.Secret{}: {Label: labels.SelectorFromSet(labels.Set{contract.LabelManagedBy: contract.ManagedBy})},
		}},
		// Metrics over TLS, with a self-signed certificate (the operator's
		// namespace has no CA of ours; the ServiceMonitor does not verify
		// it, the chart's NetworkPolicy admits the monitoring namespaces
		// only), and the probes on the same port: the operator has no
		// plaintext port (docs/security.md) unless --health-probe-bind-address
		// asks for one.
		Metrics:                 metricsserver.Options{BindAddress: o.MetricsAddr, SecureServing: true, ExtraHandlers: probeHandlers()},
		HealthProbeBindAddress:  o.ProbeAddr,
		LeaderElection:          o.LeaderElect,
		LeaderElectionID:        contract.LeaderElectionID,
		LeaderElectionNamespace: o.LeaderElectionNS,
		// A leader that stops hands the Lease over at once instead of
		// letting it expire (15 s): the standby takes over within its retry
		// period. Safe because the process exits when Run returns.
		LeaderElectionReleaseOnCancel: true,
	})
	if err != nil {
		return nil, nil, fmt.Errorf("manager: %w", err)
	}
	if err := addProbeChecks(mgr); err != nil {
		return nil, nil, err
	}
	return mgr, scheme, nil
}

// logNetworkPolicies says at start what the NetworkPolicies admit: above
// all, that the operator did not find its namespace.
func logNetworkPolicies(n controllers.NetworkPolicies) {
	l := ctrl.Log.WithName("network-policies")
	switch {
	case !n.Enabled:
		l.Info("off: the operator makes no NetworkPolicies and deletes those it made")
	case n.OperatorNamespace == "":
		l.Info("the operator's namespace is not known ($"+contract.PodNamespaceEnv+" is not set, and this is not a pod): "+
			"the metrics ports admit the operator's pods in any namespace", "monitoringNamespaces", n.MonitoringNamespaces)
	default:
		l.Info("the metrics ports admit the operator's pods and the monitoring namespaces",
			"operatorNamespace", n.OperatorNamespace, "monitoringNamespaces", n.MonitoringNamespaces)
	}
}
