package contract

// Metric names the operator scrapes from the pods (its autoscaler, a drain) (the rest of
// the exported names are listed in docs/interfaces.md and checked against the
// dashboards by hack/metricnames). The exporters use these constants, so a
// rename is seen by both sides.
const (
	// Compaction workers.
	MetricCompactorInflight     = "bellows_compactor_inflight_jobs"
	MetricCompactorRate         = "bellows_compactor_compaction_rate_bytes_per_second"
	MetricCompactorTransferRate = "bellows_compactor_transfer_rate_bytes_per_second"
	// w is measured as Δbytes/Δseconds of these two counters: bytes sent by
	// FetchBlocks and the seconds its streams spent sending them. A rate
	// per stream would weigh a one-block remote-cache read (mostly
	// latency) like a whole output's stream.
	MetricCompactorTransferBytes   = "bellows_compactor_transfer_bytes_total"
	MetricCompactorTransferSeconds = "bellows_compactor_transfer_seconds_total"
	// Stores.
	MetricCompactionRequested      = "bellows_compaction_requested_total"
	MetricCompactionRequestedBytes = "bellows_compaction_requested_bytes_total"
	// MetricCompactionQueueDepth counts compactions requested and not yet
	// started anywhere (running ones are not queued: the model's backlog
	// term is work no worker has taken).
	MetricCompactionQueueDepth   = "bellows_compaction_queue_depth"
	MetricCompactionPendingBytes = "bellows_compaction_pending_bytes"
	// MetricCompactionDebtBytes is the store's compaction debt, the sum
	// over its regions of the bytes their policies want compacted and are
	// not getting (region.CompactionState.PendingBytes): unlike the queue,
	// it keeps growing while flushes outrun the compactions.
	// MetricCompactionOldestWait is how long its oldest wanted compaction
	// has waited to start (0: none waits); the autoscaler charges the debt
	// while it exceeds the pool's maxCompactionWait.
	MetricCompactionDebtBytes  = "bellows_compaction_debt_bytes"
	MetricCompactionOldestWait = "bellows_compaction_oldest_wait_seconds"
	// MetricClusterRegions is the region count of the newest region map a
	// store knows: the autoscaler's R, live as regions split.
	MetricClusterRegions = "bellows_cluster_regions"
	// MetricStoreRegions are the regions a store serves (open), and
	// MetricStoreRegionsWaiting those assigned to it that another store
	// has not released yet: the operator drains a leaving store until
	// both read 0 (docs/regions.md §5).
	MetricStoreRegions        = "bellows_regions"
	MetricStoreRegionsWaiting = "bellows_regions_waiting"
	// MetricRegionsWithoutLiveOwner are the regions the balancer's last
	// failover check found given to a store whose liveness lease ran out
	// (0 at every other store): the operator's FailingOver condition
	// reads it.
	MetricRegionsWithoutLiveOwner = "bellows_regions_without_live_owner"
)
