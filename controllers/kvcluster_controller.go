package controllers

import (
	"context"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	kvapi "github.com/bellows-kv/bellows/api/v1alpha1"
	"github.com/bellows-kv/bellows/controllers/specs"
)

// +kubebuilder:rbac:groups=kv.bellows.dev,resources=kvclusters,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=kv.bellows.dev,resources=kvclusters/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=apps,resources=statefulsets,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups="",resources=services;configmaps,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=policy,resources=poddisruptionbudgets,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=monitoring.coreos.com,resources=servicemonitors,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups="",resources=serviceaccounts,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=rbac.authorization.k8s.io,resources=roles;rolebindings,verbs=get;list;watch;create;update;patch;delete
// The storage pods' Role grants this; Kubernetes only lets the operator
// grant what it holds itself (no escalate/bind verbs are asked for).
// +kubebuilder:rbac:groups=discovery.k8s.io,resources=endpointslices,verbs=get;list;watch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch

// KVClusterReconciler reconciles a KVCluster into a StatefulSet, two
// Services, a PodDisruptionBudget, the engine ConfigMap, the storage pods'
// identity (ServiceAccount, Role and RoleBinding `<name>-store`) and (when
// the Prometheus operator is installed) a ServiceMonitor.
type KVClusterReconciler struct {
	client.Client
	Scheme   *runtime.Scheme
	Recorder events.EventRecorder
	// APIReader reads around the informer cache. The rollout gate uses it:
	// a cached StatefulSet can lag behind the operator's own last write and
	// look rolled out when it is not. SetupWithManager defaults it to the
	// manager's API reader.
	APIReader client.Reader
}

// rolloutRecheck is how often a pass held back by the rollout gate looks
// again. The StatefulSet's status changes normally trigger the next pass
// through the watch; this bounds the wait if an event is missed.
const rolloutRecheck = 10 * time.Second

// kvPass is the state of one reconcile pass: the steps fill it, and the
// status is computed from it once at the end.
type kvPass struct {
	// orig is the cluster as read; cluster is defaulted, and its status is
	// what the pass computes.
	orig, cluster *kvapi.KVCluster
	// sts is the live StatefulSet (nil until the step that writes it ran).
	sts       *appsv1.StatefulSet
	poolFound bool
}

func (p *kvPass) owner() owner { return p.cluster }

// Reconcile runs one pass over the cluster.
func (r *KVClusterReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	cluster := &kvapi.KVCluster{}
	if err := r.Get(ctx, req.NamespacedName, cluster); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !cluster.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil // children go with the owner (garbage collection)
	}
	p := &kvPass{orig: cluster.DeepCopy(), cluster: cluster}
	cluster.SetDefaults()
	return r.runner().run(ctx, p)
}

// runner lists the steps of a pass. The StatefulSet comes last: its rollout
// gate may stop the pass (Wait), and every other child, and the pool check,
// must still be reconciled while a rollout is under way.
func (r *KVClusterReconciler) runner() runner[*kvPass] {
	ch := children{client: r.Client, recorder: r.Recorder}
	return runner[*kvPass]{
		recorder: r.Recorder,
		steps: []step[*kvPass]{
			pauseStep[*kvPass]("this cluster and its children"),
			// The storage pods' identity comes before the StatefulSet, so pods
			// never start under a ServiceAccount that does not exist yet.
			childStep("ServiceAccount", ch, func(p *kvPass) *corev1.ServiceAccount { return specs.BuildStoreServiceAccount(p.cluster) }, updateNothing),
			childStep("Role", ch, func(p *kvPass) *rbacv1.Role { return specs.BuildStoreRole(p.cluster) }, updateRole),
			childStep("RoleBinding", ch, func(p *kvPass) *rbacv1.RoleBinding { return specs.BuildStoreRoleBinding(p.cluster) }, updateRoleBinding),
			childStep("headless Service", ch, func(p *kvPass) *corev1.Service { return specs.BuildStoreHeadlessService(p.cluster) }, updateService),
			childStep("client Service", ch, func(p *kvPass) *corev1.Service { return specs.BuildStoreClientService(p.cluster) }, updateService),
			childStep("PodDisruptionBudget", ch, func(p *kvPass) *policyv1.PodDisruptionBudget { return specs.BuildStorePDB(p.cluster) }, updatePDB),
			serviceMonitorStep(ch, func(p *kvPass) *unstructured.Unstructured { return specs.BuildStoreServiceMonitor(p.cluster) }),
			{"CompactionPool reference", r.checkPool},
			{"engine ConfigMap and StatefulSet", func(ctx context.Context, p *kvPass) Result { return r.reconcileStatefulSet(ctx, ch, p) }},
		},
		status: computeKVStatus,
		patchStatus: func(ctx context.Context, p *kvPass) error {
			return patchStatus(ctx, r.Client, p.orig, p.cluster, func(c *kvapi.KVCluster) *kvapi.KVClusterStatus { return &c.Status })
		},
	}
}

