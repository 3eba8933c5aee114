package controllers

import (
	"context"
	"fmt"
	"maps"
	"reflect"
	"slices"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/bellows-kv/bellows/controllers/specs"
	"github.com/bellows-kv/bellows/internal/contract"
)

// children writes the objects a KVCluster or CompactionPool owns (built by
// controllers/specs) and records what it did as events on the owner.
type children struct {
	client   client.Client
	recorder events.EventRecorder
}

// ensure creates desired, or brings the live object to it: it copies
// desired onto a copy of live with update (which must carry over what the
// API server or others own, e.g. a Service's clusterIP), merges in desired's
// labels, annotations and owner references (mergeMeta), and writes the
// result when
//
//   - the live object's spec-hash differs from desired's (the operator's
//     spec changed), or owner does not control it (adoption); or
//   - someone else changed what the operator owns (drift): the hash still
//     matches, but the write would change the object (drifted).
//
// A create or an update is an event on owner. It returns the live object,
// which is desired after a create.
func ensure[T client.Object](ctx context.Context, ch children, owner client.Object, desired T, update func(live, desired T)) (T, error) {
	live := emptyLike(desired)
	kind := kindOf(desired)
	err := ch.client.Get(ctx, client.ObjectKeyFromObject(desired), live)
	if apierrors.IsNotFound(err) {
		if err := ch.client.Create(ctx, desired); err != nil {
			return live, fmt.Errorf("create %s %s: %w", kind, desired.GetName(), err)
		}
		ch.event(owner, "Created", kind, desired.GetName())
		return desired, nil
	}
	if err != nil {
		return live, fmt.Errorf("get %s %s: %w", kind, desired.GetName(), err)
	}
	want := live.DeepCopyObject().(T)
	update(want, desired)
	mergeMeta(want, desired)
	if specs.SpecHash(live) == specs.SpecHash(desired) && metav1.IsControlledBy(live, owner) {
		if drifted, err := ch.drifted(ctx, live, want); err != nil || !drifted {
			return live, err
		}
	}
	if err := ch.client.Update(ctx, want); err != nil {
		return live, fmt.Errorf("update %s %s: %w", kind, desired.GetName(), err)
	}
	ch.event(owner, "Updated", kind, desired.GetName())
	return want, nil
}

// drifted reports whether writing want would change live. want differs
// from live in every field the API server defaults and the builders leave
// empty (a container's terminationMessagePath, a Service's sessionAffinity,
// ...), so a difference alone is no drift: a dry-run update lets the API
// server default want, and only a difference that survives that is. This is
// what keeps a steady cluster free of writes. A conflict means live is
// stale: its newer version comes through the watch, and the pass it starts
// looks again.
func (ch children) drifted(ctx context.Context, live, want client.Object) (bool, error) {
	if equality.Semantic.DeepEqual(live, want) {
		return false, nil
	}
	dry := want.DeepCopyObject().(client.Object)
	if err := ch.client.Update(ctx, dry, client.DryRunAll); err != nil {
		if apierrors.IsConflict(err) {
			return false, nil
		}
		return false, fmt.Errorf("dry-run update %s %s: %w", kindOf(want), want.GetName(), err)
	}
	return !sameStored(live, dry), nil
}

// sameStored compares two versions of an object as stored, apart from what
// every write changes (resourceVersion, managedFields) and what reads fill
// in inconsistently (the type meta of a typed object).
func sameStored(a, b client.Object) bool {
	a, b = a.DeepCopyObject().(client.Object), b.DeepCopyObject().(client.Object)
	for _, o := range []client.Object{a, b} {
		o.SetResourceVersion("")
		o.SetManagedFields(nil)
		o.GetObjectKind().SetGroupVersionKind(schema.GroupVersionKind{})
	}
	return equality.Semantic.DeepEqual(a, b)
}

// mergeMeta puts desired's labels, annotations and owner references on obj
// and keeps those others added: a label another tool sets stays, and so does
// an owner reference that does not claim control (one that does, from
// another controller, gives way to desired's on adoption).
func mergeMeta(obj, desired client.Object) {
	labels := obj.GetLabels()
	if labels == nil {
		labels = map[string]string{}
	}
	maps.Copy(labels, desired.GetLabels())
	obj.SetLabels(labels)
	ann := obj.GetAnnotations()
	if ann == nil {
		ann = map[string]string{}
	}
	maps.Copy(ann, desired.GetAnnotations())
	obj.SetAnnotations(ann)
	refs := slices.Clone(desired.GetOwnerReferences())
	for _, r := range obj.GetOwnerReferences() {
		ours := slices.ContainsFunc(refs, func(d metav1.OwnerReference) bool { return d.UID == r.UID })
		if !ours && !ptr.Deref(r.Controller, false) {
			refs = append(refs, r)
		}
	}
	obj.SetOwnerReferences(refs)
}

func (ch children) event(owner client.Object, what, kind, name string) {
	ch.recorder.Eventf(owner, nil, corev1.EventTypeNormal, what, what, "%s %s %s", what, kind, name)
}

// emptyLike is a new, empty object of obj's type (and, for an unstructured
// object, its kind), to read the live object into.
func emptyLike[T client.Object](obj T) T {
	out := reflect.New(reflect.TypeOf(obj).Elem()).Interface().(T)
	if u, ok := any(obj).(*unstructured.Unstructured); ok {
		any(out).(*unstructured.Unstructured).SetGroupVersionKind(u.GroupVersionKind())
	}
	return out
}

