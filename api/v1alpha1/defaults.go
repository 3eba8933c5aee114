package v1alpha1

import (
	"strconv"

	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/bellows-kv/bellows/internal/contract"
)

// Defaults, all taken from internal/contract (the one place for them). The
// CRD schema applies the same values through its kubebuilder:default markers
// (TestCRDDefaultsMatchTheContract fails when they differ); SetDefaults lets
// code that builds objects in Go (tests, pure builders) see what the API
// server would store.
const (
	DefaultKVClusterReplicas   = contract.DefaultKVClusterReplicas
	DefaultStorageSize         = contract.DefaultStorageSize
	DefaultRegionCount         = contract.DefaultRegionCount
	DefaultSplitQPS            = contract.DefaultSplitQPS
	DefaultMaxMovesInFlight    = int32(contract.DefaultMaxMovesInFlight)
	DefaultRecutTolerancePct   = int32(contract.DefaultRecutTolerancePercent)
	DefaultMaxClockOffset      = contract.DefaultMaxClockOffset
	DefaultWALArchiveInterval  = contract.DefaultWALArchiveInterval
	DefaultMemstorePolicy      = MemstorePolicy(contract.DefaultMemstorePolicy)
	DefaultCompactionMinFiles  = int32(contract.DefaultCompactionMinFiles)
	DefaultCompactionMaxFiles  = int32(contract.DefaultCompactionMaxFiles)
	DefaultOffload             = OffloadMode(contract.DefaultOffload)
	DefaultWarmupMode          = WarmupMode(contract.DefaultWarmupMode)
	DefaultSyncMode            = SyncMode(contract.DefaultSyncMode)
	DefaultTLSMode             = TLSMode(contract.DefaultTLSMode)
	DefaultPoolReplicas        = contract.DefaultPoolReplicas
	DefaultPoolMinReplicas     = contract.DefaultPoolMinReplicas
	DefaultPoolMaxReplicas     = contract.DefaultPoolMaxReplicas
	DefaultTransferRate        = contract.DefaultTransferRate
	DefaultDrainTimeout        = contract.DefaultDrainTimeout
	DefaultAutoscalingInterval = contract.DefaultAutoscalingInterval
	DefaultAutoscalingSync     = contract.DefaultAutoscalingSync
	DefaultScaleUpWindow       = contract.DefaultScaleUpWindow
	DefaultScaleDownWindow     = contract.DefaultScaleDownWindow
	DefaultMaxCompactionWait   = contract.DefaultMaxCompactionWait
)

// DefaultCompactionRatio is the ratio as the CRD writes it (a decimal string).
var DefaultCompactionRatio = strconv.FormatFloat(contract.DefaultCompactionRatio, 'f', -1, 64)

// Byte-count defaults as the quantities the API server stores.
func defaultMemstoreBytes() resource.Quantity { return bytesQuantity(contract.DefaultMemstoreBytes) }
func defaultBlockCacheBytes() resource.Quantity {
	return bytesQuantity(contract.DefaultBlockCacheBytes)
}
func defaultCompactionMaxBytes() resource.Quantity {
	return bytesQuantity(contract.DefaultCompactionMaxBytes)
}
func defaultWorkerCacheBytes() resource.Quantity {
	return bytesQuantity(contract.DefaultWorkerCacheBytes)
}

func bytesQuantity(n int64) resource.Quantity { return *resource.NewQuantity(n, resource.BinarySI) }

