package controllers

import (
	"context"
	"errors"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
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

// kvPass is the state of one reconcile pass: the steps fill it, and the
// status is computed from it once at the end.
type kvPass struct {
	cluster *kvapi.KVCluster
	sts     *appsv1.StatefulSet
	// waiting is set when a change is held back until the rollout finishes.
	waiting   bool
	poolFound bool
}

// Reconcile runs the guarded steps and writes status once.
func (r *KVClusterReconciler) Reconcile(ctx context.Context, req ctrl.Request) (res ctrl.Result, err error) {
	cluster := &kvapi.KVCluster{}
	if err := r.Get(ctx, req.NamespacedName, cluster); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !cluster.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil // children go with the owner (garbage collection)
	}
	orig := cluster.DeepCopy()
	cluster.SetDefaults()
	p := &kvPass{cluster: cluster}

	if kvapi.IsPaused(cluster.Annotations) {
		setCondition(&cluster.Status.Conditions, cluster.Generation, kvapi.ConditionProgressing, false, kvapi.ReasonPaused,
			"the "+kvapi.PausedAnnotation+" annotation is set: the operator leaves this cluster and its children alone")
		cluster.Status.ObservedGeneration = cluster.Generation
		return ctrl.Result{}, r.writeStatus(ctx, orig, cluster)
	}

	stepErr := runSteps(ctx, p, []step[*kvPass]{
		{"store identity", r.reconcileStoreIdentity},
		{"engine ConfigMap and StatefulSet", r.reconcileStatefulSet},
		{"Services", r.reconcileServices},
		{"PodDisruptionBudget", r.reconcilePDB},
		{"ServiceMonitor", r.reconcileServiceMonitor},
		{"CompactionPool reference", r.checkPool},
	})
	r.computeStatus(p, stepErr)
	if err := r.writeStatus(ctx, orig, cluster); err != nil {
		return ctrl.Result{}, errors.Join(stepErr, err)
	}
	if stepErr != nil {
		r.Recorder.Eventf(cluster, nil, corev1.EventTypeWarning, kvapi.ReasonReconcileError, "Reconcile", "%v", stepErr)
		return ctrl.Result{}, stepErr
	}
	if p.waiting {
		return ctrl.Result{RequeueAfter: 10 * time.Second}, nil
	}
	return ctrl.Result{}, nil
}

