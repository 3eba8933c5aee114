package controllers

import (
	"cmp"
	"context"
	"fmt"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	kvapi "github.com/bellows-kv/bellows/api/v1alpha1"
	"github.com/bellows-kv/bellows/controllers/specs"
	"github.com/bellows-kv/bellows/internal/contract"
	"github.com/bellows-kv/bellows/internal/version"
)

// What the operator may do, as few verbs as its code uses (docs/security.md
// §4 says why each is needed). Every child is read through the informer
// cache (get, list, watch), created, and updated when it drifts (ensure,
// also a dry-run update); none is patched or deleted: the garbage collector
// deletes them with their owner.
// +kubebuilder:rbac:groups=kv.bellows.dev,resources=kvclusters,verbs=get;list;watch
// +kubebuilder:rbac:groups=kv.bellows.dev,resources=kvclusters/status,verbs=patch
// +kubebuilder:rbac:groups=apps,resources=statefulsets,verbs=get;list;watch;create;update
// +kubebuilder:rbac:groups="",resources=services;configmaps,verbs=get;list;watch;create;update
// Deleting a pod is how a stuck rollout is replaced (rollout.go) and a
// storage pod lost with its node (kvcluster_storeloss.go); a patch sets a
// worker's pod-deletion-cost (compactionpool_autoscale.go).
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch;patch;delete
// A lost storage pod (kvcluster_storeloss.go): nodes are watched for their
// readiness; a PVC is watched and, when its volume was tied to a lost node,
// deleted (PVCs are the StatefulSet's, not the operator's children); a
// PVC's volume is read for its node affinity, directly, without an
// informer.
// +kubebuilder:rbac:groups="",resources=nodes,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=persistentvolumeclaims,verbs=get;list;watch;delete
// +kubebuilder:rbac:groups="",resources=persistentvolumes,verbs=get
// +kubebuilder:rbac:groups=policy,resources=poddisruptionbudgets,verbs=get;list;watch;create;update
// +kubebuilder:rbac:groups=monitoring.coreos.com,resources=servicemonitors,verbs=get;list;watch;create;update
// +kubebuilder:rbac:groups="",resources=serviceaccounts,verbs=get;list;watch;create;update
// +kubebuilder:rbac:groups=rbac.authorization.k8s.io,resources=roles;rolebindings,verbs=get;list;watch;create;update
// +kubebuilder:rbac:groups=batch,resources=jobs,verbs=get;list;watch;create
// The storage pods' Role grants this (and list and watch of their own
// StatefulSet); Kubernetes only lets the operator grant what it holds
// itself (no escalate/bind verbs are asked for).
// +kubebuilder:rbac:groups=discovery.k8s.io,resources=endpointslices,verbs=list;watch
// The reconcilers' events (events.k8s.io/v1; a repeated event is a patch).
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// KVClusterReconciler reconciles a KVCluster into a StatefulSet, two
// Services, a PodDisruptionBudget, the engine ConfigMap, the storage pods'
// identity (ServiceAccount, Role and RoleBinding `<name>-store`), their
// NetworkPolicy `<name>-store` (unless turned off) and (when the Prometheus
// operator is installed) a ServiceMonitor.
type KVClusterReconciler struct {
	client.Client
	Scheme   *runtime.Scheme
	Recorder events.EventRecorder
	// APIReader reads around the informer cache. The rollout gate uses it:
	// a cached StatefulSet can lag behind the operator's own last write and
	// look rolled out when it is not. SetupWithManager defaults it to the
	// manager's API reader.
	APIReader client.Reader
	// DefaultImage runs the pods of a cluster without spec.image (operator
	// --default-image). SetupWithManager defaults it to this build's image.
	DefaultImage string
	// NetworkPolicies: whether to make the storage pods' NetworkPolicy,
	// and whom it admits to their metrics port.
	NetworkPolicies NetworkPolicies
	// StoreGauges asks a storage pod how many regions it holds, during a
	// scale-down's drain (kvcluster_drain.go), and how many regions its
	// balancer found without a live owner (kvcluster_failover.go).
	// SetupWithManager defaults it to reading the pod's metrics.
	StoreGauges StoreGauges

	// credentials are the operator's own, for scraping pods with TLS.
	credentials operatorCredentials
}

