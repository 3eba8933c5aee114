package controllers

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"

	kvapi "github.com/bellows-kv/bellows/api/v1alpha1"
	"github.com/bellows-kv/bellows/controllers/specs"
)

// checkResources compares the memory limit the user set with what the
// engine settings need per storage pod. A shortfall does not stop the pass
// (the user may know the memstores never fill); it is reported by the
// ResourcesSufficient condition and, once per distinct message, a Warning
// event.
func (r *KVClusterReconciler) checkResources(_ context.Context, p *kvPass) Result {
	msg, short := specs.StoreMemoryShortfall(p.cluster, p.pool)
	p.memoryShortfall = msg
	if !short {
		return Continue()
	}
	prev := meta.FindStatusCondition(p.orig.Status.Conditions, kvapi.ConditionResourcesSufficient)
	if prev == nil || prev.Reason != kvapi.ReasonMemoryBelowEngineNeed || prev.Message != msg {
		r.Recorder.Eventf(p.cluster, nil, corev1.EventTypeWarning, kvapi.ReasonMemoryBelowEngineNeed, "CheckResources", "%s", msg)
	}
	return Continue()
}

// resourcesCondition sets ResourcesSufficient from the pass.
func resourcesCondition(p *kvPass) {
	c := p.cluster
	if p.memoryShortfall != "" {
		setCondition(&c.Status.Conditions, c.Generation, kvapi.ConditionResourcesSufficient, false, kvapi.ReasonMemoryBelowEngineNeed, p.memoryShortfall)
		return
	}
	msg := "the memory limit holds what the engine settings need: " + specs.StoreMemoryOf(c, p.pool).Explain(c)
	if _, ok := c.Spec.Resources.Limits[corev1.ResourceMemory]; !ok && !specs.ResourcesUnset(c.Spec.Resources) {
		msg = "no memory limit is set"
	}
	setCondition(&c.Status.Conditions, c.Generation, kvapi.ConditionResourcesSufficient, true, kvapi.ReasonAsExpected, msg)
}
