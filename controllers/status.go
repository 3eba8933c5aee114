package controllers

import (
	"context"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kvapi "github.com/bellows-kv/bellows/api/v1alpha1"
	"github.com/bellows-kv/bellows/controllers/specs"
)

// setCondition sets a condition with the object's generation.
func setCondition(conds *[]metav1.Condition, gen int64, typ string, status bool, reason, msg string) {
	s := metav1.ConditionFalse
	if status {
		s = metav1.ConditionTrue
	}
	meta.SetStatusCondition(conds, metav1.Condition{Type: typ, Status: s, Reason: reason, Message: msg, ObservedGeneration: gen})
}

// pausedStatus records a paused pass: Progressing=False/Paused and the
// observed generation, nothing else. It reports whether outcome is the pause.
func pausedStatus(conds *[]metav1.Condition, observedGeneration *int64, gen int64, outcome Result) bool {
	if !outcome.Waiting(kvapi.ReasonPaused) {
		return false
	}
	setCondition(conds, gen, kvapi.ConditionProgressing, false, kvapi.ReasonPaused, outcome.message)
	*observedGeneration = gen
	return true
}

// patchStatus writes cur's status over orig's through the status
// subresource when it differs. status points into an object's status.
func patchStatus[O client.Object, S any](ctx context.Context, c client.Client, orig, cur O, status func(O) *S) error {
	if equalJSON(*status(orig), *status(cur)) {
		return nil
	}
	patched := orig.DeepCopyObject().(O)
	*status(patched) = *status(cur)
	return client.IgnoreNotFound(c.Status().Patch(ctx, patched, client.MergeFrom(orig)))
}

func equalJSON(a, b any) bool { return specs.HashOf(a) == specs.HashOf(b) }
