// Package kubectl is the Kubernetes side of the kubectl plugin (`kubectl
// bellows`, wired in cmd/bellows/cli): finding a KVCluster and its
// CompactionPool, their pods and events, reaching a store's gRPC port
// through the API server (a port-forward, as `kubectl port-forward` does,
// so no network route to the pods is needed), and the support report.
package kubectl

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kvapi "github.com/bellows-kv/bellows/api/v1alpha1"
	"github.com/bellows-kv/bellows/controllers/specs"
)

// Kube is a connection to the cluster the kubeconfig flags name.
type Kube struct {
	// Client reads the Bellows resources and the core ones; Core serves
	// what it cannot (logs, port-forwards).
	Client    client.Client
	Core      kubernetes.Interface
	Config    *rest.Config
	Namespace string
}

// Scheme knows the core types and Bellows'.
func Scheme() *runtime.Scheme {
	s := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(s)
	_ = kvapi.AddToScheme(s)
	return s
}

// NoClusterError: no kubeconfig names a cluster, no --server is given and
// this is not a pod: kubectl's loader would fall back to localhost:8080.
type NoClusterError struct {
	// Searched are the kubeconfig files looked at.
	Searched []string
}

func (e *NoClusterError) Error() string {
	where := "no kubeconfig"
	if len(e.Searched) > 0 {
		where = "no kubeconfig names a cluster (looked at " + strings.Join(e.Searched, ", ") + ")"
	}
	return "no Kubernetes cluster found: " + where + ", no --server given, and not running in a pod"
}

// Connect reads the kubeconfig as kubectl does (flags, $KUBECONFIG,
// ~/.kube/config, in a pod its service account; the namespace from
// --namespace or the context). With none of them it fails (NoClusterError)
// instead of trying localhost:8080, as client-go's default would.
func Connect(flags *genericclioptions.ConfigFlags) (*Kube, error) {
	if err := clusterConfigured(flags); err != nil {
		return nil, err
	}
	cfg, err := flags.ToRESTConfig()
	if err != nil {
		return nil, fmt.Errorf("kubeconfig: %w", err)
	}
	ns, _, err := flags.ToRawKubeConfigLoader().Namespace()
	if err != nil {
		return nil, fmt.Errorf("kubeconfig: the namespace: %w", err)
	}
	return NewKube(cfg, ns)
}

// clusterConfigured is a NoClusterError when nothing names a cluster.
func clusterConfigured(flags *genericclioptions.ConfigFlags) error {
	if flags.APIServer != nil && *flags.APIServer != "" {
		return nil
	}
	if os.Getenv("KUBERNETES_SERVICE_HOST") != "" && os.Getenv("KUBERNETES_SERVICE_PORT") != "" {
		return nil // in a pod: its service account's config
	}
	loader := flags.ToRawKubeConfigLoader()
	raw, err := loader.RawConfig()
	if err != nil {
		return nil // a kubeconfig that does not load: ToRESTConfig says why
	}
	if len(raw.Clusters) > 0 {
		return nil
	}
	var searched []string
	if access := loader.ConfigAccess(); access != nil {
		if f := access.GetExplicitFile(); f != "" {
			searched = []string{f}
		} else {
			searched = access.GetLoadingPrecedence()
		}
	}
	return &NoClusterError{Searched: searched}
}

// NewKube connects with cfg, working in namespace ns.
func NewKube(cfg *rest.Config, ns string) (*Kube, error) {
	c, err := client.New(cfg, client.Options{Scheme: Scheme()})
	if err != nil {
		return nil, err
	}
	core, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	return &Kube{Client: c, Core: core, Config: cfg, Namespace: ns}, nil
}

// NotFoundError: no KVCluster of that name (or none given and not exactly
// one) in the namespace; Existing lists those there are.
type NotFoundError struct {
	Name, Namespace string
	Existing        []string
}