func (r *KVClusterReconciler) certificates() certificates {
	return certificates{client: r.Client, apiReader: r.APIReader}
}

// rolloutRecheck is how often a pass looks again while the StatefulSet rolls
// out: whether a held-back change may go, whether a pod got stuck. The
// StatefulSet's status changes trigger most passes through the watch, but
// not a pod's container starting to wait on an image, nor the progress
// deadline passing.
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
	// pool is the CompactionPool compactionPoolRef names (nil when there
	// is none or it does not exist); the split size follows its cache.
	pool *kvapi.CompactionPool
	// regionsTooLarge says why the split size lets a region outgrow the
	// pool's worker cache (empty when it does not); splitChecked says the
	// check ran in this pass.
	regionsTooLarge string
	splitChecked    bool
	// maxClockOffset is spec.clock.maxOffset, parsed; clockChecked says
	// the check ran in this pass.
	maxClockOffset time.Duration
	clockChecked   bool
	// memoryShortfall says why the user's memory limit cannot hold what
	// the engine settings need (empty when it can).
	memoryShortfall string
	// rollout is what the pods say about an incomplete rollout (empty when
	// the rollout was complete or not yet observed).
	rollout rolloutPods
	// replaced says how this pass replaced a stuck rollout: the newer spec
	// written over it, the superseded pods deleted.
	replaced []string
	// drain is the scale-down under way (nil when the StatefulSet's
	// replicas are not above the cluster's).
	drain *drainState
	// loss is what the pass found out about lost storage pods.
	loss storeLoss
	// failover is what the pass read of regions without a live owner.
	failover failoverState
}

func (p *kvPass) owner() owner { return p.cluster }

// draining reports whether this pass kept the StatefulSet from shrinking.
func (p *kvPass) draining() bool { return p.drain != nil && !p.drain.done() }

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
	cluster.Spec.Image = cmp.Or(cluster.Spec.Image, r.DefaultImage, contract.Image(version.Version))
	return r.runner().run(ctx, p)
}

// runner lists the steps of a pass. The StatefulSet comes last: its rollout
// gate may stop the pass (Wait), and every other child, and the pool check,
// must still be reconciled while a rollout is under way. Lost storage pods
// come first: a store lost with its node leaves the rollout incomplete, and
// no other step's failure should keep its pod from being replaced.
func (r *KVClusterReconciler) runner() runner[*kvPass] {
	ch := children{client: r.Client, recorder: r.Recorder}
	return runner[*kvPass]{
		recorder: r.Recorder,
		steps: []step[*kvPass]{
			pauseStep[*kvPass]("this cluster and its children"),
			{"lost storage pods", r.replaceLostStores},
			// Before the StatefulSet, so pods never wait on a Secret.
			certificatesStep(r.certificates(), ch, func(p *kvPass) kvapi.TLSSpec { return p.cluster.Spec.TLS },
				func(p *kvPass) []certificate { return clusterCertificates(p.cluster) }),
			r.tokensStep(ch),
			// The storage pods' identity comes before the StatefulSet, so pods
			// never start under a ServiceAccount that does not exist yet.
			childStep("ServiceAccount", ch, func(p *kvPass) *corev1.ServiceAccount { return specs.BuildStoreServiceAccount(p.cluster) }, updateNothing),
			childStep("Role", ch, func(p *kvPass) *rbacv1.Role { return specs.BuildStoreRole(p.cluster) }, updateRole),
			childStep("RoleBinding", ch, func(p *kvPass) *rbacv1.RoleBinding { return specs.BuildStoreRoleBinding(p.cluster) }, updateRoleBinding),
			// Before the StatefulSet, so no storage pod runs without it.
			networkPolicyStep(ch, r.NetworkPolicies, func(p *kvPass, peers specs.NetworkPolicyPeers) *networkingv1.NetworkPolicy {
				return specs.BuildStoreNetworkPolicy(p.cluster, peers)
			}),
			childStep("headless Service", ch, func(p *kvPass) *corev1.Service { return specs.BuildStoreHeadlessService(p.cluster) }, updateService),
			childStep("client Service", ch, func(p *kvPass) *corev1.Service { return specs.BuildStoreClientService(p.cluster) }, updateService),
			childStep("PodDisruptionBudget", ch, func(p *kvPass) *policyv1.PodDisruptionBudget { return specs.BuildStorePDB(p.cluster) }, updatePDB),
			serviceMonitorStep(ch, func(p *kvPass) *unstructured.Unstructured { return specs.BuildStoreServiceMonitor(p.cluster) }),
			{"CompactionPool reference", r.checkPool},
			{"resources", r.checkResources},
			{"region split size", r.checkRegionSplit},
			{"clock offset", r.checkClock},
			{"restore from a backup", r.restoreFromBackup},
			{"regions failing over", r.observeFailover},
			{"engine ConfigMap and StatefulSet", func(ctx context.Context, p *kvPass) Result { return r.reconcileStatefulSet(ctx, ch, p) }},
		},
		status:      computeKVStatus,
		patchStatus: r.writeStatus,
	}
}

