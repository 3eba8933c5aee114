package controllers

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kvapi "github.com/bellows-kv/bellows/api/v1alpha1"
	"github.com/bellows-kv/bellows/controllers/specs"
	"github.com/bellows-kv/bellows/internal/contract"
)

// checkRegionSplit compares the split size with the referenced pool's
// worker cache m. A split size above m does not stop the pass (the stores
// still run, and compact such a region themselves); it is reported by the
// RegionsFitWorkers condition and, once per distinct message, a Warning
// event.
func (r *KVClusterReconciler) checkRegionSplit(_ context.Context, p *kvPass) Result {
	msg, tooLarge := specs.RegionsTooLargeForWorkers(p.cluster, p.pool)
	p.splitChecked, p.regionsTooLarge = true, msg
	if !tooLarge {
		return Continue()
	}
	prev := meta.FindStatusCondition(p.orig.Status.Conditions, kvapi.ConditionRegionsFitWorkers)
	if prev == nil || prev.Reason != kvapi.ReasonRegionsTooLargeForWorkers || prev.Message != msg {
		r.Recorder.Eventf(p.cluster, nil, corev1.EventTypeWarning, kvapi.ReasonRegionsTooLargeForWorkers, "CheckRegionSplit", "%s", truncate(msg, maxEventNote))
	}
	return Continue()
}

// regionsCondition sets RegionsFitWorkers from the pass. A pass that
// stopped before the check (the pool could not be read) leaves it as it was.
func regionsCondition(p *kvPass) {
	if !p.splitChecked {
		return
	}
	c := p.cluster
	conds, gen := &c.Status.Conditions, c.Generation
	split := specs.RegionSplitOf(c, p.pool)
	switch {
	case p.regionsTooLarge != "":
		setCondition(conds, gen, kvapi.ConditionRegionsFitWorkers, false, kvapi.ReasonRegionsTooLargeForWorkers, p.regionsTooLarge)
	case c.Spec.CompactionPoolRef == nil:
		setCondition(conds, gen, kvapi.ConditionRegionsFitWorkers, true, kvapi.ReasonNoCompactionPool,
			fmt.Sprintf("no compactionPoolRef: compactions run in the stores; regions split at %s (%s)", sizeOrNever(split.Bytes), split.Source))
	case !p.poolFound:
		meta.SetStatusCondition(conds, metav1.Condition{Type: kvapi.ConditionRegionsFitWorkers, Status: metav1.ConditionUnknown,
			Reason: kvapi.ReasonCompactionPoolMissing, ObservedGeneration: gen,
			Message: fmt.Sprintf("CompactionPool %q does not exist, so its worker cache is unknown; regions split at %s (%s)",
				c.Spec.CompactionPoolRef.Name, sizeOrNever(split.Bytes), split.Source)})
	case c.Spec.Engine.Offload == kvapi.OffloadMode(contract.OffloadDisabled):
		setCondition(conds, gen, kvapi.ConditionRegionsFitWorkers, true, kvapi.ReasonOffloadDisabled,
			fmt.Sprintf("engine.offload is Disabled: compactions run in the stores; regions split at %s (%s)", sizeOrNever(split.Bytes), split.Source))
	default:
		setCondition(conds, gen, kvapi.ConditionRegionsFitWorkers, true, kvapi.ReasonAsExpected,
			fmt.Sprintf("regions split at %s (%s), within the worker cache m = %s of CompactionPool %q",
				sizeOrNever(split.Bytes), split.Source, p.pool.Spec.CacheBytes.String(), p.pool.Name))
	}
}

// sizeOrNever renders a split size for a message.
func sizeOrNever(n int64) string {
	if n == 0 {
		return "never (0)"
	}
	return resource.NewQuantity(n, resource.BinarySI).String()
}
