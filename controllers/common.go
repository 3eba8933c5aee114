package controllers

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kvapi "github.com/bellows-kv/bellows/api/v1alpha1"
)

// ServiceMonitorGVK is the Prometheus-operator's ServiceMonitor. The operator
// writes ServiceMonitors as unstructured objects, and only when the API
// server knows the kind.
var ServiceMonitorGVK = schema.GroupVersionKind{Group: "monitoring.coreos.com", Version: "v1", Kind: "ServiceMonitor"}

// selectorLabels are the immutable labels that select a component's pods.
func selectorLabels(instance, component string) map[string]string {
	return map[string]string{
		kvapi.LabelName:      "bellows",
		kvapi.LabelInstance:  instance,
		kvapi.LabelComponent: component,
	}
}

// commonLabels are selectorLabels plus the informational ones.
func commonLabels(instance, component string) map[string]string {
	l := selectorLabels(instance, component)
	l[kvapi.LabelManagedBy] = kvapi.ManagedBy
	l[kvapi.LabelPartOf] = "bellows"
	return l
}

// hashOf is a short, stable hash of v's JSON encoding.
func hashOf(v any) string {
	data, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("hashOf: %v", err)) // only called on API types, which always marshal
	}
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])[:16]
}

// stampHash sets the spec-hash annotation of obj to the hash of what, which
// must describe everything the operator owns in obj.
func stampHash(obj metav1.Object, what any) {
	a := obj.GetAnnotations()
	if a == nil {
		a = map[string]string{}
	}
	delete(a, kvapi.SpecHashAnnotation)
	a[kvapi.SpecHashAnnotation] = hashOf(struct {
		Labels      map[string]string
		Annotations map[string]string
		What        any
	}{obj.GetLabels(), a, what})
	obj.SetAnnotations(a)
}

func specHash(obj metav1.Object) string { return obj.GetAnnotations()[kvapi.SpecHashAnnotation] }

// applyResult says what apply did.
type applyResult string

const (
	applyNone    applyResult = ""
	applyCreated applyResult = "Created"
	applyUpdated applyResult = "Updated"
)

// apply creates desired, or, when the existing object's spec-hash differs,
// copies desired onto it with update (which carries over what the API server
// owns, e.g. a Service's clusterIP) and writes it. existing must be an empty
// object of desired's type.
func apply(ctx context.Context, c client.Client, desired, existing client.Object, update func()) (applyResult, error) {
	err := c.Get(ctx, client.ObjectKeyFromObject(desired), existing)
	if apierrors.IsNotFound(err) {
		if err := c.Create(ctx, desired); err != nil {
			return applyNone, fmt.Errorf("create %T %s: %w", desired, desired.GetName(), err)
		}
		return applyCreated, nil
	}
	if err != nil {
		return applyNone, fmt.Errorf("get %T %s: %w", desired, desired.GetName(), err)
	}
	if specHash(existing) == specHash(desired) && metav1.IsControlledBy(existing, ownerOf(desired)) {
		return applyNone, nil
	}
	update()
	labels := existing.GetLabels()
	if labels == nil {
		labels = map[string]string{}
	}
	maps.Copy(labels, desired.GetLabels())
	existing.SetLabels(labels)
	ann := existing.GetAnnotations()
	if ann == nil {
		ann = map[string]string{}
	}
	maps.Copy(ann, desired.GetAnnotations())
	existing.SetAnnotations(ann)
	existing.SetOwnerReferences(desired.GetOwnerReferences())
	if err := c.Update(ctx, existing); err != nil {
		return applyNone, fmt.Errorf("update %T %s: %w", desired, desired.GetName(), err)
	}
	return applyUpdated, nil
}

// ownerOf returns a stand-in object carrying desired's controller UID, for
// metav1.IsControlledBy.
func ownerOf(desired metav1.Object) metav1.Object {
	o := &metav1.ObjectMeta{}
	if ref := metav1.GetControllerOf(desired); ref != nil {
		o.UID = ref.UID
	}
	return o
}

// serviceMonitorsAvailable reports whether the API server serves ServiceMonitors.
func serviceMonitorsAvailable(c client.Client) (bool, error) {
	_, err := c.RESTMapper().RESTMapping(ServiceMonitorGVK.GroupKind(), ServiceMonitorGVK.Version)
	if meta.IsNoMatchError(err) {
		return false, nil
	}
	return err == nil, err
}

// applyServiceMonitor writes sm when the CRD is installed; without it, it does
// nothing and returns false.
func applyServiceMonitor(ctx context.Context, c client.Client, sm *unstructured.Unstructured) (bool, applyResult, error) {
	ok, err := serviceMonitorsAvailable(c)
	if err != nil || !ok {
		return false, applyNone, err
	}
	existing := &unstructured.Unstructured{}
	existing.SetGroupVersionKind(ServiceMonitorGVK)
	res, err := apply(ctx, c, sm, existing, func() {
		existing.Object["spec"] = sm.Object["spec"]
	})
	return true, res, err
}

// setCondition sets a condition with the object's generation.
func setCondition(conds *[]metav1.Condition, gen int64, typ string, status bool, reason, msg string) {
	s := metav1.ConditionFalse
	if status {
		s = metav1.ConditionTrue
	}
	meta.SetStatusCondition(conds, metav1.Condition{Type: typ, Status: s, Reason: reason, Message: msg, ObservedGeneration: gen})
}

// imageUID is the non-root user of the bellows image (hack/image/ociimage.User).
const imageUID = int64(65532)

// podSecurityContext runs the stores and workers as the image's non-root user
// under the restricted Pod Security Standard. fsGroup makes a freshly
// provisioned volume (the stores' WAL PVC, root-owned on most provisioners)
// writable by that user.
func podSecurityContext() *corev1.PodSecurityContext {
	return &corev1.PodSecurityContext{
		RunAsNonRoot:        ptr.To(true),
		RunAsUser:           ptr.To(imageUID),
		RunAsGroup:          ptr.To(imageUID),
		FSGroup:             ptr.To(imageUID),
		FSGroupChangePolicy: ptr.To(corev1.FSGroupChangeOnRootMismatch),
		SeccompProfile:      &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
}

// containerSecurityContext: nothing is written outside the mounted volumes.
func containerSecurityContext() *corev1.SecurityContext {
	return &corev1.SecurityContext{
		AllowPrivilegeEscalation: ptr.To(false),
		ReadOnlyRootFilesystem:   ptr.To(true),
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
	}
}
