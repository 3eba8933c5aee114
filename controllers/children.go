package controllers

import (
	"context"
	"fmt"
	"maps"
	"reflect"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/bellows-kv/bellows/controllers/specs"
)

// children writes the objects a KVCluster or CompactionPool owns (built by
// controllers/specs) and records what it did as events on the owner.
type children struct {
	client   client.Client
	recorder events.EventRecorder
}

// ensure creates desired; or, when the live object's spec-hash differs from
// desired's or owner does not control it, copies desired onto it with update
// (which must carry over what the API server owns, e.g. a Service's
// clusterIP), merges in desired's labels and annotations, sets desired's
// owner references, and writes it. A create or an update is an event on
// owner. It returns the live object, which is desired after a create.
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
	if specs.SpecHash(live) == specs.SpecHash(desired) && metav1.IsControlledBy(live, owner) {
		return live, nil
	}
	update(live, desired)
	labels := live.GetLabels()
	if labels == nil {
		labels = map[string]string{}
	}
	maps.Copy(labels, desired.GetLabels())
	live.SetLabels(labels)
	ann := live.GetAnnotations()
	if ann == nil {
		ann = map[string]string{}
	}
	maps.Copy(ann, desired.GetAnnotations())
	live.SetAnnotations(ann)
	live.SetOwnerReferences(desired.GetOwnerReferences())
	if err := ch.client.Update(ctx, live); err != nil {
		return live, fmt.Errorf("update %s %s: %w", kind, desired.GetName(), err)
	}
	ch.event(owner, "Updated", kind, desired.GetName())
	return live, nil
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
	live.Spec.Replicas = desired.Spec.Replicas
	live.Spec.Template = desired.Spec.Template
	live.Spec.UpdateStrategy = desired.Spec.UpdateStrategy
	live.Spec.PersistentVolumeClaimRetentionPolicy = desired.Spec.PersistentVolumeClaimRetentionPolicy
}

func updateDeployment(live, desired *appsv1.Deployment) { live.Spec = desired.Spec }

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
