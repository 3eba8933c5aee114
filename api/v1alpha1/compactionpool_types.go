package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// AutoscalingMode says who writes spec.replicas.
// +kubebuilder:validation:Enum=Model;External;Disabled
type AutoscalingMode string

const (
	// AutoscalingModel: the operator sizes the pool with the capacity model and
	// writes spec.replicas through the /scale subresource.
	AutoscalingModel AutoscalingMode = "Model"
	// AutoscalingExternal: an HPA or KEDA owns spec.replicas; the operator only
	// publishes its recommendation (status and metric).
	AutoscalingExternal AutoscalingMode = "External"
	// AutoscalingDisabled: nobody but the user changes spec.replicas.
	AutoscalingDisabled AutoscalingMode = "Disabled"
)

// The rules of CompactionPoolSpec. Where a message names a default, it is
// that of a side the user may not have written: defaults are applied before
// validation, so a rule cannot tell (TestCRDMessagesNameTheDefaults keeps
// those numbers in step with the schema). The replicas rule is a transition
// rule: it refuses only a write that sets replicas above maxReplicas, so
// that lowering maxReplicas below the current replicas stays possible (see
// MaxReplicas). It holds for writes through /scale too
// (TestReplicasAboveMaxReplicas).
//
// +kubebuilder:validation:XValidation:rule=`self.minReplicas <= self.maxReplicas`,fieldPath=`.minReplicas`,messageExpression=`'minReplicas %d is greater than maxReplicas %d%s: lower minReplicas, or set maxReplicas to at least %d'.format([self.minReplicas, self.maxReplicas, self.maxReplicas == 10 ? ' (the default)' : '', self.minReplicas])`
// +kubebuilder:validation:XValidation:rule=`!has(self.replicas) || self.replicas <= self.maxReplicas || (oldSelf.hasValue() && has(oldSelf.value().replicas) && oldSelf.value().replicas == self.replicas)`,optionalOldSelf=true,fieldPath=`.replicas`,messageExpression=`'replicas %d is greater than maxReplicas %d%s: scale to at most %d, or raise maxReplicas first'.format([self.replicas, self.maxReplicas, self.maxReplicas == 10 ? ' (the default)' : '', self.maxReplicas])`
// +kubebuilder:validation:XValidation:rule=`!has(self.resources) || !has(self.resources.limits) || !('memory' in self.resources.limits) || !has(self.cacheBytes) || !isQuantity(string(self.resources.limits['memory'])) || !isQuantity(string(self.cacheBytes)) || quantity(string(self.resources.limits['memory'])).isGreaterThan(quantity(string(self.cacheBytes)))`,fieldPath=`.resources.limits`,messageExpression=`'resources.limits.memory %s must be greater than cacheBytes %s%s: a worker keeps up to cacheBytes of compaction output in memory, besides its own; raise the limit or lower cacheBytes'.format([string(self.resources.limits['memory']), string(self.cacheBytes), quantity(string(self.cacheBytes)).compareTo(quantity('6Gi')) == 0 ? ' (the default)' : ''])`