func (e *NotFoundError) Error() string {
	there := "there is none"
	if len(e.Existing) > 0 {
		there = "there are: " + strings.Join(e.Existing, ", ")
	}
	if e.Name == "" {
		return fmt.Sprintf("name a KVCluster: namespace %q has %d (%s); give -n NAMESPACE for another namespace", e.Namespace, len(e.Existing), there)
	}
	return fmt.Sprintf("no KVCluster %q in namespace %q (%s); give -n NAMESPACE for another namespace", e.Name, e.Namespace, there)
}

// Cluster is the KVCluster name in the namespace; with name empty, the only
// one there.
func (k *Kube) Cluster(ctx context.Context, name string) (*kvapi.KVCluster, error) {
	if name != "" {
		var c kvapi.KVCluster
		err := k.Client.Get(ctx, client.ObjectKey{Namespace: k.Namespace, Name: name}, &c)
		if err == nil {
			return &c, nil
		}
		if !apierrors.IsNotFound(err) {
			return nil, explainAPI(err, "KVCluster "+name)
		}
	}
	var list kvapi.KVClusterList
	if err := k.Client.List(ctx, &list, client.InNamespace(k.Namespace)); err != nil {
		return nil, explainAPI(err, "KVClusters")
	}
	if name == "" && len(list.Items) == 1 {
		return &list.Items[0], nil
	}
	nf := &NotFoundError{Name: name, Namespace: k.Namespace}
	for _, c := range list.Items {
		nf.Existing = append(nf.Existing, c.Name)
	}
	slices.Sort(nf.Existing)
	return nil, nf
}

// Pool is the cluster's CompactionPool: nil without a compactionPoolRef,
// or when the pool it names does not exist (missing names it then).
func (k *Kube) Pool(ctx context.Context, c *kvapi.KVCluster) (pool *kvapi.CompactionPool, missing string, err error) {
	if c.Spec.CompactionPoolRef == nil {
		return nil, "", nil
	}
	var p kvapi.CompactionPool
	err = k.Client.Get(ctx, client.ObjectKey{Namespace: c.Namespace, Name: c.Spec.CompactionPoolRef.Name}, &p)
	switch {
	case apierrors.IsNotFound(err):
		return nil, c.Spec.CompactionPoolRef.Name, nil
	case err != nil:
		return nil, "", explainAPI(err, "CompactionPool "+c.Spec.CompactionPoolRef.Name)
	}
	return &p, "", nil
}

// StorePods are the cluster's storage pods, by name.
func (k *Kube) StorePods(ctx context.Context, c *kvapi.KVCluster) ([]corev1.Pod, error) {
	return k.pods(ctx, c.Namespace, specs.StoreSelectorLabels(c))
}

// WorkerPods are the pool's workers, by name.
func (k *Kube) WorkerPods(ctx context.Context, p *kvapi.CompactionPool) ([]corev1.Pod, error) {
	return k.pods(ctx, p.Namespace, specs.PoolSelectorLabels(p))
}

func (k *Kube) pods(ctx context.Context, ns string, labels map[string]string) ([]corev1.Pod, error) {
	var list corev1.PodList
	if err := k.Client.List(ctx, &list, client.InNamespace(ns), client.MatchingLabels(labels)); err != nil {
		return nil, explainAPI(err, "pods")
	}
	slices.SortFunc(list.Items, func(a, b corev1.Pod) int { return strings.Compare(a.Name, b.Name) })
	return list.Items, nil
}

// PodReady reports the pod's Ready condition.
func PodReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// explainAPI says what a refused or failed API call was for, and what a
// missing CRD or permission means here.
func explainAPI(err error, what string) error {
	switch {
	case apierrors.IsForbidden(err):
		return fmt.Errorf("reading %s: %w (your kubeconfig's user may not; ask for read access to kv.bellows.dev resources, pods and events)", what, err)
	case meta.IsNoMatchError(err):
		return fmt.Errorf("reading %s: %w (are the Bellows CRDs installed? helm install the chart, or kubectl apply -k config/crd)", what, err)
	}
	return fmt.Errorf("reading %s: %w", what, err)
}
