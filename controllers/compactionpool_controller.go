package controllers

import (
	"context"
	"errors"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	kvapi "github.com/bellows-kv/bellows/api/v1alpha1"
	"github.com/bellows-kv/bellows/autoscaler"
	"github.com/bellows-kv/bellows/controllers/specs"
)

// +kubebuilder:rbac:groups=kv.bellows.dev,resources=compactionpools,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=kv.bellows.dev,resources=compactionpools/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=kv.bellows.dev,resources=compactionpools/scale,verbs=get;update;patch
// +kubebuilder:rbac:groups=apps,resources=deployments,verbs=get;list;watch;create;update;patch;delete

// CompactionPoolReconciler reconciles a CompactionPool into a Deployment, a
// Service, a PodDisruptionBudget and a ServiceMonitor, and runs the
// autoscaler.
type CompactionPoolReconciler struct {
	client.Client
	Recorder events.EventRecorder
	// Source reads the pods' metrics (autoscaler.Scraper in production).
	Source autoscaler.Source
	// Clock for the autoscaler's sync period and stabilization windows.
	Clock clock.PassiveClock
	// Metrics, when set, publishes the autoscaler's inputs and outputs.
	Metrics *AutoscalerMetrics
}

// poolPass is the state of one reconcile pass.
type poolPass struct {
	pool       *kvapi.CompactionPool
	deployment *appsv1.Deployment
	// requeue is when the autoscaler is due next.
	requeue time.Duration
}

// Reconcile runs the guarded steps and writes status once.
func (r *CompactionPoolReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	pool := &kvapi.CompactionPool{}
	if err := r.Get(ctx, req.NamespacedName, pool); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !pool.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil
	}
	orig := pool.DeepCopy()
	pool.SetDefaults()
	p := &poolPass{pool: pool}

	if kvapi.IsPaused(pool.Annotations) {
		setCondition(&pool.Status.Conditions, pool.Generation, kvapi.ConditionProgressing, false, kvapi.ReasonPaused,
			"the "+kvapi.PausedAnnotation+" annotation is set: the operator leaves this pool, its workers and its size alone")
		pool.Status.ObservedGeneration = pool.Generation
		return ctrl.Result{}, r.writeStatus(ctx, orig, pool)
	}

	stepErr := runSteps(ctx, p, []step[*poolPass]{
		{"autoscaler", r.autoscale},
		{"Deployment", r.reconcileDeployment},
		{"Service", r.reconcileService},
		{"PodDisruptionBudget", r.reconcilePDB},
		{"ServiceMonitor", r.reconcileServiceMonitor},
	})
	r.computeStatus(p, stepErr)
	if err := r.writeStatus(ctx, orig, pool); err != nil {
		return ctrl.Result{}, errors.Join(stepErr, err)
	}
	if stepErr != nil {
		r.Recorder.Eventf(pool, nil, corev1.EventTypeWarning, kvapi.ReasonReconcileError, "Reconcile", "%v", stepErr)
		return ctrl.Result{}, stepErr
	}
	return ctrl.Result{RequeueAfter: p.requeue}, nil
}

func (r *CompactionPoolReconciler) event(p *kvapi.CompactionPool, res applyResult, kind, name string) {
	if res == applyNone {
		return
	}
	r.Recorder.Eventf(p, nil, corev1.EventTypeNormal, string(res), string(res), "%s %s %s", string(res), kind, name)
}

func (r *CompactionPoolReconciler) reconcileDeployment(ctx context.Context, p *poolPass) error {
	desired := specs.BuildPoolDeployment(p.pool)
	d := &appsv1.Deployment{}
	res, err := apply(ctx, r.Client, desired, d, func() { d.Spec = desired.Spec })
	if err != nil {
		return err
	}
	r.event(p.pool, res, "Deployment", desired.Name)
	if res == applyCreated {
		p.deployment = desired
	} else {
		p.deployment = d
	}
	return nil
}

func (r *CompactionPoolReconciler) reconcileService(ctx context.Context, p *poolPass) error {
	desired := specs.BuildPoolService(p.pool)
	svc := &corev1.Service{}
	res, err := apply(ctx, r.Client, desired, svc, func() { updateService(svc, desired) })
	r.event(p.pool, res, "Service", desired.Name)
	return err
}

func (r *CompactionPoolReconciler) reconcilePDB(ctx context.Context, p *poolPass) error {
	desired := specs.BuildPoolPDB(p.pool)
	pdb := &policyv1.PodDisruptionBudget{}
	res, err := apply(ctx, r.Client, desired, pdb, func() { pdb.Spec = desired.Spec })
	r.event(p.pool, res, "PodDisruptionBudget", desired.Name)
	return err
}

func (r *CompactionPoolReconciler) reconcileServiceMonitor(ctx context.Context, p *poolPass) error {
	sm := specs.BuildPoolServiceMonitor(p.pool)
	_, res, err := applyServiceMonitor(ctx, r.Client, sm)
	r.event(p.pool, res, "ServiceMonitor", sm.GetName())
	return err
}

func (r *CompactionPoolReconciler) computeStatus(p *poolPass, stepErr error) {
	pool := p.pool
	st := &pool.Status
	gen := pool.Generation
	st.ObservedGeneration = gen
	st.Selector = specs.PoolSelector(pool)
	want := pool.DesiredReplicasOrDefault()
	if d := p.deployment; d != nil {
		st.Replicas = d.Status.Replicas
		st.ReadyReplicas = d.Status.ReadyReplicas
	}
	if r.Metrics != nil {
		r.Metrics.Replicas.WithLabelValues(pool.Namespace + "/" + pool.Name).Set(float64(st.Replicas))
	}
	if stepErr != nil {
		setCondition(&st.Conditions, gen, kvapi.ConditionDegraded, true, kvapi.ReasonReconcileError, stepErr.Error())
	} else {
		setCondition(&st.Conditions, gen, kvapi.ConditionDegraded, false, kvapi.ReasonAsExpected, "")
	}
	d := p.deployment
	done := d != nil && d.Status.ObservedGeneration >= d.Generation && d.Status.UpdatedReplicas == want &&
		d.Status.Replicas == want && d.Status.ReadyReplicas == want
	switch {
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

func (r *CompactionPoolReconciler) writeStatus(ctx context.Context, orig, pool *kvapi.CompactionPool) error {
	if equalJSON(orig.Status, pool.Status) {
		return nil
	}
	patched := orig.DeepCopy()
	patched.Status = pool.Status
	return client.IgnoreNotFound(r.Status().Patch(ctx, patched, client.MergeFrom(orig)))
}

// SetupWithManager watches pools, their children, and the KVClusters that
// reference them (R comes from their status).
func (r *CompactionPoolReconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Clock == nil {
		r.Clock = clock.RealClock{}
	}
	return ctrl.NewControllerManagedBy(mgr).
		For(&kvapi.CompactionPool{}).
		Owns(&appsv1.Deployment{}).
		Owns(&corev1.Service{}).
		Owns(&policyv1.PodDisruptionBudget{}).
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
