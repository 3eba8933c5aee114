package contract

import "time"

// Engine defaults (engine.yaml, KVCluster.spec.engine, region options).
const (
	// DefaultMemstorePolicy is Basic: flat segments whose indexes are
	// merged, dropping nothing. Eager and Adaptive differ from it only by
	// dropping, in memory, versions retention lets go, and the default
	// retention (gcTTL 0) keeps every version: under it they act as Basic
	// (docs/memstore.md, "Retention decides what can be dropped"), so the
	// default names what runs. bench/results/memstore-default.md measures
	// it against None under the default retention; bench/results/memstore.md
	// measures Adaptive where it drops (one version kept). Choose Adaptive
	// with a retention that lets it drop.
	DefaultMemstorePolicy = MemstoreBasic
	// DefaultGCTTL is retention.gcTTL, the history every region keeps
	// (storage-engine/retention). 0, the default, keeps every version, as
	// before the window existed: every read at any timestamp is exact.
	// With a window, reads up to gcTTL old are exact, a version superseded
	// longer ago is garbage to the in-memory and disk compactions unless a
	// snapshot reads it, and older reads are refused as SNAPSHOT_TOO_OLD;
	// a registered transaction pins its start at its store for up to
	// DefaultTxnTimeout, but its reads on other stores and one-shot
	// commits' reads are exact only for gcTTL. The default stays 0 until a
	// window is shown safe for what reads old timestamps across stores
	// for long (backup checkpoints at the backup's timestamp, long
	// cross-store transactions); a window short enough for Accordion to
	// drop versions in memory (seconds: a 128 MiB memstore lives about 2 s
	// at full speed) refuses such reads (docs/memstore.md).
	DefaultGCTTL = time.Duration(0)
	// MinGCTTL: a shorter window would refuse reads a clock offset old
	// (DefaultMaxClockOffset) and uncertainty restarts.
	MinGCTTL = time.Second
	// DefaultMemstoreBytes is HBase's hbase.hregion.memstore.flush.size.
	DefaultMemstoreBytes = int64(128 << 20)
	// DefaultMemstoreActiveFraction is Accordion's A, the paper's tuned
	// value (§4.2: A = 0.02; HBase ships 0.014).
	DefaultMemstoreActiveFraction = 0.02
	// DefaultMemstorePipelineSegments is Accordion's S: the paper's best
	// write throughput on SSD (§4.2.4: S = 5); HBase ships 2, for reads.
	DefaultMemstorePipelineSegments = 5
	// DefaultMemstoreRedundancyThreshold is Adaptive's R: HBase's
	// hbase.memstore.compaction.adaptive.compaction.threshold.
	DefaultMemstoreRedundancyThreshold = 0.5
	// DefaultMaxWALMemstores sets memstore.maxWALBytes when it is not
	// given: this many memstore.bytes. Past maxWALBytes a region flushes
	// its memstore to disk so its WAL can be truncated (HBase's
	// hbase.regionserver.maxlogs, per region). Under None and Basic the WAL
	// never reaches twice the memstore; under Eager, whose memstore can
	// keep a key set in memory forever, the bound is what bounds recovery.
	DefaultMaxWALMemstores = 2
	// DefaultMaxWALAge flushes a region whose oldest unflushed write is
	// this old, however little it holds: HBase's
	// hbase.regionserver.optionalcacheflushinterval. It bounds how old a
	// restart's replay reaches back, and so the WAL a slowly written
	// region keeps.
	DefaultMaxWALAge = time.Hour
	// MinMaxWALAge is the least memstore.maxWALAge: below it a slowly
	// written region would flush a file every few writes.
	MinMaxWALAge = 10 * time.Second
	// DefaultWALBoundInterval is how often a store checks the age bound
	// and its store-wide WAL cap (memstore.maxStoreWALBytes).
	DefaultWALBoundInterval = time.Second
	// DefaultRegionOpenConcurrency is how many regions a store opens at
	// once at a start: a replay is CPU (decoding, memstore inserts) and a
	// region's opening is bucket round trips (manifest, claim, SSTs'
	// footers), so a few more than the cores keep both busy.
	DefaultRegionOpenConcurrency = 8
	// DefaultSplitBytes is the size past which a region splits when no
	// compaction pool says otherwise: a region's major compaction reads
	// all of it (b ≈ region bytes), and a worker admits a job only if
	// b ≤ m; the rule is m/2 (docs/regions.md), so half of a 1 GiB worker
	// cache.
	DefaultSplitBytes = int64(512 << 20)
	// DefaultSplitQPS: a region serving more requests per second than
	// this (and more than twice its store's median) splits at a sampled
	// key (store --split-qps, KVCluster spec.regions.splitQPS); 0 never
	// splits by load. Off by default until the load benchmark of #26 picks
	// a threshold (TiKV's split.qps-threshold is 3000).
	DefaultSplitQPS = int32(0)
	// DefaultSplitCheckInterval is how often a store compares its
	// regions' sizes with the split size.
	DefaultSplitCheckInterval = 2 * time.Second
	// DefaultMergeAfter is how long two adjacent regions on one store
	// must stay small (each under the merge size, a quarter of the split
	// size by default) and cold before they merge: hysteresis, so a
	// split is not undone at once and a lull does not merge what the next
	// burst would split (TiKV checks merges every 10 s but needs the
	// regions small; HBase's normalizer runs every 5 min).
	DefaultMergeAfter = 10 * time.Minute
	// DefaultRecutTolerance: the balancer re-cuts two adjacent regions
	// that stopped growing when one is further than this fraction from
	// the mean region size (docs/regions.md, "Evening sizes out"): inside
	// issue #26's ±25%, so regions binary splits leave anywhere in
	// [S/2, S] end within it.
	DefaultRecutTolerance = float64(DefaultRecutTolerancePercent) / 100
	// DefaultRecutTolerancePercent is DefaultRecutTolerance as KVCluster's
	// spec.regions.recutTolerancePercent writes it.
	DefaultRecutTolerancePercent = 20
	// DefaultJanitorInterval is how often a store deletes the files of
	// retired (split) regions that no live region references any more; a
	// pass reads every region's manifest.
	DefaultJanitorInterval = 10 * time.Minute
	// DefaultLoadWindow is the window a store measures its regions'
	// request rates over for splits by load.
	DefaultLoadWindow = 10 * time.Second
	// DefaultBalanceInterval is how often the store holding the balancer
	// lease reads every store's regions and plans moves (docs/regions.md
	// §4); DefaultBalancerLeaseTerm is how long a term of that lease
	// lasts. The holder renews it every failover check, once half of it is
	// gone (it also decides failovers, docs/failover.md §5), so a holder
	// that stops is replaced within a term plus the clock offset, and a
	// failover of the balancer's own store waits that much more than
	// another's.
	DefaultBalanceInterval   = 5 * time.Second
	DefaultBalancerLeaseTerm = 3 * time.Second
	// DefaultBalanceTolerance: the balancer moves regions until every
	// store is within this fraction of the mean bytes and request rate.
	DefaultBalanceTolerance = 0.15
	// DefaultBalanceMinBytes and DefaultBalanceMinQPS: a store is not out
	// of balance by less than these, whatever the tolerance: a move costs
	// its region a flush and a cold cache, worth it only for a real gap
	// (half a default memstore; a thousand requests a second, a small part of what one region serves).
	DefaultBalanceMinBytes = int64(64 << 20)
	DefaultBalanceMinQPS   = 1000.0
	// DefaultMaxMovesInFlight bounds the region moves under way at once,
	// cluster-wide.
	DefaultMaxMovesInFlight = 2
	// DefaultMapPollInterval is how often a store checks the bucket for a
	// region map newer than its own (another store's split): one
	// existence check.
	DefaultMapPollInterval = time.Second
	// MaxRegionCount bounds KVCluster.spec.regions.count and --regions: a
	// count splits the key space evenly by the keys' first byte.
	MaxRegionCount = 256
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
	// DefaultTLSMode: the operator's CA issues every pod's certificate
	// (docs/security.md).
	DefaultTLSMode = "Operator"
	// CAValidity is how long the operator's CA of a namespace is valid.
	// It is not renewed (docs/security.md says how to replace it).
	CAValidity = 10 * 365 * 24 * time.Hour
	// CertValidity is how long a certificate the operator issues is valid;
	// it is renewed after CertRenewNumerator/CertRenewDenominator of that.
	CertValidity = 90 * 24 * time.Hour
	// CertRenewNumerator/CertRenewDenominator: a certificate is renewed
	// once 2/3 of its life has passed, as cert-manager does by default.
	CertRenewNumerator, CertRenewDenominator = 2, 3
)

