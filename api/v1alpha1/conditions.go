package v1alpha1

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

// Annotations and labels the operator reads or writes.
const (
	// PausedAnnotation, set to "true", makes the operator leave the resource and
	// its children alone (it only records the Paused reason in status).
	PausedAnnotation = "kv.bellows.dev/paused"
	// SpecHashAnnotation holds the hash of the desired state an object was last
	// written from; a different hash is drift.
	SpecHashAnnotation = "kv.bellows.dev/spec-hash"
	// PodDeletionCostAnnotation is the ReplicaSet controller's hint: pods with a
	// lower cost are deleted first on scale-down.
	PodDeletionCostAnnotation = "controller.kubernetes.io/pod-deletion-cost"

	LabelName      = "app.kubernetes.io/name"
	LabelInstance  = "app.kubernetes.io/instance"
	LabelComponent = "app.kubernetes.io/component"
	LabelManagedBy = "app.kubernetes.io/managed-by"
	LabelPartOf    = "app.kubernetes.io/part-of"

	ComponentStore     = "store"
	ComponentCompactor = "compactor"
	ManagedBy          = "bellows-operator"
)

// IsPaused reports whether the pause annotation is set to "true".
func IsPaused(annotations map[string]string) bool {
	return annotations[PausedAnnotation] == "true"
}
