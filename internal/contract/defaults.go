package contract

import "time"

// Engine defaults (engine.yaml, KVCluster.spec.engine, region options).
const (
	// DefaultMemstorePolicy stays None until the compacting memstore is
	// built and its benchmark picks a better one.
	DefaultMemstorePolicy = MemstoreNone
	// DefaultMemstoreBytes is HBase's hbase.hregion.memstore.flush.size.
	DefaultMemstoreBytes = int64(128 << 20)
	// MinMemstoreBytes keeps a flush from producing a file per write.
	MinMemstoreBytes       = int64(1 << 20)
	DefaultBlockCacheBytes = int64(1 << 30)
	// The exploring policy's defaults are HBase's
	// (hbase.hstore.compaction.{min,max,ratio}); maxBytes is the paper's b.
	DefaultCompactionMinFiles = 3
	DefaultCompactionMaxFiles = 10
	DefaultCompactionRatio    = 1.2
	DefaultCompactionMaxBytes = int64(4 << 30)
	DefaultOffload            = OffloadPreferred
	DefaultWarmupMode         = WarmupIncremental
	DefaultSyncMode           = SyncModeSync
)

// KVCluster defaults.
const (
	DefaultImage             = "ghcr.io/bellows-kv/bellows:latest"
	DefaultKVClusterReplicas = int32(3)
	DefaultStorageSize       = "10Gi"
	DefaultRegionCount       = int32(1)
)

// CompactionPool and compactor defaults.
const (
	DefaultPoolReplicas    = int32(1)
	DefaultPoolMinReplicas = int32(1)
	DefaultPoolMaxReplicas = int32(10)
	// DefaultWorkerCacheBytes is m, the paper's 6 GB.
	DefaultWorkerCacheBytes = int64(6 << 30)
	// DefaultTransferRate is w, the paper's 8 MB/s.
	DefaultTransferRate        = int64(8_000_000)
	DefaultDrainTimeout        = 10 * time.Minute
	DefaultOutputTTL           = 10 * time.Minute
	DefaultAutoscalingInterval = time.Hour
	DefaultAutoscalingSync     = 30 * time.Second
	DefaultScaleUpWindow       = time.Duration(0)
	DefaultScaleDownWindow     = 5 * time.Minute
)

// Timings the operator and the pods must agree on.
const (
	// StoreGracePeriod is a store pod's terminationGracePeriodSeconds: its
	// SIGTERM path (ReleaseTimeout, then GracefulStopTimeout) must fit in it.
	StoreGracePeriod = 120 * time.Second
	// GracefulStopTimeout bounds how long a role waits for running requests
	// after SIGTERM before it cuts them off; a store waits only after it
	// released its regions (requests for them were answered at once).
	GracefulStopTimeout = 30 * time.Second
	// DefaultReleaseTimeout is how long a store spends releasing its regions
	// on SIGTERM (aborting their compactions, flushing, committing the
	// released manifest), first, while its other requests still run.
	DefaultReleaseTimeout = 80 * time.Second
	// DefaultOwnershipCheckInterval is how often an open region looks for a
	// newer owner in the bucket.
	DefaultOwnershipCheckInterval = 5 * time.Second
	// DefaultReleasePollInterval is how often a store assigned a region
	// that another store owns checks the bucket for that store's release
	// (one existence check of the next manifest), so a region moves in
	// about its flush plus this interval.
	DefaultReleasePollInterval = 250 * time.Millisecond
	// DrainGraceHeadroom is added to a pool's drain timeout for the worker
	// pod's grace period: the preStop drain, then the gRPC stop.
	DrainGraceHeadroom = GracefulStopTimeout
	// ScrapeInterval is the ServiceMonitors' interval.
	ScrapeInterval = 30 * time.Second
	// DefaultScrapeTimeout bounds one scrape of a pod's /metrics by the operator.
	DefaultScrapeTimeout = 5 * time.Second
)

// WorkerGracePeriod is the grace period of a worker pod whose pool drains
// for drainTimeout.
func WorkerGracePeriod(drainTimeout time.Duration) time.Duration {
	return drainTimeout + DrainGraceHeadroom
}
