package controllers

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"

	kvapi "github.com/bellows-kv/bellows/api/v1alpha1"
)

// checkClock parses spec.clock.maxOffset, which the StatefulSet step passes
// to every store. A value outside its bounds (stored before the CRD rule)
// stops the pass with InvalidSpec, so the pods keep the bound they run with.
// 0 with several stores does not stop it (the user may accept stale
// snapshots, or be about to scale down); it is reported by the
// ClockOffsetBounded condition and, once per distinct message, a Warning
// event.
func (r *KVClusterReconciler) checkClock(_ context.Context, p *kvPass) Result {
	d, err := p.cluster.Spec.MaxClockOffset()
	if err != nil {
		return Invalid(err)
	}
	p.clockChecked, p.maxClockOffset = true, d
	msg, off := clockChecksOff(p.cluster, d)
	if !off {
		return Continue()
	}
	prev := meta.FindStatusCondition(p.orig.Status.Conditions, kvapi.ConditionClockOffsetBounded)
	if prev == nil || prev.Reason != kvapi.ReasonClockChecksOff || prev.Message != msg {
		r.Recorder.Eventf(p.cluster, nil, corev1.EventTypeWarning, kvapi.ReasonClockChecksOff, "CheckClock", "%s", truncate(msg, maxEventNote))
	}
	return Continue()
}

// clockChecksOff says why a max offset of 0 endangers the cluster's
// transactions: with two stores or more, nothing restarts a read that a
// store whose clock runs behind started below a write already acknowledged.
func clockChecksOff(c *kvapi.KVCluster, d time.Duration) (message string, off bool) {
	if d != 0 || c.Spec.Replicas <= 1 {
		return "", false
	}
	return fmt.Sprintf("clock.maxOffset is 0: clock checks off with %d stores: transactions across stores may read stale snapshots "+
		"(a store whose clock runs behind starts them below writes already acknowledged), and no store refuses requests when its clock drifts; "+
		"set clock.maxOffset to the largest offset between the nodes' clocks, e.g. %s (the default)", c.Spec.Replicas, kvapi.DefaultMaxClockOffset), true
}

// clockCondition sets ClockOffsetBounded from the pass. A pass that stopped
// before the check leaves it as it was.
func clockCondition(p *kvPass) {
	if !p.clockChecked {
		return
	}
	c := p.cluster
	conds, gen := &c.Status.Conditions, c.Generation
	if msg, off := clockChecksOff(c, p.maxClockOffset); off {
		setCondition(conds, gen, kvapi.ConditionClockOffsetBounded, false, kvapi.ReasonClockChecksOff, msg)
		return
	}
	if p.maxClockOffset == 0 {
		setCondition(conds, gen, kvapi.ConditionClockOffsetBounded, true, kvapi.ReasonSingleStore,
			"clock.maxOffset is 0 (clock checks off) with one store, whose clock no peer can disagree with; set it before scaling to more stores")
		return
	}
	setCondition(conds, gen, kvapi.ConditionClockOffsetBounded, true, kvapi.ReasonAsExpected,
		fmt.Sprintf("the stores' clocks may be at most %s apart (clock.maxOffset): transactional reads restart within it, "+
			"and a store beyond 80%% of it from a majority of its peers refuses requests", p.maxClockOffset))
}
