package controllers

import (
	"cmp"
	"context"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	kvapi "github.com/bellows-kv/bellows/api/v1alpha1"
	"github.com/bellows-kv/bellows/autoscaler"
	"github.com/bellows-kv/bellows/controllers/specs"
	"github.com/bellows-kv/bellows/internal/contract"
	"github.com/bellows-kv/bellows/internal/version"
)

// The autoscaler writes spec.replicas through /scale (a get, then an
// update), as an HPA would; the pool itself is never written.
// +kubebuilder:rbac:groups=kv.bellows.dev,resources=compactionpools,verbs=get;list;watch
// +kubebuilder:rbac:groups=kv.bellows.dev,resources=compactionpools/status,verbs=patch
// +kubebuilder:rbac:groups=kv.bellows.dev,resources=compactionpools/scale,verbs=get;update
// +kubebuilder:rbac:groups=apps,resources=deployments,verbs=get;list;watch;create;update

// CompactionPoolReconciler reconciles a CompactionPool into a Deployment, a
// Service, a PodDisruptionBudget, a NetworkPolicy (unless turned off) and a
// ServiceMonitor, and runs the autoscaler.
type CompactionPoolReconciler struct {
	client.Client
	Recorder events.EventRecorder
	// Source reads the pods' metrics (autoscaler.Scraper in production).
	Source autoscaler.Source
	// Clock for the autoscaler's sync period and stabilization windows.
	Clock clock.PassiveClock
	// Metrics, when set, publishes the autoscaler's inputs and outputs.
	Metrics *AutoscalerMetrics
	// DefaultImage runs the workers of a pool without spec.image (operator
	// --default-image). SetupWithManager defaults it to this build's image.
	DefaultImage string
	// NetworkPolicies: whether to make the workers' NetworkPolicy, and
	// whom it admits to their metrics port.
	NetworkPolicies NetworkPolicies

	// APIReader reads around the cache (nil: the manager's).
	APIReader client.Reader

	// credentials are the operator's own, for scraping pods with TLS.
	credentials operatorCredentials
}

func (r *CompactionPoolReconciler) certificates() certificates {
	return certificates{client: r.Client, apiReader: r.APIReader}
}

// poolPass is the state of one reconcile pass.
type poolPass struct {
	// orig is the pool as read; pool is defaulted (and carries spec.replicas
	// as the autoscaler wrote it), and its status is what the pass computes.
	orig, pool *kvapi.CompactionPool
	// deployment is the live Deployment (nil until its step ran).
	deployment *appsv1.Deployment
	// durations are the pool's durations, parsed by the spec step.
	durations kvapi.PoolDurations
	// autoscale is what the autoscaler steps found and did.
	autoscale autoscalePass
}

func (p *poolPass) owner() owner { return p.pool }

// Reconcile runs one pass over the pool.
func (r *CompactionPoolReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	pool := &kvapi.CompactionPool{}
	if err := r.Get(ctx, req.NamespacedName, pool); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !pool.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil
	}
	p := &poolPass{orig: pool.DeepCopy(), pool: pool}
	pool.SetDefaults()
	pool.Spec.Image = cmp.Or(pool.Spec.Image, r.DefaultImage, contract.Image(version.Version))
	return r.runner().run(ctx, p)
}

// runner lists the steps of a pass. The autoscaler's steps never stop the
// pass (see autoscalePass): the Deployment is applied whatever happened to
// the scrape, the pod-deletion-costs or the /scale write. They run before
// the Deployment so that a new size reaches it in the same pass, and the
// pod-deletion-costs are set before a scale-down picks the pods to remove.
func (r *CompactionPoolReconciler) runner() runner[*poolPass] {
	ch := children{client: r.Client, recorder: r.Recorder}
	return runner[*poolPass]{
		recorder: r.Recorder,
		steps: []step[*poolPass]{
			pauseStep[*poolPass]("this pool, its workers and its size"),
			{"spec", checkPoolSpec},
			// Before the Deployment, so workers never wait on a Secret.
			certificatesStep(r.certificates(), ch, func(p *poolPass) kvapi.TLSSpec { return p.pool.Spec.TLS },
				func(p *poolPass) []certificate { return poolCertificates(p.pool) }),
			{"autoscaler: observe", r.observe},
			{"autoscaler: pod-deletion-cost", r.setDeletionCosts},
			{"autoscaler: recommend and scale", r.recommend},
			{"replica bounds", r.enforceBounds},
			// Before the Deployment, so no worker runs without it.
			networkPolicyStep(ch, r.NetworkPolicies, func(p *poolPass, peers specs.NetworkPolicyPeers) *networkingv1.NetworkPolicy {
				return specs.BuildPoolNetworkPolicy(p.pool, peers)
			}),
			{"Deployment", func(ctx context.Context, p *poolPass) Result {
				d, err := ensure(ctx, ch, p.pool, specs.BuildPoolDeployment(p.pool), updateDeployment)
				if err != nil {
					return Fail(err)
				}
				p.deployment = d
				return Continue()
			}},
			childStep("Service", ch, func(p *poolPass) *corev1.Service { return specs.BuildPoolService(p.pool) }, updateService),
			childStep("PodDisruptionBudget", ch, func(p *poolPass) *policyv1.PodDisruptionBudget { return specs.BuildPoolPDB(p.pool) }, updatePDB),
			serviceMonitorStep(ch, func(p *poolPass) *unstructured.Unstructured { return specs.BuildPoolServiceMonitor(p.pool) }),
		},
		status: r.computeStatus,
		patchStatus: func(ctx context.Context, p *poolPass) error {
			return patchStatus(ctx, r.Client, p.orig, p.pool, func(o *kvapi.CompactionPool) *kvapi.CompactionPoolStatus { return &o.Status })
		},
	}
}

