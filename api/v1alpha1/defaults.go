package v1alpha1

import (
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Defaults. The CRD schema applies the same values (kubebuilder:default
// markers); SetDefaults lets code that builds objects in Go (tests, pure
// builders) see what the API server would store.
const (
	DefaultImage               = "ghcr.io/bellows-kv/bellows:latest"
	DefaultKVClusterReplicas   = int32(3)
	DefaultStorageSize         = "10Gi"
	DefaultRegionCount         = int32(1)
	DefaultMemstorePolicy      = MemstorePolicy("Adaptive")
	DefaultMemstoreBytes       = "128Mi"
	DefaultBlockCacheBytes     = "1Gi"
	DefaultCompactionMinFiles  = int32(3)
	DefaultCompactionMaxFiles  = int32(10)
	DefaultCompactionRatio     = "1.2"
	DefaultCompactionMaxBytes  = "4Gi"
	DefaultOffload             = OffloadMode("Preferred")
	DefaultWarmupMode          = WarmupMode("Incremental")
	DefaultSyncMode            = SyncMode("sync")
	DefaultPoolReplicas        = int32(1)
	DefaultPoolMinReplicas     = int32(1)
	DefaultPoolMaxReplicas     = int32(10)
	DefaultCacheBytes          = "6Gi"
	DefaultTransferRate        = int64(8_000_000)
	DefaultDrainTimeout        = 10 * time.Minute
	DefaultAutoscalingInterval = time.Hour
	DefaultAutoscalingSync     = 30 * time.Second
	DefaultScaleUpWindow       = time.Duration(0)
	DefaultScaleDownWindow     = 5 * time.Minute
	DrainGracePeriodHeadroom   = 30 * time.Second
	StoreGRPCPort              = 7400
	CompactorGRPCPort          = 7500
	MetricsPort                = 9090
)

// SetDefaults fills every unset field with its default.
func (c *KVCluster) SetDefaults() {
	s := &c.Spec
	if s.Replicas == 0 {
		s.Replicas = DefaultKVClusterReplicas
	}
	if s.Image == "" {
		s.Image = DefaultImage
	}
	if s.Storage.Size.IsZero() {
		s.Storage.Size = resource.MustParse(DefaultStorageSize)
	}
	if s.Regions.Count == nil && len(s.Regions.SplitKeys) == 0 {
		n := DefaultRegionCount
		s.Regions.Count = &n
	}
	e := &s.Engine
	if e.Memstore.Policy == "" {
		e.Memstore.Policy = DefaultMemstorePolicy
	}
	if e.Memstore.Bytes.IsZero() {
		e.Memstore.Bytes = resource.MustParse(DefaultMemstoreBytes)
	}
	if e.BlockCacheBytes.IsZero() {
		e.BlockCacheBytes = resource.MustParse(DefaultBlockCacheBytes)
	}
	if e.Compaction.MinFiles == 0 {
		e.Compaction.MinFiles = DefaultCompactionMinFiles
	}
	if e.Compaction.MaxFiles == 0 {
		e.Compaction.MaxFiles = DefaultCompactionMaxFiles
	}
	if e.Compaction.Ratio == "" {
		e.Compaction.Ratio = DefaultCompactionRatio
	}
	if e.Compaction.MaxBytes.IsZero() {
		e.Compaction.MaxBytes = resource.MustParse(DefaultCompactionMaxBytes)
	}
	if e.Offload == "" {
		e.Offload = DefaultOffload
	}
	if e.Warmup.Mode == "" {
		e.Warmup.Mode = DefaultWarmupMode
	}
	if e.SyncMode == "" {
		e.SyncMode = DefaultSyncMode
	}
}

// RegionCount is the number of regions of the layout.
func (s *RegionsSpec) RegionCount() int32 {
	if len(s.SplitKeys) > 0 {
		return int32(len(s.SplitKeys) + 1)
	}
	if s.Count != nil {
		return *s.Count
	}
	return DefaultRegionCount
}

// SetDefaults fills every unset field with its default.
func (p *CompactionPool) SetDefaults() {
	s := &p.Spec
	if s.Replicas == nil {
		n := DefaultPoolReplicas
		s.Replicas = &n
	}
	if s.MaxReplicas == 0 {
		s.MaxReplicas = DefaultPoolMaxReplicas
	}
	if s.Image == "" {
		s.Image = DefaultImage
	}
	if s.CacheBytes.IsZero() {
		s.CacheBytes = resource.MustParse(DefaultCacheBytes)
	}
	if s.TransferRateBytesPerSecond == 0 {
		s.TransferRateBytesPerSecond = DefaultTransferRate
	}
	if s.DrainTimeout.Duration == 0 {
		s.DrainTimeout = metav1.Duration{Duration: DefaultDrainTimeout}
	}
	a := &s.Autoscaling
	if a.Mode == "" {
		a.Mode = AutoscalingModel
	}
	if a.Interval.Duration == 0 {
		a.Interval = metav1.Duration{Duration: DefaultAutoscalingInterval}
	}
	if a.SyncPeriod.Duration == 0 {
		a.SyncPeriod = metav1.Duration{Duration: DefaultAutoscalingSync}
	}
	if a.ScaleUpStabilizationWindow == nil {
		a.ScaleUpStabilizationWindow = &metav1.Duration{Duration: DefaultScaleUpWindow}
	}
	if a.ScaleDownStabilizationWindow == nil {
		a.ScaleDownStabilizationWindow = &metav1.Duration{Duration: DefaultScaleDownWindow}
	}
}

// DesiredReplicasOrDefault is spec.replicas, or its default when unset.
func (p *CompactionPool) DesiredReplicasOrDefault() int32 {
	if p.Spec.Replicas == nil {
		return DefaultPoolReplicas
	}
	return *p.Spec.Replicas
}