// writeStatus patches the status and announces, as events, the transitions
// it records (announcements): an event per transition, not per pass, since
// the status remembers what was announced. A pass that announces patches
// with optimistic locking: a pass that read the cluster before the previous
// pass's status write reached the cache fails here and is retried, instead
// of announcing the same transition a second time.
func (r *KVClusterReconciler) writeStatus(ctx context.Context, p *kvPass) error {
	news := announcements(p.orig.Status.Conditions, p.cluster.Status.Conditions)
	if len(news) == 0 {
		return patchStatus(ctx, r.Client, p.orig, p.cluster, func(c *kvapi.KVCluster) *kvapi.KVClusterStatus { return &c.Status })
	}
	patched := p.orig.DeepCopy()
	patched.Status = p.cluster.Status
	if err := r.Status().Patch(ctx, patched, client.MergeFromWithOptions(p.orig, client.MergeFromWithOptimisticLock{})); err != nil {
		return client.IgnoreNotFound(err)
	}
	for _, a := range news {
		r.Recorder.Eventf(p.cluster, nil, a.eventType, a.reason, a.action, "%s", truncate(a.note, maxEventNote))
	}
	return nil
}

// announcement is an event for a condition's transition.
type announcement struct{ eventType, reason, action, note string }

// announcements are the transitions from orig's conditions to cur's that a
// person should hear of: a change held back by the rollout gate (each
// generation held back once), a stuck rollout, a missing CompactionPool
// (each pool name once), a lost store left to a person (each message once).
func announcements(orig, cur []metav1.Condition) []announcement {
	var out []announcement
	was, is := conditionOf(orig, kvapi.ConditionProgressing), conditionOf(cur, kvapi.ConditionProgressing)
	switch {
	case is.Reason == kvapi.ReasonWaitingForRollout && (was.Reason != is.Reason || was.ObservedGeneration != is.ObservedGeneration):
		out = append(out, announcement{corev1.EventTypeNormal, is.Reason, "HoldBack", fmt.Sprintf("generation %d: %s", is.ObservedGeneration, is.Message)})
	case is.Reason == kvapi.ReasonRolloutStuck && was.Reason != is.Reason:
		out = append(out, announcement{corev1.EventTypeWarning, is.Reason, "DetectStuckRollout", is.Message})
	}
	was, is = conditionOf(orig, kvapi.ConditionDegraded), conditionOf(cur, kvapi.ConditionDegraded)
	if is.Reason == kvapi.ReasonCompactionPoolMissing && (was.Reason != is.Reason || was.Message != is.Message) {
		out = append(out, announcement{corev1.EventTypeWarning, is.Reason, "CheckCompactionPool", is.Message})
	}
	was, is = conditionOf(orig, kvapi.ConditionStoreLost), conditionOf(cur, kvapi.ConditionStoreLost)
	if is.Reason == kvapi.ReasonManualActionRequired && (was.Reason != is.Reason || was.Message != is.Message) {
		out = append(out, announcement{corev1.EventTypeWarning, is.Reason, "KeepLostStoreVolume", is.Message})
	}
	// A failover's start and end, once each (not its count's changes).
	was, is = conditionOf(orig, kvapi.ConditionFailingOver), conditionOf(cur, kvapi.ConditionFailingOver)
	switch {
	case is.Reason == kvapi.ReasonRegionsWithoutLiveOwner && was.Reason != is.Reason:
		out = append(out, announcement{corev1.EventTypeWarning, is.Reason, "ObserveFailover", is.Message})
	case is.Reason == kvapi.ReasonEveryRegionOwned && was.Reason == kvapi.ReasonRegionsWithoutLiveOwner:
		out = append(out, announcement{corev1.EventTypeNormal, kvapi.ReasonFailoverDone, "ObserveFailover", is.Message})
	}
	return out
}