func (r *KVClusterReconciler) event(c *kvapi.KVCluster, res applyResult, kind, name string) {
	if res == applyNone {
		return
	}
	r.Recorder.Eventf(c, nil, corev1.EventTypeNormal, string(res), string(res), "%s %s %s", string(res), kind, name)
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

// reconcileStoreIdentity writes the ServiceAccount the storage pods run as
// and the Role and RoleBinding that let them discover the compaction
// workers (EndpointSlices). It runs before the StatefulSet, so pods never
// start under a ServiceAccount that does not exist yet.
func (r *KVClusterReconciler) reconcileStoreIdentity(ctx context.Context, p *kvPass) error {
	c := p.cluster
	sa := specs.BuildStoreServiceAccount(c)
	saExisting := &corev1.ServiceAccount{}
	// Nothing in the ServiceAccount's body is the operator's: leave secrets
	// and imagePullSecrets that others add alone.
	res, err := apply(ctx, r.Client, sa, saExisting, func() {})
	if err != nil {
		return err
	}
	r.event(c, res, "ServiceAccount", sa.Name)

	role := specs.BuildStoreRole(c)
	roleExisting := &rbacv1.Role{}
	res, err = apply(ctx, r.Client, role, roleExisting, func() { roleExisting.Rules = role.Rules })
	if err != nil {
		return err
	}
	r.event(c, res, "Role", role.Name)

	rb := specs.BuildStoreRoleBinding(c)
	rbExisting := &rbacv1.RoleBinding{}
	// roleRef is immutable, and the builder always names the same Role.
	res, err = apply(ctx, r.Client, rb, rbExisting, func() { rbExisting.Subjects = rb.Subjects })
	if err != nil {
		return err
	}
	r.event(c, res, "RoleBinding", rb.Name)
	return nil
}

func (r *KVClusterReconciler) reconcileStatefulSet(ctx context.Context, p *kvPass) error {
	c := p.cluster
	cm, err := specs.BuildStoreConfigMap(c)
	if err != nil {
		return err
	}
	desired := specs.BuildStoreStatefulSet(c, cm)

	// The gate decides on the live StatefulSet, not the cached one: right
	// after the operator applied a change, the cache may still hold the
	// previous, rolled-out generation, and the next change (ConfigMap first)
	// would slip through before the StatefulSet update fails on a conflict.
	existing := &appsv1.StatefulSet{}
	err = r.APIReader.Get(ctx, client.ObjectKeyFromObject(desired), existing)
	if err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	if err == nil && specs.SpecHash(existing) != specs.SpecHash(desired) && !rolloutComplete(existing) {
		// One change at a time: the pods roll one by one (OrderedReady), and
		// the next change waits until the current rollout is done.
		p.sts, p.waiting = existing, true
		log.FromContext(ctx).Info("holding back a StatefulSet change until the rollout completes")
		return nil
	}

	cmExisting := &corev1.ConfigMap{}
	res, err := apply(ctx, r.Client, cm, cmExisting, func() { cmExisting.Data = cm.Data })
	if err != nil {
		return err
	}
	r.event(c, res, "ConfigMap", cm.Name)

	sts := &appsv1.StatefulSet{}
	res, err = apply(ctx, r.Client, desired, sts, func() {
		sts.Spec.Replicas = desired.Spec.Replicas
		sts.Spec.Template = desired.Spec.Template
		sts.Spec.UpdateStrategy = desired.Spec.UpdateStrategy
		sts.Spec.PersistentVolumeClaimRetentionPolicy = desired.Spec.PersistentVolumeClaimRetentionPolicy
	})
	if err != nil {
		return err
	}
	r.event(c, res, "StatefulSet", desired.Name)
	if res == applyCreated {
		p.sts = desired
	} else {
		p.sts = sts
	}
	return nil
}

func (r *KVClusterReconciler) reconcileServices(ctx context.Context, p *kvPass) error {
	for _, desired := range []*corev1.Service{specs.BuildStoreHeadlessService(p.cluster), specs.BuildStoreClientService(p.cluster)} {
		svc := &corev1.Service{}
		res, err := apply(ctx, r.Client, desired, svc, func() { updateService(svc, desired) })
		if err != nil {
			return err
		}
		r.event(p.cluster, res, "Service", desired.Name)
	}
	return nil
}

// updateService copies desired's spec but keeps what the API server assigned.
func updateService(svc, desired *corev1.Service) {
	ip, ips, fam, pol := svc.Spec.ClusterIP, svc.Spec.ClusterIPs, svc.Spec.IPFamilies, svc.Spec.IPFamilyPolicy
	svc.Spec = desired.Spec
	svc.Spec.ClusterIP, svc.Spec.ClusterIPs, svc.Spec.IPFamilies, svc.Spec.IPFamilyPolicy = ip, ips, fam, pol
}

func (r *KVClusterReconciler) reconcilePDB(ctx context.Context, p *kvPass) error {
	desired := specs.BuildStorePDB(p.cluster)
	pdb := &policyv1.PodDisruptionBudget{}
	res, err := apply(ctx, r.Client, desired, pdb, func() { pdb.Spec = desired.Spec })
	r.event(p.cluster, res, "PodDisruptionBudget", desired.Name)
	return err
}

func (r *KVClusterReconciler) reconcileServiceMonitor(ctx context.Context, p *kvPass) error {
	sm := specs.BuildStoreServiceMonitor(p.cluster)
	_, res, err := applyServiceMonitor(ctx, r.Client, sm)
	r.event(p.cluster, res, "ServiceMonitor", sm.GetName())
	return err
}

func (r *KVClusterReconciler) checkPool(ctx context.Context, p *kvPass) error {
	ref := p.cluster.Spec.CompactionPoolRef
	if ref == nil {
		p.poolFound = true
		return nil
	}
	err := r.Get(ctx, client.ObjectKey{Namespace: p.cluster.Namespace, Name: ref.Name}, &kvapi.CompactionPool{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	p.poolFound = err == nil
	return err
}

// computeStatus derives status and conditions from the children.
func (r *KVClusterReconciler) computeStatus(p *kvPass, stepErr error) {
	c := p.cluster
	st := &c.Status
	st.ObservedGeneration = c.Generation
	st.Regions = c.Spec.Regions.RegionCount()
	st.RegionAssignment = specs.RegionAssignments(c)
	if p.sts != nil {
		st.Replicas = p.sts.Status.Replicas
		st.ReadyReplicas = p.sts.Status.ReadyReplicas
		st.UpdatedReplicas = p.sts.Status.UpdatedReplicas
	}
	gen := c.Generation
	switch {
	case stepErr != nil:
		setCondition(&st.Conditions, gen, kvapi.ConditionDegraded, true, kvapi.ReasonReconcileError, stepErr.Error())
	case !p.poolFound:
		setCondition(&st.Conditions, gen, kvapi.ConditionDegraded, true, kvapi.ReasonCompactionPoolMissing,
			fmt.Sprintf("CompactionPool %q does not exist in namespace %s: compactions cannot be offloaded", c.Spec.CompactionPoolRef.Name, c.Namespace))
	default:
		setCondition(&st.Conditions, gen, kvapi.ConditionDegraded, false, kvapi.ReasonAsExpected, "")
	}
	ready := p.sts != nil && !p.waiting && rolloutComplete(p.sts) && p.sts.Status.ReadyReplicas == c.Spec.Replicas
	switch {
	case p.sts == nil:
		setCondition(&st.Conditions, gen, kvapi.ConditionProgressing, true, kvapi.ReasonCreating, "creating the storage pods")
	case p.waiting:
		setCondition(&st.Conditions, gen, kvapi.ConditionProgressing, true, kvapi.ReasonWaitingForRollout,
			"a spec change waits until the current rollout of the StatefulSet completes")
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

// writeStatus patches the status subresource when it changed.
func (r *KVClusterReconciler) writeStatus(ctx context.Context, orig, c *kvapi.KVCluster) error {
	if equalJSON(orig.Status, c.Status) {
		return nil
	}
	patched := orig.DeepCopy()
	patched.Status = c.Status
	return client.IgnoreNotFound(r.Status().Patch(ctx, patched, client.MergeFrom(orig)))
}

func equalJSON(a, b any) bool { return specs.HashOf(a) == specs.HashOf(b) }

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

func (r *KVClusterReconciler) clustersOfPool(ctx context.Context, o client.Object) []reconcile.Request {
	var list kvapi.KVClusterList
	if err := r.List(ctx, &list, client.InNamespace(o.GetNamespace())); err != nil {
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