// CompactionPoolSpec is the desired state of a pool of compaction workers.
type CompactionPoolSpec struct {
	// Replicas is the current size of the pool. The /scale subresource reads
	// and writes it; in Model mode the operator sets it.
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1000
	// +optional
	Replicas *int32 `json:"replicas,omitempty"`

	// MinReplicas is the autoscaler's lower bound.
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1000
	// +optional
	MinReplicas int32 `json:"minReplicas"`

	// MaxReplicas is the autoscaler's upper bound. A write that sets replicas
	// above it is refused, through /scale too; lowering it below the current
	// replicas is accepted: in Model mode the operator clamps replicas to it
	// at once; in External and Disabled mode the pool keeps its size, which
	// the operator reports, until the HPA, KEDA or the user writes replicas
	// (at most maxReplicas).
	// +kubebuilder:default=10
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000
	// +optional
	MaxReplicas int32 `json:"maxReplicas,omitempty"`

	// Image is the bellows container image (it runs `bellows compactor`).
	// Empty means the operator's default image: the operator's own version
	// (operator --default-image), so the pods match the operator that
	// manages them and an operator upgrade rolls them to its version.
	// Set it to pin a version.
	// +optional
	Image string `json:"image,omitempty"`

	// ImagePullPolicy of the workers.
	// +kubebuilder:validation:Enum=Always;IfNotPresent;Never
	// +optional
	ImagePullPolicy corev1.PullPolicy `json:"imagePullPolicy,omitempty"`

	// TLS is the transport security of the workers' ports. It must match
	// that of the KVClusters that offload here.
	// +kubebuilder:default={mode: Operator}
	// +optional
	TLS TLSSpec `json:"tls,omitzero"`

	// Resources of the compactor container. When empty, the operator requests
	// cacheBytes plus the worker's working memory (docs/defaults.md).
	// +optional
	Resources corev1.ResourceRequirements `json:"resources,omitempty"`

	// Scheduling places the pods. When affinity and topologySpreadConstraints
	// are not set, the operator spreads the pods over nodes and zones
	// (preferred, so a single-node cluster still schedules them); set
	// `affinity: {}` or `topologySpreadConstraints: []` to opt out.
	// +optional
	Scheduling SchedulingSpec `json:"scheduling,omitzero"`

	// CacheBytes is m: the memory each worker keeps compaction output in.
	// +kubebuilder:default="6Gi"
	// +kubebuilder:validation:XValidation:rule=`isQuantity(string(self)) && quantity(string(self)).isGreaterThan(quantity('0'))`,messageExpression=`!isQuantity(string(self)) ? 'cacheBytes: "' + string(self) + '" is not a quantity; write bytes with a unit, e.g. 6Gi or 512Mi' : 'cacheBytes: ' + string(self) + ' must be greater than zero, e.g. 6Gi'`
	// +optional
	CacheBytes resource.Quantity `json:"cacheBytes,omitzero"`

	// TransferRateBytesPerSecond is w: the throttled rate at which a worker
	// streams compacted blocks back to a store.
	// +kubebuilder:default=8000000
	// +kubebuilder:validation:Minimum=1
	// +optional
	TransferRateBytesPerSecond int64 `json:"transferRateBytesPerSecond,omitempty"`

	// Bucket gives the workers access to the buckets of the clusters they
	// compact for: every job names its bucket URL, and a worker opens it with
	// these credentials (the same Secret as the KVCluster's
	// bucket.credentialsSecretRef, for S3-compatible stores).
	// +optional
	Bucket PoolBucketSpec `json:"bucket,omitzero"`

	// DrainTimeout bounds how long a worker being removed waits (in preStop)
	// for its in-flight compactions. The pod's grace period is this plus 30s.
	// +kubebuilder:default="10m"
	// +kubebuilder:validation:XValidation:rule=`self.matches('^[-+]?(0|(([0-9]+([.][0-9]*)?|[.][0-9]+)(ns|us|ms|s|m|h))+)$') && duration(self) >= duration('1s')`,messageExpression=`!self.matches('^[-+]?(0|(([0-9]+([.][0-9]*)?|[.][0-9]+)(ns|us|ms|s|m|h))+)$') ? 'drainTimeout: "' + self + '" is not a duration; ' + (self.matches('[0-9]d') ? 'use hours, e.g. 24h for a day' : 'write a number with a unit (h, m, s), e.g. 10m or 1h30m') : 'drainTimeout: ' + self + ' is below the minimum 1s: a worker being removed needs time to hand back its compactions; e.g. 10m'`
	// +optional
	DrainTimeout Duration `json:"drainTimeout,omitempty"`

	// Autoscaling configures who sizes the pool and how.
	// +kubebuilder:default={mode: Model}
	// +optional
	Autoscaling AutoscalingSpec `json:"autoscaling,omitzero"`
}

// PoolBucketSpec is how a pool's workers authenticate to the buckets.
type PoolBucketSpec struct {
	// CredentialsSecretRef names a Secret, in the pool's namespace, whose keys
	// become the workers' environment (e.g. AWS_ACCESS_KEY_ID,
	// AWS_SECRET_ACCESS_KEY, AWS_REGION).
	// +kubebuilder:validation:XValidation:rule=`has(self.name) && size(self.name) <= 253 && self.name.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*$')`,messageExpression=`!has(self.name) || self.name == '' ? 'bucket.credentialsSecretRef.name is empty: name the Secret with the bucket credentials, e.g. s3-credentials, or leave credentialsSecretRef out' : 'bucket.credentialsSecretRef.name: "' + self.name + '" is not a Secret name: use lowercase letters, digits, - and ., e.g. s3-credentials'`
	// +optional
	CredentialsSecretRef *corev1.LocalObjectReference `json:"credentialsSecretRef,omitempty"`
}