// conditionOf is the condition of type typ, or the zero condition.
func conditionOf(conds []metav1.Condition, typ string) metav1.Condition {
	if c := meta.FindStatusCondition(conds, typ); c != nil {
		return *c
	}
	return metav1.Condition{}
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
// (ConfigMap included) waits, unless the rollout is stuck (rollout.go). While
// it rolls out, pods stuck on a superseded revision are replaced, and drift
// is corrected except in the pod template.
func (r *KVClusterReconciler) reconcileStatefulSet(ctx context.Context, ch children, p *kvPass) Result {
	c := p.cluster
	cm, err := specs.BuildStoreConfigMap(c)
	if err != nil {
		// Engine settings the stores would refuse (stored before a CRD
		// rule existed): reported on this cluster, which keeps its pods
		// as they are, rather than rolled out as crash-looping stores.
		return Invalid(err)
	}
	desired := specs.BuildStoreStatefulSet(c, cm, p.pool)

	// The gate decides on the live StatefulSet, not the cached one: right
	// after the operator applied a change, the cache may still hold the
	// previous, rolled-out generation, and the next change (ConfigMap first)
	// would slip through before the StatefulSet update fails on a conflict.
	existing := &appsv1.StatefulSet{}
	err = r.APIReader.Get(ctx, client.ObjectKeyFromObject(desired), existing)
	if err != nil && !apierrors.IsNotFound(err) {
		return Fail(err)
	}
	rolling := err == nil && !rolloutComplete(existing)
	// A scale-down drains the leaving stores first (kvcluster_drain.go):
	// until they hold no region, the StatefulSet keeps its replicas and
	// carries the mark. A drain starts only on a rolled-out StatefulSet:
	// during a rollout the mark would be held back like any change, and
	// replicas above the spec's then are drift (a scale by hand), put back
	// at once as before. A drain already marked goes on through a rollout
	// (a leaving pod that restarts makes one).
	shrinkOnly := false
	_, marked := existing.GetAnnotations()[contract.ServingReplicasAnnotation]
	if err == nil && existing.Spec.Replicas != nil && *existing.Spec.Replicas > c.Spec.Replicas && (!rolling || marked) {
		d, err := r.judgeDrain(ctx, c, existing, time.Now())
		if err != nil {
			return Fail(err)
		}
		p.drain = d
		withMark := desired.DeepCopy()
		specs.MarkDraining(withMark, d.from, d.since)
		if d.done() {
			// The shrink is the only change from the marked StatefulSet:
			// it passes the rollout gate (a leaving pod that is not Ready
			// would otherwise hold it back until its rollout got stuck).
			shrinkOnly = specs.SpecHash(existing) == specs.SpecHash(withMark)
		} else {
			desired = withMark
		}
	}
	update, replacing := updateStatefulSet, false
	if rolling {
		rp, err := judgePods(ctx, r.APIReader, existing, time.Now())
		if err != nil {
			return Fail(err)
		}
		p.rollout = rp
		deleted, err := replaceSuperseded(ctx, r.Client, existing, rp)
		if len(deleted) > 0 {
			msg := replacedMessage(existing, rp.updateRevision, deleted)
			p.replaced = append(p.replaced, msg)
			r.Recorder.Eventf(c, existing, corev1.EventTypeWarning, kvapi.ReasonRolloutReplaced, "DeleteStuckPods", "%s", truncate(msg, maxEventNote))
		}
		if err != nil {
			return Fail(err)
		}
		switch {
		case specs.SpecHash(existing) == specs.SpecHash(desired) || shrinkOnly:
			// Drift in the pod template would be a second rollout on top
			// of this one: it waits, as a change of the spec does. The
			// rest (replicas above all) is corrected at once.
			update = updateStatefulSetKeepTemplate
		case len(rp.stuck) == 0:
			// One change at a time: the pods roll one by one
			// (OrderedReady), and the next change waits until the
			// current rollout is done.
			p.sts = existing
			log.FromContext(ctx).Info("holding back a StatefulSet change until the rollout completes")
			return Wait(kvapi.ReasonWaitingForRollout, "a spec change waits until the current rollout of the StatefulSet completes", rolloutRecheck)
		default:
			// Waiting would be forever: the newer spec replaces the
			// stuck rollout.
			replacing = true
		}
	}

	if _, err := ensure(ctx, ch, c, cm, updateConfigMap); err != nil {
		return Fail(err)
	}
	sts, err := ensure(ctx, ch, c, desired, update)
	if err != nil {
		return Fail(err)
	}
	p.sts = sts
	if p.drain != nil && p.drain.done() {
		r.drainFinished(c, sts, p.drain)
	}
	if replacing {
		msg := fmt.Sprintf("wrote the newer spec over %s; once the StatefulSet controller has taken it, "+
			"the pods stuck on revision %s are deleted so that it recreates them", p.rollout.stuckDetail(), p.rollout.updateRevision)
		p.replaced = append(p.replaced, msg)
		r.Recorder.Eventf(c, sts, corev1.EventTypeWarning, kvapi.ReasonRolloutReplaced, "ReplaceStuckRollout", "%s", truncate(msg, maxEventNote))
	}
	after := time.Duration(0)
	if rolling || !rolloutComplete(sts) {
		after = rolloutRecheck
	}
	if p.draining() {
		after = soonest(after, contract.StoreDrainRecheck)
	}
	if after > 0 {
		return Requeue(after)
	}
	return Continue()
}

// describeTLS says where a TLS setting's certificates come from.
func describeTLS(t kvapi.TLSSpec) string {
	if t.IssuerRef != nil {
		return fmt.Sprintf("%s (%s %s)", t.Mode, t.IssuerRef.Kind, t.IssuerRef.Name)
	}
	return string(t.Mode)
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
	pool := &kvapi.CompactionPool{}
	err := r.Get(ctx, client.ObjectKey{Namespace: p.cluster.Namespace, Name: ref.Name}, pool)
	if apierrors.IsNotFound(err) {
		return Continue()
	}
	p.poolFound = err == nil
	if p.poolFound {
		pool.SetDefaults()
		p.pool = pool
	}
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
		setCondition(&st.Conditions, gen, kvapi.ConditionDegraded, true, outcome.FailReason(), outcome.Err().Error())
	case !p.poolFound:
		setCondition(&st.Conditions, gen, kvapi.ConditionDegraded, true, kvapi.ReasonCompactionPoolMissing,
			fmt.Sprintf("CompactionPool %q does not exist in namespace %s: compactions cannot be offloaded", c.Spec.CompactionPoolRef.Name, c.Namespace))
	case p.pool != nil && !equality.Semantic.DeepEqual(p.pool.Spec.TLS, c.Spec.TLS):
		setCondition(&st.Conditions, gen, kvapi.ConditionDegraded, true, kvapi.ReasonTLSMismatch,
			fmt.Sprintf("tls is %s here and %s in CompactionPool %q: the stores give no job to a worker whose certificate is not of their CA (or that has none), so compactions cannot be offloaded; create the cluster or the pool again with the same tls",
				describeTLS(c.Spec.TLS), describeTLS(p.pool.Spec.TLS), p.pool.Name))
	case len(p.loss.needsPerson) > 0:
		setCondition(&st.Conditions, gen, kvapi.ConditionDegraded, true, kvapi.ReasonManualActionRequired, strings.Join(p.loss.needsPerson, "; "))
	default:
		setCondition(&st.Conditions, gen, kvapi.ConditionDegraded, false, kvapi.ReasonAsExpected, "")
	}
	resourcesCondition(p)
	regionsCondition(p)
	clockCondition(p)
	lossCondition(p)
	failoverCondition(p)
	waiting := outcome.Waiting(kvapi.ReasonWaitingForRollout)
	// While draining, the StatefulSet keeps the leaving stores, and they
	// serve: the cluster is ready when all of them are.
	want := c.Spec.Replicas
	if p.draining() {
		want = p.drain.from
	}
	ready := p.sts != nil && !waiting && rolloutComplete(p.sts) && p.sts.Status.ReadyReplicas == want
	// A replacement is reported until the rollout it started completes (or
	// the spec changes again), not only in the pass that acted.
	wasReplacing := conditionOf(p.orig.Status.Conditions, kvapi.ConditionProgressing)
	switch {
	case outcome.Waiting(kvapi.ReasonRestoring):
		setCondition(&st.Conditions, gen, kvapi.ConditionProgressing, true, kvapi.ReasonRestoring, outcome.message)
	case p.sts == nil:
		setCondition(&st.Conditions, gen, kvapi.ConditionProgressing, true, kvapi.ReasonCreating, "creating the storage pods")
	case waiting:
		setCondition(&st.Conditions, gen, kvapi.ConditionProgressing, true, outcome.reason, outcome.message)
	case len(p.replaced) > 0:
		setCondition(&st.Conditions, gen, kvapi.ConditionProgressing, true, kvapi.ReasonRolloutReplaced, strings.Join(p.replaced, "; "))
	case !ready && len(p.rollout.stuck) > 0:
		setCondition(&st.Conditions, gen, kvapi.ConditionProgressing, false, kvapi.ReasonRolloutStuck, p.rollout.stuckMessage())
	case p.draining():
		setCondition(&st.Conditions, gen, kvapi.ConditionProgressing, true, kvapi.ReasonDraining, p.drain.message())
	case !ready && wasReplacing.Reason == kvapi.ReasonRolloutReplaced && wasReplacing.ObservedGeneration == gen:
		setCondition(&st.Conditions, gen, kvapi.ConditionProgressing, true, kvapi.ReasonRolloutReplaced, wasReplacing.Message)
	case !ready:
		setCondition(&st.Conditions, gen, kvapi.ConditionProgressing, true, kvapi.ReasonRollingUpdate,
			fmt.Sprintf("%d of %d storage pods updated and Ready", min(p.sts.Status.UpdatedReplicas, p.sts.Status.ReadyReplicas), want))
	default:
		setCondition(&st.Conditions, gen, kvapi.ConditionProgressing, false, kvapi.ReasonReconciled, "every storage pod runs the current spec")
	}
	switch {
	case ready && p.draining():
		setCondition(&st.Conditions, gen, kvapi.ConditionReady, true, kvapi.ReasonDraining,
			fmt.Sprintf("%d storage pods Ready; stores %s are being drained before the scale-down to %d", want, p.drain.leaving(), c.Spec.Replicas))
	case ready:
		setCondition(&st.Conditions, gen, kvapi.ConditionReady, true, kvapi.ReasonReconciled, fmt.Sprintf("%d storage pods Ready", want))
	default:
		setCondition(&st.Conditions, gen, kvapi.ConditionReady, false, kvapi.ReasonPodsNotReady,
			fmt.Sprintf("%d of %d storage pods Ready", st.ReadyReplicas, want))
	}
}

// SetupWithManager watches KVClusters, their children, the CompactionPools
// they reference, and what makes a storage pod lost: its node's readiness,
// its PVC.
func (r *KVClusterReconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.APIReader == nil {
		r.APIReader = mgr.GetAPIReader()
	}
	if r.DefaultImage == "" {
		r.DefaultImage = contract.Image(version.Version)
	}
	if r.StoreGauges == nil {
		r.StoreGauges = &metricsStoreGauges{certs: r.certificates(), creds: &r.credentials}
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
		Owns(&networkingv1.NetworkPolicy{}).
		Owns(&batchv1.Job{}).
		Owns(&corev1.Secret{}).
		Watches(&kvapi.CompactionPool{}, handler.EnqueueRequestsFromMapFunc(r.clustersOfPool)).
		Watches(&corev1.Node{}, handler.EnqueueRequestsFromMapFunc(r.clustersOnNode), builder.WithPredicates(nodeReadinessChanged())).
		Watches(&corev1.PersistentVolumeClaim{}, handler.EnqueueRequestsFromMapFunc(clusterOfStoreClaim)).
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
