package controllers

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"

	kvapi "github.com/bellows-kv/bellows/api/v1alpha1"
	"github.com/bellows-kv/bellows/autoscaler"
)

// Replicas outside [minReplicas, maxReplicas] (written before maxReplicas
// was lowered, or by /scale where the CRD's rule does not reach) mean:
//
//   - Model mode: the operator owns spec.replicas, so it clamps them and
//     writes the clamped value back through /scale (a Normal event says so);
//     the Deployment never runs more than maxReplicas workers.
//   - External and Disabled modes: spec.replicas belong to the HPA, KEDA or
//     the user, and the operator does not overrule them: the Deployment
//     runs what spec.replicas says, and the operator reports the breach
//     (a Warning event once, and the ScalingActive condition's message).

// enforceBounds applies those semantics after the autoscaler's steps.
func (r *CompactionPoolReconciler) enforceBounds(ctx context.Context, p *poolPass) Result {
	pool := p.pool
	spec := pool.Spec
	current := pool.DesiredReplicasOrDefault()
	clamped := autoscaler.Clamp(int64(current), spec.MinReplicas, spec.MaxReplicas)
	if clamped == current {
		return Continue()
	}
	if spec.Autoscaling.Mode == kvapi.AutoscalingModel {
		if err := r.scale(ctx, pool, clamped); err != nil {
			r.autoscalerFailed(ctx, p, fmt.Errorf("clamp spec.replicas %d to [%d, %d]: %w", current, spec.MinReplicas, spec.MaxReplicas, err))
			return Continue()
		}
		r.Recorder.Eventf(pool, nil, corev1.EventTypeNormal, kvapi.ReasonReplicasClamped, "Scale",
			"spec.replicas %d is outside [minReplicas %d, maxReplicas %d]: set to %d (autoscaling.mode Model)", current, spec.MinReplicas, spec.MaxReplicas, clamped)
		pool.Spec.Replicas = &clamped
		return Continue()
	}
	p.autoscale.outOfBounds = fmt.Sprintf("spec.replicas %d is outside [minReplicas %d, maxReplicas %d]; autoscaling.mode %s leaves the size to %s, so the pool runs %d workers: change the autoscaler's bounds or the pool's",
		current, spec.MinReplicas, spec.MaxReplicas, spec.Autoscaling.Mode, sizeOwner(spec.Autoscaling.Mode), current)
	if prev := meta.FindStatusCondition(p.orig.Status.Conditions, kvapi.ConditionScalingActive); prev == nil || !strings.Contains(prev.Message, p.autoscale.outOfBounds) {
		r.Recorder.Eventf(pool, nil, corev1.EventTypeWarning, kvapi.ReasonReplicasOutOfBounds, "Scale", "%s", p.autoscale.outOfBounds)
	}
	return Continue()
}

func sizeOwner(m kvapi.AutoscalingMode) string {
	if m == kvapi.AutoscalingExternal {
		return "the external autoscaler (HPA or KEDA)"
	}
	return "the user"
}