// rolloutComplete is true when the StatefulSet controller has acted on the
// latest spec and every pod runs it and is Ready.
func rolloutComplete(sts *appsv1.StatefulSet) bool {
	want := int32(1)
	if sts.Spec.Replicas != nil {
		want = *sts.Spec.Replicas
	}
	st := sts.Status
	return st.ObservedGeneration >= sts.Generation &&
		st.UpdatedReplicas == want && st.ReadyReplicas == want && st.Replicas == want &&
		(st.UpdateRevision == "" || st.CurrentRevision == st.UpdateRevision)
}

// reconcileStatefulSet writes the engine ConfigMap and the StatefulSet, one
// change at a time: while the StatefulSet rolls out a change, the next one
// (ConfigMap included) waits.
func (r *KVClusterReconciler) reconcileStatefulSet(ctx context.Context, ch children, p *kvPass) Result {
	c := p.cluster
	cm, err := specs.BuildStoreConfigMap(c)
	if err != nil {
		return Fail(err)
	}
	desired := specs.BuildStoreStatefulSet(c, cm)

	// The gate decides on the live StatefulSet, not the cached one: right
	// after the operator applied a change, the cache may still hold the
	// previous, rolled-out generation, and the next change (ConfigMap first)
	// would slip through before the StatefulSet update fails on a conflict.
	existing := &appsv1.StatefulSet{}
	err = r.APIReader.Get(ctx, client.ObjectKeyFromObject(desired), existing)
	if err != nil && !apierrors.IsNotFound(err) {
		return Fail(err)
	}
	if err == nil && specs.SpecHash(existing) != specs.SpecHash(desired) && !rolloutComplete(existing) {
		// One change at a time: the pods roll one by one (OrderedReady), and
		// the next change waits until the current rollout is done.
		p.sts = existing
		log.FromContext(ctx).Info("holding back a StatefulSet change until the rollout completes")
		return Wait(kvapi.ReasonWaitingForRollout, "a spec change waits until the current rollout of the StatefulSet completes", rolloutRecheck)
	}

	if _, err := ensure(ctx, ch, c, cm, updateConfigMap); err != nil {
		return Fail(err)
	}
	sts, err := ensure(ctx, ch, c, desired, updateStatefulSet)
	if err != nil {
		return Fail(err)
	}
	p.sts = sts
	return Continue()
}

// checkPool looks up the referenced CompactionPool. A missing pool does not
// stop the pass (the stores fall back as engine.offload says); the status
// reports it as Degraded.
func (r *KVClusterReconciler) checkPool(ctx context.Context, p *kvPass) Result {
	ref := p.cluster.Spec.CompactionPoolRef
	if ref == nil {
		p.poolFound = true
		return Continue()
	}
	err := r.Get(ctx, client.ObjectKey{Namespace: p.cluster.Namespace, Name: ref.Name}, &kvapi.CompactionPool{})
	if apierrors.IsNotFound(err) {
		return Continue()
	}
	p.poolFound = err == nil
	return FailIf(err)
}