// KVCluster defaults.
const (
	// ImageRepository is where the bellows image is published. A KVCluster
	// or CompactionPool without spec.image runs the operator's default image
	// (operator --default-image; the chart passes the operator's own image,
	// and an operator binary defaults to this repository at its own version),
	// so pods never mix versions behind a floating tag such as :latest.
	ImageRepository          = "ghcr.io/bellows-kv/bellows"
	DefaultKVClusterReplicas = int32(3)
	DefaultStorageSize       = "10Gi"
	DefaultRegionCount       = int32(1)
)

// Watches (docs/watch.md).
const (
	// WatchBufferBytes bounds what a store buffers for one watch that its
	// consumer has not taken yet, beside gRPC's flow-control window: past
	// it the watch ends with RESOURCE_EXHAUSTED and its consumer resumes
	// from its last resolved mark. etcd cancels a slow watcher's victim
	// stream the same way.
	WatchBufferBytes = 8 << 20
	// DefaultWatchProgressInterval is how often a watch gets a resolved
	// mark (when it asks for none other): a client delivers a change once
	// every region of its watch has resolved past it, so this bounds most
	// of a change's delivery delay (bench/results/watch.md).
	DefaultWatchProgressInterval = 50 * time.Millisecond
)

// The cluster clock (docs/clock.md).
const (
	// DefaultMaxClockOffset bounds how far apart two stores' clocks may
	// be: reads carry an uncertainty window this wide, a region opening
	// from another process's manifest waits it out, and a store beyond
	// 80% of it from a majority of its peers stops serving. CockroachDB's
	// default is 500 ms; NTP or chrony keep Kubernetes nodes within a few
	// milliseconds, and a smaller bound restarts fewer transactions.
	DefaultMaxClockOffset = 250 * time.Millisecond
	// DefaultClockCheckInterval: how often a store measures its offset to
	// each peer.
	DefaultClockCheckInterval = time.Second
)

