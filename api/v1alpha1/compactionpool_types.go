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

// CompactionPoolSpec is the desired state of a pool of compaction workers.
//
// +kubebuilder:validation:XValidation:rule="self.minReplicas <= self.maxReplicas",message="minReplicas must be less than or equal to maxReplicas"
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

	// MaxReplicas is the autoscaler's upper bound.
	// +kubebuilder:default=10
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000
	// +optional
	MaxReplicas int32 `json:"maxReplicas,omitempty"`

	// Image is the bellows container image (it runs `bellows compactor`).
	// +kubebuilder:default="ghcr.io/bellows-kv/bellows:latest"
	// +kubebuilder:validation:MinLength=1
	// +optional
	Image string `json:"image,omitempty"`

	// ImagePullPolicy of the workers.
	// +kubebuilder:validation:Enum=Always;IfNotPresent;Never
	// +optional
	ImagePullPolicy corev1.PullPolicy `json:"imagePullPolicy,omitempty"`

	// Resources of the compactor container. The memory limit should exceed cacheBytes.
	// +optional
	Resources corev1.ResourceRequirements `json:"resources,omitempty"`

	// CacheBytes is m: the memory each worker keeps compaction output in.
	// +kubebuilder:default="6Gi"
	// +kubebuilder:validation:XValidation:rule="quantity(string(self)).isGreaterThan(quantity('0'))",message="cacheBytes must be greater than zero"
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
	// +optional
	DrainTimeout metav1.Duration `json:"drainTimeout,omitzero"`

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
	// +optional
	Interval metav1.Duration `json:"interval,omitzero"`

	// SyncPeriod is how often the autoscaler re-evaluates the model.
	// +kubebuilder:default="30s"
	// +optional
	SyncPeriod metav1.Duration `json:"syncPeriod,omitzero"`

	// ScaleUpStabilizationWindow: scale up only to the lowest recommendation
	// seen within this window.
	// +kubebuilder:default="0s"
	// +optional
	ScaleUpStabilizationWindow *metav1.Duration `json:"scaleUpStabilizationWindow,omitempty"`

	// ScaleDownStabilizationWindow: scale down only to the highest
	// recommendation seen within this window.
	// +kubebuilder:default="5m"
	// +optional
	ScaleDownStabilizationWindow *metav1.Duration `json:"scaleDownStabilizationWindow,omitempty"`
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
	// Backlog is the number of compactions queued on the stores.
	Backlog string `json:"backlog"`
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
	// RecommendedReplicas is ModelReplicas + BacklogReplicas clamped to [min, max].
	RecommendedReplicas int32 `json:"recommendedReplicas"`
}

// Recommendation is one clamped recommendation, kept for stabilization.
type Recommendation struct {
	Time     metav1.Time `json:"time"`
	Replicas int32       `json:"replicas"`
}

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
