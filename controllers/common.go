package controllers

import (
	"context"
	"fmt"
	"maps"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/bellows-kv/bellows/controllers/specs"
)

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
	if specs.SpecHash(existing) == specs.SpecHash(desired) && metav1.IsControlledBy(existing, ownerOf(desired)) {
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
	_, err := c.RESTMapper().RESTMapping(specs.ServiceMonitorGVK.GroupKind(), specs.ServiceMonitorGVK.Version)
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
	existing.SetGroupVersionKind(specs.ServiceMonitorGVK)
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