// Failover (docs/failover.md).
const (
	// DefaultLivenessTerm is how far ahead each renewal of a store's
	// liveness lease (storage-engine/liveness) sets its expiry; the store
	// serves until the expiry minus the clock offset, and the balancer may
	// fence it after the expiry plus the offset: with the defaults a
	// store that stops is fenced within term + offset + check interval
	// (3.5 s) of its last renewal (docs/failover.md §3).
	DefaultLivenessTerm = 3 * time.Second
	// DefaultLivenessRenewInterval is how often a store renews its
	// liveness lease: a quarter of the term, so two failed renewals in a
	// row still leave it serving.
	DefaultLivenessRenewInterval = 750 * time.Millisecond
	// DefaultFailoverCheckInterval is how often the balancer reads every
	// store's liveness lease to fence the expired ones.
	DefaultFailoverCheckInterval = 250 * time.Millisecond
	// DefaultMapEpochRetention is how long a region map epoch stays in the
	// bucket once superseded (and every epoch from the oldest backup's on
	// stays; docs/failover.md §7); DefaultLeaseLogRetention, the same for
	// the balancer lease's terms and the stores' liveness records, which
	// their readers list: at the renewal rates, with the collection's
	// interval, it keeps 40 to 90 records per store and 20 to 50 terms.
	// Besides, the newest DefaultFencingLogKeep objects of each log stay
	// whatever their age. Half of each is also the fencing logs' guard
	// against a writer whose view is stale (regionmap/fencelog), so each
	// is a constant, the same in every process, not a setting.
	DefaultMapEpochRetention = time.Hour
	DefaultLeaseLogRetention = 30 * time.Second
	DefaultFencingLogKeep    = 8
	// DefaultFencingLogCollectInterval is how often the balancer deletes
	// the lease terms and liveness records past their retention; map
	// epochs, whose collection reads the backups, every
	// DefaultJanitorInterval.
	DefaultFencingLogCollectInterval = 30 * time.Second
)

