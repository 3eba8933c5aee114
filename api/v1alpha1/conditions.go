package v1alpha1

import "github.com/bellows-kv/bellows/internal/contract"

// Condition types shared by KVCluster and CompactionPool.
const (
	// ConditionReady is True when every replica runs the current spec and is Ready.
	ConditionReady = "Ready"
	// ConditionProgressing is True while the operator is moving the children
	// towards the spec (creating, rolling, scaling).
	ConditionProgressing = "Progressing"
	// ConditionDegraded is True when the operator cannot make progress on its own
	// (a reconcile step failed, a referenced object is missing).
	ConditionDegraded = "Degraded"
	// ConditionScalingActive is the autoscaler's condition on a CompactionPool:
	// True when the capacity model produced a recommendation, False with the
	// reason when it could not (infeasible model, missing metrics).
	ConditionScalingActive = "ScalingActive"
)

// Condition reasons.
const (
	ReasonReconciled            = "Reconciled"
	ReasonCreating              = "Creating"
	ReasonRollingUpdate         = "RollingUpdate"
	ReasonWaitingForRollout     = "WaitingForRollout"
	ReasonScaling               = "Scaling"
	ReasonPodsNotReady          = "PodsNotReady"
	ReasonPaused                = "Paused"
	ReasonReconcileError        = "ReconcileError"
	ReasonCompactionPoolMissing = "CompactionPoolNotFound"
	ReasonAsExpected            = "AsExpected"

	ReasonModelRecommendation = "ModelRecommendation"
	ReasonModelInfeasible     = "ModelInfeasible"
	ReasonMetricsUnavailable  = "MetricsUnavailable"
	ReasonExternallyScaled    = "ExternallyScaled"
	ReasonAutoscalingDisabled = "AutoscalingDisabled"
)

// isPaused reports whether the pause annotation (contract.PausedAnnotation)
// is set to "true".
func isPaused(annotations map[string]string) bool {
	return annotations[contract.PausedAnnotation] == "true"
}
