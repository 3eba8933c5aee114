package contract

// Metric names the operator's autoscaler scrapes from the pods (the rest of
// the exported names are listed in docs/interfaces.md and checked against the
// dashboards by hack/metricnames). The exporters use these constants, so a
// rename is seen by both sides.
const (
	// Compaction workers.
	MetricCompactorInflight     = "bellows_compactor_inflight_jobs"
	MetricCompactorRate         = "bellows_compactor_compaction_rate_bytes_per_second"
	MetricCompactorTransferRate = "bellows_compactor_transfer_rate_bytes_per_second"
	// Stores.
	MetricCompactionRequested      = "bellows_compaction_requested_total"
	MetricCompactionRequestedBytes = "bellows_compaction_requested_bytes_total"
	MetricCompactionQueueDepth     = "bellows_compaction_queue_depth"
	MetricCompactionPendingBytes   = "bellows_compaction_pending_bytes"
)