// Cross-region transactions (storage-engine/txn).
const (
	// DefaultTxnLockTTL is how long a cross-region commit's locks hold
	// before a reader that meets one may roll the transaction back: long
	// against a commit (milliseconds), short against a coordinator's crash.
	// TiKV's is 3 s to 20 s, by the transaction's size.
	DefaultTxnLockTTL = 10 * time.Second
	// DefaultTxnLockResolveInterval: how often a store resolves the expired
	// locks of its regions that no request met.
	DefaultTxnLockResolveInterval = 2 * time.Second
	// DefaultTxnOutcomeRetention: how long a primary's region keeps an
	// outcome its coordinator did not forget (it crashed before every lock
	// was resolved). A lock of the transaction that outlives it (its region
	// closed all that time) rolls back: it must exceed any region's outage.
	DefaultTxnOutcomeRetention = 24 * time.Hour
	// DefaultTxnOutcomeRetryWindow: how long a primary's region keeps the
	// outcome of a transaction whose locks are all resolved, so a retry of
	// its commit request whose first answer was lost (the coordinator
	// restarted, say) learns that it committed instead of seeing its own
	// writes as a conflict. Longer than any client's commit deadline.
	DefaultTxnOutcomeRetryWindow = 10 * time.Minute
	// DefaultTxnTimeout ends a transaction BeginTxn registered that is
	// neither committed nor rolled back this long after it began, with the
	// versions its store kept for it: a client that forgot one does not pin
	// old versions forever. Long against an interactive transaction.
	DefaultTxnTimeout = 5 * time.Minute
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
	// DefaultMaxCompactionWait is how long a wanted compaction may wait to
	// start before the autoscaler charges the compaction debt.
	DefaultMaxCompactionWait = time.Minute
)