// AutoscalingSpec configures the capacity-model autoscaler.
type AutoscalingSpec struct {
	// Mode: Model (the operator writes spec.replicas), External (an HPA or KEDA
	// does; the operator only recommends) or Disabled.
	// +kubebuilder:default=Model
	// +optional
	Mode AutoscalingMode `json:"mode,omitempty"`

	// Interval is t of the capacity model: compaction demand T is counted per
	// interval, and h is the compactions one worker completes per interval.
	// +kubebuilder:default="1h"
	// +kubebuilder:validation:XValidation:rule=`self.matches('^[-+]?(0|(([0-9]+([.][0-9]*)?|[.][0-9]+)(ns|us|ms|s|m|h))+)$') && duration(self) >= duration('1s')`,messageExpression=`!self.matches('^[-+]?(0|(([0-9]+([.][0-9]*)?|[.][0-9]+)(ns|us|ms|s|m|h))+)$') ? 'autoscaling.interval: "' + self + '" is not a duration; ' + (self.matches('[0-9]d') ? 'use hours, e.g. 24h for a day' : 'write a number with a unit (h, m, s), e.g. 10m or 1h30m') : 'autoscaling.interval: ' + self + ' is below the minimum 1s: the model counts demand per interval, in whole seconds; e.g. 1h'`
	// +optional
	Interval Duration `json:"interval,omitempty"`

	// SyncPeriod is how often the autoscaler re-evaluates the model.
	// +kubebuilder:default="30s"
	// +kubebuilder:validation:XValidation:rule=`self.matches('^[-+]?(0|(([0-9]+([.][0-9]*)?|[.][0-9]+)(ns|us|ms|s|m|h))+)$') && duration(self) >= duration('1s')`,messageExpression=`!self.matches('^[-+]?(0|(([0-9]+([.][0-9]*)?|[.][0-9]+)(ns|us|ms|s|m|h))+)$') ? 'autoscaling.syncPeriod: "' + self + '" is not a duration; ' + (self.matches('[0-9]d') ? 'use hours, e.g. 24h for a day' : 'write a number with a unit (h, m, s), e.g. 10m or 1h30m') : 'autoscaling.syncPeriod: ' + self + ' is below the minimum 1s: the autoscaler would re-evaluate without pause; e.g. 30s'`
	// +optional
	SyncPeriod Duration `json:"syncPeriod,omitempty"`

	// ScaleUpStabilizationWindow: scale up only to the lowest recommendation
	// seen within this window.
	// +kubebuilder:default="0s"
	// +kubebuilder:validation:XValidation:rule=`self.matches('^[-+]?(0|(([0-9]+([.][0-9]*)?|[.][0-9]+)(ns|us|ms|s|m|h))+)$') && duration(self) >= duration('0s')`,messageExpression=`!self.matches('^[-+]?(0|(([0-9]+([.][0-9]*)?|[.][0-9]+)(ns|us|ms|s|m|h))+)$') ? 'autoscaling.scaleUpStabilizationWindow: "' + self + '" is not a duration; ' + (self.matches('[0-9]d') ? 'use hours, e.g. 24h for a day' : 'write a number with a unit (h, m, s), e.g. 10m or 1h30m') : 'autoscaling.scaleUpStabilizationWindow: ' + self + ' is negative; write 0s for no window, or e.g. 3m'`
	// +optional
	ScaleUpStabilizationWindow Duration `json:"scaleUpStabilizationWindow,omitempty"`

	// ScaleDownStabilizationWindow: scale down only to the highest
	// recommendation seen within this window.
	// +kubebuilder:default="5m"
	// +kubebuilder:validation:XValidation:rule=`self.matches('^[-+]?(0|(([0-9]+([.][0-9]*)?|[.][0-9]+)(ns|us|ms|s|m|h))+)$') && duration(self) >= duration('0s')`,messageExpression=`!self.matches('^[-+]?(0|(([0-9]+([.][0-9]*)?|[.][0-9]+)(ns|us|ms|s|m|h))+)$') ? 'autoscaling.scaleDownStabilizationWindow: "' + self + '" is not a duration; ' + (self.matches('[0-9]d') ? 'use hours, e.g. 24h for a day' : 'write a number with a unit (h, m, s), e.g. 10m or 1h30m') : 'autoscaling.scaleDownStabilizationWindow: ' + self + ' is negative; write 0s for no window, or e.g. 5m'`
	// +optional
	ScaleDownStabilizationWindow Duration `json:"scaleDownStabilizationWindow,omitempty"`

	// MaxCompactionWait bounds how long a wanted compaction should wait to
	// start. While the stores' oldest wait exceeds it (and until the wait
	// falls below half of it), the autoscaler adds the workers that pay the
	// stores' compaction debt (bellows_compaction_debt_bytes) within this
	// bound to the model's steady answer.
	// +kubebuilder:default="1m"
	// +kubebuilder:validation:XValidation:rule=`self.matches('^[-+]?(0|(([0-9]+([.][0-9]*)?|[.][0-9]+)(ns|us|ms|s|m|h))+)$') && duration(self) >= duration('1s')`,messageExpression=`!self.matches('^[-+]?(0|(([0-9]+([.][0-9]*)?|[.][0-9]+)(ns|us|ms|s|m|h))+)$') ? 'autoscaling.maxCompactionWait: "' + self + '" is not a duration; ' + (self.matches('[0-9]d') ? 'use hours, e.g. 24h for a day' : 'write a number with a unit (h, m, s), e.g. 10m or 1h30m') : 'autoscaling.maxCompactionWait: ' + self + ' is below the minimum 1s; e.g. 1m'`
	// +optional
	MaxCompactionWait Duration `json:"maxCompactionWait,omitempty"`
}