// computeKVStatus derives status and conditions from the children and the
// outcome of the pass.
func computeKVStatus(p *kvPass, outcome Result) {
	c := p.cluster
	st := &c.Status
	gen := c.Generation
	if pausedStatus(&st.Conditions, &st.ObservedGeneration, gen, outcome) {
		return
	}
	st.ObservedGeneration = gen
	st.Regions = c.Spec.Regions.RegionCount()
	st.RegionAssignment = specs.RegionAssignments(c)
	if p.sts != nil {
		st.Replicas = p.sts.Status.Replicas
		st.ReadyReplicas = p.sts.Status.ReadyReplicas
		st.UpdatedReplicas = p.sts.Status.UpdatedReplicas
	}
	switch {
	case outcome.Err() != nil:
		setCondition(&st.Conditions, gen, kvapi.ConditionDegraded, true, kvapi.ReasonReconcileError, outcome.Err().Error())
	case !p.poolFound:
		setCondition(&st.Conditions, gen, kvapi.ConditionDegraded, true, kvapi.ReasonCompactionPoolMissing,
			fmt.Sprintf("CompactionPool %q does not exist in namespace %s: compactions cannot be offloaded", c.Spec.CompactionPoolRef.Name, c.Namespace))
	default:
		setCondition(&st.Conditions, gen, kvapi.ConditionDegraded, false, kvapi.ReasonAsExpected, "")
	}
	waiting := outcome.Waiting(kvapi.ReasonWaitingForRollout)
	ready := p.sts != nil && !waiting && rolloutComplete(p.sts) && p.sts.Status.ReadyReplicas == c.Spec.Replicas
	switch {
	case p.sts == nil:
		setCondition(&st.Conditions, gen, kvapi.ConditionProgressing, true, kvapi.ReasonCreating, "creating the storage pods")
	case waiting:
		setCondition(&st.Conditions, gen, kvapi.ConditionProgressing, true, outcome.reason, outcome.message)
	case !ready:
		setCondition(&st.Conditions, gen, kvapi.ConditionProgressing, true, kvapi.ReasonRollingUpdate,
			fmt.Sprintf("%d of %d storage pods updated and Ready", min(p.sts.Status.UpdatedReplicas, p.sts.Status.ReadyReplicas), c.Spec.Replicas))
	default:
		setCondition(&st.Conditions, gen, kvapi.ConditionProgressing, false, kvapi.ReasonReconciled, "every storage pod runs the current spec")
	}
	if ready {
		setCondition(&st.Conditions, gen, kvapi.ConditionReady, true, kvapi.ReasonReconciled, fmt.Sprintf("%d storage pods Ready", c.Spec.Replicas))
	} else {
		setCondition(&st.Conditions, gen, kvapi.ConditionReady, false, kvapi.ReasonPodsNotReady,
			fmt.Sprintf("%d of %d storage pods Ready", st.ReadyReplicas, c.Spec.Replicas))
	}
}

// SetupWithManager watches KVClusters, their children, and the
// CompactionPools they reference.
func (r *KVClusterReconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.APIReader == nil {
		r.APIReader = mgr.GetAPIReader()
	}
	return ctrl.NewControllerManagedBy(mgr).
		For(&kvapi.KVCluster{}).
		Owns(&appsv1.StatefulSet{}).
		Owns(&corev1.Service{}).
		Owns(&corev1.ConfigMap{}).
		Owns(&policyv1.PodDisruptionBudget{}).
		Owns(&corev1.ServiceAccount{}).
		Owns(&rbacv1.Role{}).
		Owns(&rbacv1.RoleBinding{}).
		Watches(&kvapi.CompactionPool{}, handler.EnqueueRequestsFromMapFunc(r.clustersOfPool)).
		Named("kvcluster").
		Complete(r)
}

// clustersOfPool maps a CompactionPool to the KVClusters that reference it.
// A failed List cannot be retried from here (the map function has no error
// return): it is logged, and those clusters catch up on their next event.
func (r *KVClusterReconciler) clustersOfPool(ctx context.Context, o client.Object) []reconcile.Request {
	var list kvapi.KVClusterList
	if err := r.List(ctx, &list, client.InNamespace(o.GetNamespace())); err != nil {
		log.FromContext(ctx).Error(err, "cannot list the KVClusters that may reference a CompactionPool; they are not requeued for its change",
			"compactionPool", client.ObjectKeyFromObject(o))
		return nil
	}
	var out []reconcile.Request
	for _, c := range list.Items {
		if c.Spec.CompactionPoolRef != nil && c.Spec.CompactionPoolRef.Name == o.GetName() {
			out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&c)})
		}
	}
	return out
}