// Default pod resources, used when a KVCluster or CompactionPool leaves
// spec.resources empty. Memory is derived from the engine settings (see
// controllers/specs.StoreMemory and WorkerMemory); these are the parts that
// are not settings.
const (
	// StoreMemoryOverhead is a store's memory outside the block cache,
	// the memstores and the pinned SST indexes: the Go runtime and GC
	// headroom, gRPC buffers, WAL buffers.
	StoreMemoryOverhead = int64(256 << 20)
	// PinnedIndexBytesPerGiB is the most memory a store pins outside its
	// block cache per GiB of SST data: each file's top-level index, an
	// entry of about 70 bytes per partition, and a partition per about
	// 64 KiB of data at worst (entries of 16 bytes, whose filters fill
	// first) (docs/memory.md).
	PinnedIndexBytesPerGiB = int64(1 << 20)
	// WorkerMemoryOverhead is a worker's memory outside its output cache m:
	// the merge's input blocks and write buffers, the runtime, gRPC.
	WorkerMemoryOverhead = int64(256 << 20)
	// GoMemoryLimitRatio is the Go runtime's soft memory limit as a share
	// of the container's (cgroup) memory limit, set at every role's start:
	// the GC works harder near it instead of letting the heap grow to
	// twice what is live (GOGC 100), which a worker whose kept outputs fill
	// m would carry past its limit of m + WorkerMemoryOverhead. GOMEMLIMIT
	// or AUTOMEMLIMIT (a ratio, or off) in the environment overrides it.
	GoMemoryLimitRatio = 0.9
	// DefaultStoreCPURequest and DefaultWorkerCPURequest are CPU requests
	// only (no CPU limit: throttling a store shows in read latency, and a
	// compaction's speed is the model's c).
	DefaultStoreCPURequest  = "500m"
	DefaultWorkerCPURequest = "500m"
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
	// BucketStartupWait is how long a starting store waits for an object
	// store that does not answer (refused connections, timeouts, 5xx)
	// before it exits: one started beside its bucket (a new cluster's
	// pods) or during the bucket's outage serves as soon as the bucket
	// does, rather than after a crash loop's growing back-off. Refused
	// credentials and missing buckets fail at once.
	BucketStartupWait = 2 * time.Minute
	// DefaultReleaseTimeout is how long a store spends releasing its regions
	// on SIGTERM (aborting their compactions, flushing, committing the
	// released manifest), first, while its other requests still run.
	DefaultReleaseTimeout = 80 * time.Second
	// DefaultWALArchiveInterval is how often each region ships its WAL to
	// the bucket's archive (wal-archive/): the recovery point objective, the
	// most acknowledged writes a store's lost volume takes with it. A
	// region with nothing new refreshes its archive frontier only every
	// WALArchiveIdleRefresh intervals, so an idle cluster costs a bucket
	// write per region per minute, not per interval.
	DefaultWALArchiveInterval = 5 * time.Second
	// DefaultDurability is where a write is durable before it is
	// acknowledged (docs/failover.md): DurabilityBucket, every group commit
	// in the region's WAL stream in the bucket, so a lost node or volume
	// loses nothing acknowledged; DurabilityLocal, the local WAL's fsync,
	// with the archive DefaultWALArchiveInterval behind.
	DefaultDurability = DurabilityBucket
	// WALArchiveIdleRefresh: see DefaultWALArchiveInterval.
	WALArchiveIdleRefresh = 12
	// DefaultOwnershipCheckInterval is how often an open region looks for a
	// newer owner in the bucket.
	DefaultOwnershipCheckInterval = 5 * time.Second
	// DefaultReleasePollInterval is how often a store assigned a region
	// that another store owns checks the bucket for that store's release
	// (one existence check of the next manifest), so a region moves in
	// about its flush plus this interval. 50ms: a move's unavailability
	// is its release plus this wait (at 250ms, claims came 250-350 ms
	// after each release in `bellows-bench ycsb --elastic --records=500000
	// --pairs=3 --settle=60s`, measured on 2026-11-27 at 944d2ae), and a
	// region waits only while it moves, so 20 checks/s for that time cost
	// nothing.
	DefaultReleasePollInterval = 50 * time.Millisecond
	// DefaultRemoteBlockTimeout bounds one block read from a compaction
	// worker's memory on a cache miss (RemoteCache warmup). A healthy
	// worker answers in about a millisecond and the bucket, which the
	// miss reads instead on a timeout, in tens to a couple of hundred; so
	// 300ms is far past a healthy worker yet keeps a stuck worker's cost
	// to a read (this, then a bucket read) well under a client's typical
	// 1–2 s deadline. Without it a paused worker held reads for the
	// 15 s gRPC keepalive.
	DefaultRemoteBlockTimeout = 300 * time.Millisecond
	// DefaultRemoteBlockRetryAfter is how long a store reads new files
	// from the bucket after a worker failed a block read, before one read
	// probes the worker again: long enough that a dead worker costs one
	// deadline per interval, not per read; short enough that a worker
	// back from a pause serves its cache again within seconds.
	DefaultRemoteBlockRetryAfter = 5 * time.Second
	// DefaultRemoteCacheRate bounds the bytes per second one store pulls
	// from workers' memory for RemoteCache misses, all files together: the
	// same link budget w a worker's stream has (DefaultTransferRate), which
	// the capacity model charges per transfer. Without it every miss opened
	// its own FetchBlocks stream and --transfer-rate bounded nothing a
	// store pulled. Misses past the bound read the bucket: never a wait.
	DefaultRemoteCacheRate = DefaultTransferRate
	// DrainGraceHeadroom is added to a pool's drain timeout for the worker
	// pod's grace period: the preStop drain, then the gRPC stop.
	DrainGraceHeadroom = GracefulStopTimeout
	// ScrapeInterval is the ServiceMonitors' interval.
	ScrapeInterval = 30 * time.Second
	// DefaultScrapeTimeout bounds one scrape of a pod's /metrics by the operator.
	DefaultScrapeTimeout = 5 * time.Second
	// DefaultNetworkPolicies: the operator makes a NetworkPolicy for each
	// KVCluster's storage pods and each CompactionPool's workers (operator
	// --network-policies, the chart's networkPolicy.enabled).
	DefaultNetworkPolicies = true
	// DefaultMonitoringNamespace is where Prometheus runs: the namespace
	// the NetworkPolicies let reach the metrics ports (operator
	// --monitoring-namespace, the chart's networkPolicy.monitoringNamespaces).
	// kube-prometheus and kube-prometheus-stack's guides install there.
	DefaultMonitoringNamespace = "monitoring"
	// RolloutProgressDeadline is how long a storage pod may stay not Ready
	// before the operator calls its rollout stuck, when no container says so
	// sooner (an image that cannot be pulled, a crash loop). A store opens its
	// regions and warms up before it is Ready; this leaves ample room for
	// that, as a Deployment's default progressDeadlineSeconds does.
	RolloutProgressDeadline = 10 * time.Minute
	// StoreDrainTimeout bounds a scale-down's drain: the operator shrinks
	// the StatefulSet this long after marking the leaving stores even if
	// they still hold regions (a Warning event says so); those regions
	// then fall back to their slots' stores, as without a drain. At the
	// default 2 moves in flight a region move takes seconds, so this
	// leaves room for hundreds of regions.
	StoreDrainTimeout = 10 * time.Minute
	// StoreDrainRecheck is how often the operator asks the leaving stores
	// whether they still hold regions while it drains them.
	StoreDrainRecheck = 5 * time.Second
	// StoreNodeLostAfter is the default of KVCluster
	// spec.failover.nodeLostAfter: how long a storage pod's node may stay
	// NotReady (or unreachable) before the operator replaces the pod
	// (docs/failover.md §6). The node controller calls a node NotReady only
	// after it missed its heartbeats for node-monitor-grace-period (40-50 s),
	// and the store's regions failed over within seconds of its death
	// whatever the pod's state, so this only delays the StatefulSet's
	// repair: it keeps a node that is back within a minute or so from
	// costing its stores a restart with an empty volume.
	StoreNodeLostAfter = 30 * time.Second
)

// WorkerGracePeriod is the grace period of a worker pod whose pool drains
// for drainTimeout.
func WorkerGracePeriod(drainTimeout time.Duration) time.Duration {
	return drainTimeout + DrainGraceHeadroom
}

// Image is the bellows image of a version, in ImageRepository.
func Image(version string) string { return ImageRepository + ":" + version }

// The durability modes (--durability, KVCluster spec.durability.mode).
const (
	// DurabilityBucket: a write is acknowledged once its group commit is in
	// the region's WAL stream in the bucket. RPO 0: a lost node or volume
	// loses no acknowledged write; a write waits for one bucket PUT.
	DurabilityBucket = "Bucket"
	// DurabilityLocal: a write is acknowledged once the local WAL has it
	// (fsync, or the engine's syncMode); the archive ships it every
	// --wal-archive-interval. RPO: that interval, for a lost node or volume.
	DurabilityLocal = "Local"
)

// DurabilityModes are the values --durability accepts.
var DurabilityModes = []string{DurabilityBucket, DurabilityLocal}