// SetDefaults fills every unset field with its default. spec.image is not
// one of them: an empty image means the operator's default image, which the
// reconciler fills in (it is the operator's, not the API's, to choose).
func (c *KVCluster) SetDefaults() {
	s := &c.Spec
	if s.Replicas == 0 {
		s.Replicas = DefaultKVClusterReplicas
	}
	if s.Storage.Size.IsZero() {
		s.Storage.Size = resource.MustParse(DefaultStorageSize)
	}
	if s.Regions.Count == nil && len(s.Regions.SplitKeys) == 0 {
		n := DefaultRegionCount
		s.Regions.Count = &n
	}
	// splitBytes has no default here: unset, the operator derives it from
	// the referenced CompactionPool (controllers/specs.RegionSplitOf).
	if s.Regions.SplitQPS == nil {
		q := DefaultSplitQPS
		s.Regions.SplitQPS = &q
	}
	if s.Regions.MaxMovesInFlight == nil {
		m := DefaultMaxMovesInFlight
		s.Regions.MaxMovesInFlight = &m
	}
	if s.Regions.RecutTolerancePercent == nil {
		p := DefaultRecutTolerancePct
		s.Regions.RecutTolerancePercent = &p
	}
	if s.Clock.MaxOffset == "" {
		s.Clock.MaxOffset = DurationOf(DefaultMaxClockOffset)
	}
	if s.TLS.Mode == "" {
		s.TLS.Mode = DefaultTLSMode
	}
	if s.WALArchive.Interval == "" {
		s.WALArchive.Interval = DurationOf(DefaultWALArchiveInterval)
	}
	if s.Durability.Mode == "" {
		s.Durability.Mode = contract.DefaultDurability
	}
	if s.Failover.NodeLostAfter == "" {
		s.Failover.NodeLostAfter = DurationOf(contract.StoreNodeLostAfter)
	}
	e := &s.Engine
	if e.Memstore.Policy == "" {
		e.Memstore.Policy = DefaultMemstorePolicy
	}
	if e.Memstore.Bytes.IsZero() {
		e.Memstore.Bytes = defaultMemstoreBytes()
	}
	if e.Memstore.MaxWALAge == "" {
		e.Memstore.MaxWALAge = DurationOf(contract.DefaultMaxWALAge)
	}
	if e.Retention.GCTTL == "" {
		e.Retention.GCTTL = DurationOf(contract.DefaultGCTTL)
	}
	if e.BlockCacheBytes.IsZero() {
		e.BlockCacheBytes = defaultBlockCacheBytes()
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
		e.Compaction.MaxBytes = defaultCompactionMaxBytes()
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

// SetDefaults fills every unset field with its default but spec.image (see
// KVCluster.SetDefaults).
func (p *CompactionPool) SetDefaults() {
	s := &p.Spec
	if s.Replicas == nil {
		n := DefaultPoolReplicas
		s.Replicas = &n
	}
	if s.TLS.Mode == "" {
		s.TLS.Mode = DefaultTLSMode
	}
	if s.MaxReplicas == 0 {
		s.MaxReplicas = DefaultPoolMaxReplicas
	}
	if s.CacheBytes.IsZero() {
		s.CacheBytes = defaultWorkerCacheBytes()
	}
	if s.TransferRateBytesPerSecond == 0 {
		s.TransferRateBytesPerSecond = DefaultTransferRate
	}
	if s.DrainTimeout == "" {
		s.DrainTimeout = DurationOf(DefaultDrainTimeout)
	}
	a := &s.Autoscaling
	if a.Mode == "" {
		a.Mode = AutoscalingModel
	}
	if a.Interval == "" {
		a.Interval = DurationOf(DefaultAutoscalingInterval)
	}
	if a.SyncPeriod == "" {
		a.SyncPeriod = DurationOf(DefaultAutoscalingSync)
	}
	if a.ScaleUpStabilizationWindow == "" {
		a.ScaleUpStabilizationWindow = DurationOf(DefaultScaleUpWindow)
	}
	if a.ScaleDownStabilizationWindow == "" {
		a.ScaleDownStabilizationWindow = DurationOf(DefaultScaleDownWindow)
	}
	if a.MaxCompactionWait == "" {
		a.MaxCompactionWait = DurationOf(DefaultMaxCompactionWait)
	}
}

// DesiredReplicasOrDefault is spec.replicas, or its default when unset.
func (p *CompactionPool) DesiredReplicasOrDefault() int32 {
	if p.Spec.Replicas == nil {
		return DefaultPoolReplicas
	}
	return *p.Spec.Replicas
}
