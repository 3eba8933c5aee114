package contract

// Label keys and values on every object the operator writes.
const (
	LabelName      = "app.kubernetes.io/name"
	LabelInstance  = "app.kubernetes.io/instance"
	LabelComponent = "app.kubernetes.io/component"
	LabelManagedBy = "app.kubernetes.io/managed-by"
	LabelPartOf    = "app.kubernetes.io/part-of"
	// LabelService tells a KVCluster's two Services apart: "headless" (the
	// stores' peers and what the ServiceMonitor scrapes) and "client".
	LabelService = "kv.bellows.dev/service"

	AppName            = "bellows"
	ComponentStore     = "store"
	ComponentCompactor = "compactor"
	// ComponentCA labels the namespace's CA Secret (docs/security.md).
	ComponentCA = "ca"
	// ComponentRestore: a KVCluster's restore Job (spec.bootstrap.recovery).
	ComponentRestore = "restore"
	// ComponentOperator labels the operator's pods, together with
	// LabelPartOf AppName (the chart's and config/manager's pod labels,
	// neither of which a release's name or nameOverride changes): the
	// NetworkPolicies the operator makes let pods labelled so, in its own
	// namespace, reach the metrics ports its autoscaler scrapes.
	ComponentOperator = "operator"
	ManagedBy         = "bellows-operator"
	ServiceHeadless   = "headless"
	ServiceClient     = "client"
)

// Annotations the operator reads or writes.
const (
	// PausedAnnotation, set to "true", makes the operator leave the resource and
	// its children alone (it only records the Paused reason in status).
	PausedAnnotation = "kv.bellows.dev/paused"
	// SpecHashAnnotation holds the hash of the desired state an object was last
	// written from; a different hash is drift.
	SpecHashAnnotation = "kv.bellows.dev/spec-hash"
	// ConfigHashAnnotation on a store pod template rolls the pods when
	// engine.yaml changes.
	ConfigHashAnnotation = "kv.bellows.dev/config-hash"
	// PodDeletionCostAnnotation is the ReplicaSet controller's hint: pods with a
	// lower cost are deleted first on scale-down.
	PodDeletionCostAnnotation = "controller.kubernetes.io/pod-deletion-cost"
	// ServingReplicasAnnotation on a KVCluster's StatefulSet, set to M
	// below its spec.replicas N, marks ordinals M … N-1 as leaving: the
	// stores read it (--replicas-from) and the balancer moves every region
	// off them; the operator shrinks the StatefulSet to M, and removes it,
	// once they hold none (docs/regions.md §5).
	ServingReplicasAnnotation = "kv.bellows.dev/serving-replicas"
	// DrainingSinceAnnotation on the StatefulSet is when the operator first
	// marked the drain (RFC 3339): the drain is bounded by StoreDrainTimeout
	// from then, across operator restarts.
	DrainingSinceAnnotation = "kv.bellows.dev/draining-since"
)

// LeaderElectionID is the Lease the operator replicas compete for.
const LeaderElectionID = "bellows-operator.kv.bellows.dev"