// checkPoolSpec parses what the API server stores as plain strings. The CRD
// rejects every value that fails here; one stored before those rules existed
// stops this pool's pass with InvalidSpec, and only this pool's.
func checkPoolSpec(_ context.Context, p *poolPass) Result {
	d, err := p.pool.Spec.Durations()
	if err != nil {
		return Invalid(err)
	}
	p.durations = d
	return Continue()
}

func (r *CompactionPoolReconciler) computeStatus(p *poolPass, outcome Result) {
	pool := p.pool
	st := &pool.Status
	gen := pool.Generation
	// The selector first, whatever the pass did (paused, failed): an HPA
	// on /scale needs it, and it depends on nothing but the pool's name.
	st.Selector = specs.PoolSelector(pool)
	if pausedStatus(&st.Conditions, &st.ObservedGeneration, gen, outcome) {
		return
	}
	st.ObservedGeneration = gen
	autoscalerStatus(pool, &p.autoscale)
	want := pool.DesiredReplicasOrDefault()
	if d := p.deployment; d != nil {
		st.Replicas = d.Status.Replicas
		st.ReadyReplicas = d.Status.ReadyReplicas
	}
	if r.Metrics != nil {
		r.Metrics.Replicas.WithLabelValues(pool.Namespace + "/" + pool.Name).Set(float64(st.Replicas))
	}
	if err := outcome.Err(); err != nil {
		setCondition(&st.Conditions, gen, kvapi.ConditionDegraded, true, outcome.FailReason(), err.Error())
	} else {
		setCondition(&st.Conditions, gen, kvapi.ConditionDegraded, false, kvapi.ReasonAsExpected, "")
	}
	d := p.deployment
	done := d != nil && d.Status.ObservedGeneration >= d.Generation && d.Status.UpdatedReplicas == want &&
		d.Status.Replicas == want && d.Status.ReadyReplicas == want
	switch {
	case outcome.IsInvalid():
		setCondition(&st.Conditions, gen, kvapi.ConditionProgressing, false, kvapi.ReasonInvalidSpec,
			"the operator leaves the workers as they are until the spec is fixed (see Degraded)")
	case d == nil:
		setCondition(&st.Conditions, gen, kvapi.ConditionProgressing, true, kvapi.ReasonCreating, "creating the workers")
	case !done:
		setCondition(&st.Conditions, gen, kvapi.ConditionProgressing, true, kvapi.ReasonScaling,
			fmt.Sprintf("%d of %d workers Ready", d.Status.ReadyReplicas, want))
	default:
		setCondition(&st.Conditions, gen, kvapi.ConditionProgressing, false, kvapi.ReasonReconciled, "every worker runs the current spec")
	}
	if done {
		setCondition(&st.Conditions, gen, kvapi.ConditionReady, true, kvapi.ReasonReconciled, fmt.Sprintf("%d workers Ready", want))
	} else {
		setCondition(&st.Conditions, gen, kvapi.ConditionReady, false, kvapi.ReasonPodsNotReady,
			fmt.Sprintf("%d of %d workers Ready", st.ReadyReplicas, want))
	}
}

// SetupWithManager watches pools, their children, and the KVClusters that
// reference them (R comes from their status).
func (r *CompactionPoolReconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Clock == nil {
		r.Clock = clock.RealClock{}
	}
	if r.APIReader == nil {
		r.APIReader = mgr.GetAPIReader()
	}
	if r.DefaultImage == "" {
		r.DefaultImage = contract.Image(version.Version)
	}
	return ctrl.NewControllerManagedBy(mgr).
		For(&kvapi.CompactionPool{}).
		Owns(&appsv1.Deployment{}).
		Owns(&corev1.Service{}).
		Owns(&policyv1.PodDisruptionBudget{}).
		Owns(&networkingv1.NetworkPolicy{}).
		Owns(&corev1.Secret{}).
		Watches(&kvapi.KVCluster{}, handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
			c, ok := o.(*kvapi.KVCluster)
			if !ok || c.Spec.CompactionPoolRef == nil {
				return nil
			}
			return []reconcile.Request{{NamespacedName: client.ObjectKey{Namespace: c.Namespace, Name: c.Spec.CompactionPoolRef.Name}}}
		})).
		Named("compactionpool").
		Complete(r)
}
