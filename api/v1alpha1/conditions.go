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
	// ConditionResourcesSufficient is a KVCluster's: False when the memory
	// limit the user set is below what the engine settings need per pod.
	ConditionResourcesSufficient = "ResourcesSufficient"
	// ConditionRegionsFitWorkers is a KVCluster's: False when its split
	// size lets a region grow into a major compaction larger than the
	// worker cache of the CompactionPool it references (no worker admits
	// the job, which then runs in the store).
	ConditionRegionsFitWorkers = "RegionsFitWorkers"
	// ConditionClockOffsetBounded is a KVCluster's: False when
	// spec.clock.maxOffset is 0 and there are several stores, whose clocks
	// then nothing holds together (docs/clock.md).
	ConditionClockOffsetBounded = "ClockOffsetBounded"
	// ConditionStoreLost is a KVCluster's: True while a storage pod lost
	// with its node or its volume is being replaced (reason StoreReplaced)
	// or waits for a person (reason ManualActionRequired); False otherwise,
	// with reason NodeNotReady while a pod's node is NotReady but not yet
	// for contract.StoreNodeLostAfter (docs/failover.md §6).
	ConditionStoreLost = "StoreLost"
	// ConditionFailingOver is a KVCluster's: True while regions have no
	// live owner (reason RegionsWithoutLiveOwner): the region map gives
	// them to a store whose liveness lease ran out, and the balancer is
	// about to move them (docs/failover.md §5); requests for them are
	// retried until it has. False with reason EveryRegionOwned once the
	// balancer's store says none is left; Unknown (reason
	// StoresUnanswered) when no Ready storage pod says.
	ConditionFailingOver = "FailingOver"
	// ConditionCompleted is a Backup's: True once the backup is recorded in
	// the bucket.
	ConditionCompleted = "Completed"
)

// Condition reasons.
const (
	ReasonReconciled        = "Reconciled"
	ReasonCreating          = "Creating"
	ReasonRollingUpdate     = "RollingUpdate"
	ReasonWaitingForRollout = "WaitingForRollout"
	ReasonScaling           = "Scaling"
	ReasonPodsNotReady      = "PodsNotReady"
	ReasonPaused            = "Paused"
	ReasonReconcileError    = "ReconcileError"
	// ReasonInvalidSpec: the stored spec has a value the operator cannot use
	// (e.g. written before the CRD rule that now rejects it); only a new
	// spec fixes it.
	ReasonInvalidSpec           = "InvalidSpec"
	ReasonCompactionPoolMissing = "CompactionPoolNotFound"
	// ReasonTLSMismatch: the cluster and its pool disagree on TLS, so no
	// store can hand the workers a job.
	ReasonTLSMismatch           = "TLSMismatch"
	ReasonAsExpected            = "AsExpected"
	ReasonMemoryBelowEngineNeed = "MemoryLimitBelowEngineNeed"
	// ReasonRegionsTooLargeForWorkers: RegionsFitWorkers is False (and a
	// Warning event of this reason says why).
	ReasonRegionsTooLargeForWorkers = "RegionsTooLargeForWorkers"
	// ReasonOffloadDisabled: compactions run in the stores, so a region's
	// size is not held against a worker's cache.
	ReasonOffloadDisabled = "OffloadDisabled"
	// ReasonNoCompactionPool: the cluster references no CompactionPool.
	ReasonNoCompactionPool = "NoCompactionPool"
	// ReasonClockChecksOff: ClockOffsetBounded is False (and a Warning
	// event of this reason says why).
	ReasonClockChecksOff = "ClockChecksOff"
	// A Backup's reasons (condition Completed, and events).
	ReasonClusterNotFound  = "ClusterNotFound"
	ReasonClusterNotReady  = "ClusterNotReady"
	ReasonBackupRunning    = "BackupRunning"
	ReasonBackupCompleted  = "BackupCompleted"
	ReasonBackupFailed     = "BackupFailed"
	ReasonStoreUnavailable = "StoreUnavailable"
	// ReasonRestoring: a KVCluster's Progressing while its restore Job
	// (spec.bootstrap.recovery) runs.
	ReasonRestoring = "Restoring"
	// A ScheduledBackup's reasons (condition Ready, and events).
	ReasonInvalidSchedule = "InvalidSchedule"
	ReasonScheduled       = "Scheduled"
	ReasonSuspended       = "Suspended"
	ReasonBackupsPruned   = "BackupsPruned"
	// ReasonSingleStore: clock.maxOffset is 0, but one store has one clock
	// and no peer to disagree with.
	ReasonSingleStore = "SingleStore"

	ReasonModelRecommendation = "ModelRecommendation"
	ReasonModelInfeasible     = "ModelInfeasible"
	ReasonMetricsUnavailable  = "MetricsUnavailable"
	ReasonExternallyScaled    = "ExternallyScaled"
	ReasonAutoscalingDisabled = "AutoscalingDisabled"
	ReasonReplicasClamped     = "ReplicasClamped"
	ReasonReplicasOutOfBounds = "ReplicasOutOfBounds"
)