// CompactionPoolStatus is the observed state of a CompactionPool.
type CompactionPoolStatus struct {
	// ObservedGeneration is the generation this status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// Replicas is the number of worker pods (the /scale subresource's status.replicas).
	// +optional
	Replicas int32 `json:"replicas"`
	// ReadyReplicas is the number of Ready workers.
	// +optional
	ReadyReplicas int32 `json:"readyReplicas,omitempty"`
	// Selector is the label selector of the worker pods, as a string (for /scale).
	// +optional
	Selector string `json:"selector,omitempty"`

	// DesiredReplicas is the autoscaler's recommendation after clamping and
	// stabilization. In Model mode the operator applies it; in External mode
	// it is only published.
	// +optional
	DesiredReplicas *int32 `json:"desiredReplicas,omitempty"`

	// Autoscaler records every input and output of the last model evaluation.
	// +optional
	Autoscaler *AutoscalerStatus `json:"autoscaler,omitempty"`

	// Conditions: Ready, Progressing, Degraded, ScalingActive.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// AutoscalerStatus is one evaluation of the capacity model. Rates and
// fractional values are decimal strings (CRDs avoid floats).
type AutoscalerStatus struct {
	// LastEvaluationTime is when the model last ran.
	LastEvaluationTime metav1.Time `json:"lastEvaluationTime"`
	// Inputs of the model.
	Inputs ModelInputs `json:"inputs"`
	// Outputs of the model (absent when it was infeasible).
	// +optional
	Outputs *ModelOutputs `json:"outputs,omitempty"`
	// Recommendations within the longest stabilization window, newest last.
	// +listType=atomic
	// +optional
	Recommendations []Recommendation `json:"recommendations,omitempty"`
}

// ModelInputs are the measured and configured inputs of the capacity model.
type ModelInputs struct {
	// CompactionRateBytesPerSecond is c, measured by the workers.
	CompactionRateBytesPerSecond string `json:"compactionRateBytesPerSecond"`
	// TransferRateBytesPerSecond is w, measured by the workers (the spec's throttle when unmeasured).
	TransferRateBytesPerSecond string `json:"transferRateBytesPerSecond"`
	// CacheBytes is m, from the spec.
	CacheBytes int64 `json:"cacheBytes"`
	// CompactionSizeBytes is b, the average requested compaction size measured by the stores.
	CompactionSizeBytes string `json:"compactionSizeBytes"`
	// CompactionsPerRegion is T, compactions requested per region per interval.
	CompactionsPerRegion string `json:"compactionsPerRegion"`
	// IntervalSeconds is t.
	IntervalSeconds int64 `json:"intervalSeconds"`
	// Regions is R, summed over the KVClusters that reference this pool.
	Regions int32 `json:"regions"`
	// Backlog is the backlog term: the compactions queued on the stores
	// (requested, not started) when the queue grew since the previous
	// evaluation, else 0.
	Backlog string `json:"backlog"`
	// Queued is the compactions queued on the stores at this evaluation,
	// kept to tell whether the queue grows at the next one.
	// +optional
	Queued string `json:"queued,omitempty"`
	// CompactionDebtBytes is the stores' compaction debt at this
	// evaluation: the bytes their policies want compacted and are not
	// getting.
	// +optional
	CompactionDebtBytes string `json:"compactionDebtBytes,omitempty"`
	// OldestCompactionWaitSeconds is how long the oldest wanted compaction
	// of any store had waited to start at this evaluation.
	// +optional
	OldestCompactionWaitSeconds string `json:"oldestCompactionWaitSeconds,omitempty"`
	// ChargedDebtBytes is the debt the model was charged: the stores' debt
	// while the oldest wait exceeds maxCompactionWait (or, once charged,
	// half of it), else 0.
	// +optional
	ChargedDebtBytes string `json:"chargedDebtBytes,omitempty"`
	// TransfersOutput is true when some KVCluster that references this pool
	// streams compaction output from the workers (its warmup mode is not
	// None, Offload or WriteThrough): only then is D charged b/w.
	// +optional
	TransfersOutput bool `json:"transfersOutput,omitempty"`
}

// ModelOutputs are the capacity model's results.
type ModelOutputs struct {
	// CompactionDurationSeconds is D(b) = b/c + b/w.
	CompactionDurationSeconds string `json:"compactionDurationSeconds"`
	// ConcurrentJobsPerWorker is l = ⌊m/b⌋.
	ConcurrentJobsPerWorker int64 `json:"concurrentJobsPerWorker"`
	// CompactionsPerWorker is h = (t/D)·l.
	CompactionsPerWorker string `json:"compactionsPerWorker"`
	// RegionsPerWorker is ⌊h/T⌋ (absent with zero demand: unbounded).
	// +optional
	RegionsPerWorker *int64 `json:"regionsPerWorker,omitempty"`
	// ModelReplicas is ⌈R/⌊h/T⌋⌉.
	ModelReplicas int32 `json:"modelReplicas"`
	// BacklogReplicas is the extra workers to drain the backlog within one interval.
	BacklogReplicas int32 `json:"backlogReplicas"`
	// DebtReplicas is the extra workers that pay the charged debt within
	// maxCompactionWait.
	// +optional
	DebtReplicas int32 `json:"debtReplicas,omitempty"`
	// RecommendedReplicas is ModelReplicas + max(BacklogReplicas,
	// DebtReplicas) clamped to [min, max].
	RecommendedReplicas int32 `json:"recommendedReplicas"`
}

// Recommendation is one clamped recommendation, kept for stabilization.
type Recommendation struct {
	Time     metav1.Time `json:"time"`
	Replicas int32       `json:"replicas"`
}

// The name rules keep the name of every child of the pool valid
// (MaxCompactionPoolNameLength).
//
// +kubebuilder:validation:XValidation:rule=`size(self.metadata.name) <= 53`,messageExpression=`'metadata.name: "%s" has %d characters; a CompactionPool name may have at most 53, as its Service <name>-compactor must be a DNS label of at most 63: choose a shorter name'.format([self.metadata.name, size(self.metadata.name)])`
// +kubebuilder:validation:XValidation:rule=`self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')`,messageExpression=`'metadata.name: "' + self.metadata.name + '" cannot name the Service <name>-compactor of the pool: use lowercase letters, digits and -, starting with a letter, e.g. workers'`

// CompactionPool is an autoscaled pool of compaction workers.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:subresource:scale:specpath=.spec.replicas,statuspath=.status.replicas,selectorpath=.status.selector
// +kubebuilder:resource:shortName=cpool;cp,categories=bellows
// +kubebuilder:printcolumn:name="Replicas",type=integer,JSONPath=`.spec.replicas`
// +kubebuilder:printcolumn:name="Ready",type=integer,JSONPath=`.status.readyReplicas`
// +kubebuilder:printcolumn:name="Desired",type=integer,JSONPath=`.status.desiredReplicas`
// +kubebuilder:printcolumn:name="Min",type=integer,JSONPath=`.spec.minReplicas`,priority=1
// +kubebuilder:printcolumn:name="Max",type=integer,JSONPath=`.spec.maxReplicas`,priority=1
// +kubebuilder:printcolumn:name="Mode",type=string,JSONPath=`.spec.autoscaling.mode`
// +kubebuilder:printcolumn:name="Status",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type CompactionPool struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   CompactionPoolSpec   `json:"spec"`
	Status CompactionPoolStatus `json:"status,omitempty"`
}

// CompactionPoolList is a list of CompactionPools.
//
// +kubebuilder:object:root=true
type CompactionPoolList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []CompactionPool `json:"items"`
}