// kindOf names obj's kind for errors and events: the Go type of a typed
// object (the builders leave TypeMeta empty), the kind of an unstructured one.
func kindOf(obj client.Object) string {
	if k := obj.GetObjectKind().GroupVersionKind().Kind; k != "" {
		return k
	}
	return reflect.TypeOf(obj).Elem().Name()
}

// serviceMonitorsAvailable reports whether the API server serves ServiceMonitors.
func serviceMonitorsAvailable(c client.Client) (bool, error) {
	_, err := c.RESTMapper().RESTMapping(specs.ServiceMonitorGVK.GroupKind(), specs.ServiceMonitorGVK.Version)
	if meta.IsNoMatchError(err) {
		return false, nil
	}
	return err == nil, err
}

// childStep is a step that ensures the child build makes for the pass.
func childStep[P pass, T client.Object](name string, ch children, build func(P) T, update func(live, desired T)) step[P] {
	return step[P]{name, func(ctx context.Context, p P) Result {
		_, err := ensure(ctx, ch, p.owner(), build(p), update)
		return FailIf(err)
	}}
}

// serviceMonitorStep ensures the ServiceMonitor build makes for the pass
// when the Prometheus operator's CRD is installed, and does nothing without it.
func serviceMonitorStep[P pass](ch children, build func(P) *unstructured.Unstructured) step[P] {
	return step[P]{"ServiceMonitor", func(ctx context.Context, p P) Result {
		ok, err := serviceMonitorsAvailable(ch.client)
		if err != nil || !ok {
			return FailIf(err)
		}
		_, err = ensure(ctx, ch, p.owner(), build(p), updateServiceMonitor)
		return FailIf(err)
	}}
}

// The update functions copy what the operator owns in an object from
// desired onto live, and leave the rest (what the API server or other
// controllers set) alone.

// updateNothing: nothing in the body is the operator's (a ServiceAccount's
// secrets and imagePullSecrets are left to others); labels, annotations and
// owner references still follow desired.
func updateNothing[T client.Object](_, _ T) {}

func updateRole(live, desired *rbacv1.Role) { live.Rules = desired.Rules }

// updateRoleBinding leaves roleRef alone: it is immutable, and the builder
// always names the same Role.
func updateRoleBinding(live, desired *rbacv1.RoleBinding) { live.Subjects = desired.Subjects }

func updateConfigMap(live, desired *corev1.ConfigMap) { live.Data = desired.Data }

// updateStatefulSet copies the mutable fields the builder sets.
func updateStatefulSet(live, desired *appsv1.StatefulSet) {
	updateStatefulSetKeepTemplate(live, desired)
	live.Spec.Template = withRestartedAt(desired.Spec.Template, live.Spec.Template)
}

// updateStatefulSetKeepTemplate is updateStatefulSet without the pod
// template, for drift during a rollout: replicas, update strategy and claim
// retention change no pod, so they are corrected at once.
func updateStatefulSetKeepTemplate(live, desired *appsv1.StatefulSet) {
	// A drain's mark goes with the drain: mergeMeta keeps annotations
	// others set, so these are removed here when desired has none.
	for _, k := range []string{contract.ServingReplicasAnnotation, contract.DrainingSinceAnnotation} {
		if _, ok := desired.Annotations[k]; !ok {
			delete(live.Annotations, k)
		}
	}
	live.Spec.Replicas = desired.Spec.Replicas
	live.Spec.UpdateStrategy = *desired.Spec.UpdateStrategy.DeepCopy()
	live.Spec.PersistentVolumeClaimRetentionPolicy = desired.Spec.PersistentVolumeClaimRetentionPolicy.DeepCopy()
}

func updateDeployment(live, desired *appsv1.Deployment) {
	template := live.Spec.Template
	live.Spec = *desired.Spec.DeepCopy()
	live.Spec.Template = withRestartedAt(live.Spec.Template, template)
}

// restartedAtAnnotation is what `kubectl rollout restart` sets on a pod
// template to roll the pods.
const restartedAtAnnotation = "kubectl.kubernetes.io/restartedAt"

// withRestartedAt is a copy of desired with live's restartedAtAnnotation: a
// restart someone asked for is not the operator's to revert (reverting it
// would roll every pod once more, back to the previous template).
func withRestartedAt(desired, live corev1.PodTemplateSpec) corev1.PodTemplateSpec {
	out := *desired.DeepCopy()
	if v, ok := live.Annotations[restartedAtAnnotation]; ok {
		if out.Annotations == nil {
			out.Annotations = map[string]string{}
		}
		out.Annotations[restartedAtAnnotation] = v
	}
	return out
}

// updateService copies desired's spec but keeps what the API server assigned.
func updateService(live, desired *corev1.Service) {
	ip, ips, fam, pol := live.Spec.ClusterIP, live.Spec.ClusterIPs, live.Spec.IPFamilies, live.Spec.IPFamilyPolicy
	live.Spec = desired.Spec
	live.Spec.ClusterIP, live.Spec.ClusterIPs, live.Spec.IPFamilies, live.Spec.IPFamilyPolicy = ip, ips, fam, pol
}

func updatePDB(live, desired *policyv1.PodDisruptionBudget) { live.Spec = desired.Spec }

func updateServiceMonitor(live, desired *unstructured.Unstructured) {
	live.Object["spec"] = desired.Object["spec"]
}