// Reasons of a KVCluster's rollout that cannot finish on its own.
const (
	// ReasonRolloutStuck: a pod of the StatefulSet's update revision cannot
	// become Ready (its image cannot be pulled, it crash-loops, or it has not
	// been Ready for contract.RolloutProgressDeadline). Progressing is False:
	// only a newer spec gets the rollout going again.
	ReasonRolloutStuck = "RolloutStuck"
	// ReasonRolloutReplaced: a newer spec was written over a stuck rollout,
	// and the pods stuck on the superseded revision are deleted so that the
	// StatefulSet recreates them from the newer one.
	ReasonRolloutReplaced = "RolloutReplaced"
	// ReasonDraining: spec.replicas dropped below the StatefulSet's; the
	// operator keeps the leaving stores until the balancer has moved their
	// regions off (Progressing True; the message names the leaving
	// ordinals and what they still hold). docs/regions.md §5.
	ReasonDraining = "Draining"
	// ReasonDrained (event): the leaving stores held no region and the
	// StatefulSet shrank.
	ReasonDrained = "Drained"
	// ReasonStoreReplaced: a storage pod whose node was lost, or whose PVC
	// is gone, was deleted (force-deleted when no kubelet runs its grace
	// period), and with it the PVC of a volume that could not follow it,
	// so that the StatefulSet recreates it; StoreLost stays True until
	// every storage pod is Ready (and a Warning event of this reason says
	// what was done to which pod).
	ReasonStoreReplaced = "StoreReplaced"
	// ReasonManualActionRequired: a storage pod was lost with a volume
	// that may hold acknowledged writes no bucket has (durability.mode
	// Local), so the operator leaves the pod and its PVC alone: StoreLost
	// and Degraded are True, a Warning event says what a person can do.
	ReasonManualActionRequired = "ManualActionRequired"
	// ReasonNodeNotReady: StoreLost is False, but a storage pod's node is
	// NotReady (or unreachable); the message says when its pod counts as
	// lost.
	ReasonNodeNotReady = "NodeNotReady"
	// ReasonRegionsWithoutLiveOwner: FailingOver is True; the message
	// counts the regions and names the pod whose balancer found them.
	ReasonRegionsWithoutLiveOwner = "RegionsWithoutLiveOwner"
	// ReasonEveryRegionOwned: FailingOver is False.
	ReasonEveryRegionOwned = "EveryRegionOwned"
	// ReasonFailoverDone (event): FailingOver went from True to False.
	ReasonFailoverDone = "FailoverDone"
	// ReasonStoresUnanswered: FailingOver is Unknown: no Ready storage pod
	// answered (the message says why each did not).
	ReasonStoresUnanswered = "StoresUnanswered"
	// ReasonDrainTimedOut (Warning event): the leaving stores still held
	// regions after contract.StoreDrainTimeout and the StatefulSet shrank
	// anyway; their regions fall back to their slots' stores.
	ReasonDrainTimedOut = "DrainTimedOut"
)

// isPaused reports whether the pause annotation (contract.PausedAnnotation)
// is set to "true".
func isPaused(annotations map[string]string) bool {
	return annotations[contract.PausedAnnotation] == "true"
}
