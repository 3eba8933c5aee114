package contract

import (
	"fmt"
	"strings"
	"time"

	"github.com/dustin/go-humanize"
)

// Setting is one default, as the docs list it.
type Setting struct {
	// Where names the setting in each layer that has it.
	Where string
	Value string
}

// Settings is every default, in the order docs/defaults.md lists them.
func Settings() []Setting {
	e := DefaultEngineConfig()
	return []Setting{
		{"engine.yaml memstore.policy · KVCluster spec.engine.memstore.policy · store/local --memstore-policy", string(e.Memstore.Policy)},
		{"engine.yaml memstore.bytes · KVCluster spec.engine.memstore.bytes", size(e.Memstore.Bytes)},
		{"engine.yaml memstore.maxWALBytes · KVCluster spec.engine.memstore.maxWALBytes", fmt.Sprintf("%d × memstore.bytes (%s)", DefaultMaxWALMemstores, size(e.Memstore.MaxWALBytes))},
		{"engine.yaml memstore.maxWALAge · KVCluster spec.engine.memstore.maxWALAge", dur(e.Memstore.MaxWALAge.Duration)},
		{"engine.yaml memstore.maxStoreWALBytes · KVCluster spec.engine.memstore.maxStoreWALBytes", "the store's memstore budget: its open regions × memstore.bytes"},
		{"engine.yaml memstore.activeFraction (Accordion's A)", fmt.Sprint(e.Memstore.ActiveFraction)},
		{"engine.yaml memstore.pipelineSegments (Accordion's S)", fmt.Sprint(e.Memstore.PipelineSegments)},
		{"engine.yaml memstore.redundancyThreshold (Adaptive's R)", fmt.Sprint(e.Memstore.RedundancyThreshold)},
		{"engine.yaml retention.gcTTL · KVCluster spec.engine.retention.gcTTL (history kept; reads older are SNAPSHOT_TOO_OLD)", dur(e.Retention.GCTTL.Duration)},
		{"engine.yaml retention.maxVersions · KVCluster spec.engine.retention.maxVersions (0: no count bound, gcTTL decides)", fmt.Sprint(e.Retention.MaxVersions)},
		{"engine.yaml blockCacheBytes · KVCluster spec.engine.blockCacheBytes", size(e.BlockCacheBytes)},
		{"engine.yaml blockCacheOnFlush (cache each block a flush writes)", fmt.Sprint(e.BlockCacheOnFlush)},
		{"engine.yaml compaction.minFiles · KVCluster spec.engine.compaction.minFiles", fmt.Sprint(e.Compaction.MinFiles)},
		{"engine.yaml compaction.maxFiles · KVCluster spec.engine.compaction.maxFiles", fmt.Sprint(e.Compaction.MaxFiles)},
		{"engine.yaml compaction.ratio · KVCluster spec.engine.compaction.ratio", fmt.Sprint(e.Compaction.Ratio)},
		{"engine.yaml compaction.maxBytes · KVCluster spec.engine.compaction.maxBytes", size(e.Compaction.MaxBytes)},
		{"engine.yaml offload · KVCluster spec.engine.offload · store --offload", string(e.Offload)},
		{"engine.yaml warmup.mode · KVCluster spec.engine.warmup.mode", string(e.Warmup.Mode)},
		{"engine.yaml syncMode · KVCluster spec.engine.syncMode", string(e.SyncMode)},
		{"KVCluster spec.replicas", fmt.Sprint(DefaultKVClusterReplicas)},
		{"KVCluster spec.image · CompactionPool spec.image · operator --default-image", "the operator's own image (" + ImageRepository + ":<operator version>)"},
		{"KVCluster spec.resources (when empty)", fmt.Sprintf("requests cpu %s, memory = blockCacheBytes + (memstore.bytes + pinned) + %s (one region); limit memory = blockCacheBytes + regions × (memstore.bytes + pinned) + %s (every region); pinned = %s per GiB of the split size, rounded up to a MiB (docs/memory.md)", DefaultStoreCPURequest, size(StoreMemoryOverhead), size(StoreMemoryOverhead), size(PinnedIndexBytesPerGiB))},
		{"CompactionPool spec.resources (when empty)", fmt.Sprintf("requests cpu %s, memory = limit memory = cacheBytes + %s", DefaultWorkerCPURequest, size(WorkerMemoryOverhead))},
		{"Go runtime soft memory limit (store, compactor, operator)", fmt.Sprintf("%v × the container's memory limit (cgroup); GOMEMLIMIT, or AUTOMEMLIMIT (a ratio, or off), in the environment overrides it", GoMemoryLimitRatio)},
		{"KVCluster spec.storage.size", DefaultStorageSize},
		{"KVCluster spec.regions.count · store --regions (the first region map's)", fmt.Sprint(DefaultRegionCount)},
		{"store --split-bytes (bellows local: half of --cache-bytes)", size(DefaultSplitBytes)},
		{"KVCluster spec.regions.splitBytes (0: never splits)", fmt.Sprintf("half of the compactionPoolRef's cacheBytes (m/2, at least memstore.bytes); without a pool %s", size(DefaultSplitBytes))},
		{"KVCluster spec.regions.splitQPS · store --split-qps (0: never splits by load)", fmt.Sprint(DefaultSplitQPS)},
		{"store: region sizes checked against --split-bytes every", dur(DefaultSplitCheckInterval)},
		{"store: region load window (splits by load)", dur(DefaultLoadWindow)},
		{"store: the bucket checked for a newer region map every", dur(DefaultMapPollInterval)},
		{"store --merge-bytes: adjacent regions each under it (and together under half the split size) merge", "a quarter of --split-bytes"},
		{"store --merge-after: how long such neighbours stay small and cold before they merge", dur(DefaultMergeAfter)},
		{"KVCluster spec.regions.recutTolerancePercent (÷100) · store --recut-tolerance: once the cluster's data and two adjacent regions held their size for --merge-after, the balancer re-cuts them when one is further than this from the mean region size (0: never; none when merges are off)", fmt.Sprint(DefaultRecutTolerance)},
		{"store: the balancer (lease holder) plans region moves every", dur(DefaultBalanceInterval)},
		{"store: a term of the balancer lease", dur(DefaultBalancerLeaseTerm)},
		{"store: the balancer's tolerance around the mean bytes and requests/s per store", fmt.Sprintf("±%.0f%%", 100*DefaultBalanceTolerance)},
		{"store: region moves in flight at once, cluster-wide", fmt.Sprint(DefaultMaxMovesInFlight)},
		{"store --balance-min-bytes: the least gap from the mean bytes the balancer acts on", size(DefaultBalanceMinBytes)},
		{"store: the least gap from the mean requests/s the balancer acts on", fmt.Sprint(DefaultBalanceMinQPS)},
		{"operator: a scale-down drains the leaving stores for at most (then shrinks anyway)", dur(StoreDrainTimeout)},
		{"KVCluster spec.failover.nodeLostAfter: a storage pod whose node has been NotReady (or unreachable) this long is force-deleted and replaced", dur(StoreNodeLostAfter)},
		{"CompactionPool spec.replicas", fmt.Sprint(DefaultPoolReplicas)},
		{"CompactionPool spec.minReplicas", fmt.Sprint(DefaultPoolMinReplicas)},
		{"CompactionPool spec.maxReplicas", fmt.Sprint(DefaultPoolMaxReplicas)},
		{"CompactionPool spec.cacheBytes (m) · compactor --cache-bytes", size(DefaultWorkerCacheBytes)},
		{"CompactionPool spec.transferRateBytesPerSecond (w) · compactor --transfer-rate", fmt.Sprintf("%d B/s", DefaultTransferRate)},
		{"CompactionPool spec.drainTimeout · compactor --drain-timeout", dur(DefaultDrainTimeout)},
		{"compactor --output-ttl", dur(DefaultOutputTTL)},
		{"CompactionPool spec.autoscaling.interval (t)", dur(DefaultAutoscalingInterval)},
		{"CompactionPool spec.autoscaling.syncPeriod", dur(DefaultAutoscalingSync)},
		{"CompactionPool spec.autoscaling.scaleUpStabilizationWindow", dur(DefaultScaleUpWindow)},
		{"CompactionPool spec.autoscaling.scaleDownStabilizationWindow", dur(DefaultScaleDownWindow)},
		{"CompactionPool spec.autoscaling.maxCompactionWait", dur(DefaultMaxCompactionWait)},
		{"KVCluster spec.durability.mode · store --durability", DefaultDurability},
		{"store --release-timeout", dur(DefaultReleaseTimeout)},
		{"store --ownership-check-interval", dur(DefaultOwnershipCheckInterval)},
		{"store --release-poll-interval", dur(DefaultReleasePollInterval)},
		{"store --txn-lock-ttl", dur(DefaultTxnLockTTL)},
		{"KVCluster spec.clock.maxOffset · store --max-clock-offset (0: clock checks off)", dur(DefaultMaxClockOffset)},
		{"store clock offset check interval", dur(DefaultClockCheckInterval)},
		{"store: a renewal of the store's liveness lease expires after (it serves until then minus the clock offset)", dur(DefaultLivenessTerm)},
		{"store: the liveness lease renewed every", dur(DefaultLivenessRenewInterval)},
		{"store: the balancer checks every store's liveness lease (and fences the expired) every", dur(DefaultFailoverCheckInterval)},
		{"store: a region map epoch stays in the bucket once superseded for (and every epoch from the oldest backup's on)", dur(DefaultMapEpochRetention)},
		{"store: a balancer lease term or liveness record stays in the bucket once superseded for", dur(DefaultLeaseLogRetention)},
		{"store: the newest map epochs, lease terms and liveness records of each store kept whatever their age", fmt.Sprint(DefaultFencingLogKeep)},
		{"store: the balancer deletes lease terms and liveness records past their retention every (map epochs every " + dur(DefaultJanitorInterval) + ")", dur(DefaultFencingLogCollectInterval)},
		{"store --txn-timeout", dur(DefaultTxnTimeout)},
		{"store --remote-block-timeout", dur(DefaultRemoteBlockTimeout)},
		{"store --remote-block-retry-after", dur(DefaultRemoteBlockRetryAfter)},
		{"store --remote-cache-rate", fmt.Sprintf("%d B/s", DefaultRemoteCacheRate)},
		{"store pod terminationGracePeriodSeconds", dur(StoreGracePeriod)},
		{"graceful gRPC stop on SIGTERM (store, compactor)", dur(GracefulStopTimeout)},
		{"store: a starting store waits this long for an object store that does not answer, then exits", dur(BucketStartupWait)},
		{"worker pod terminationGracePeriodSeconds", "drainTimeout + " + dur(DrainGraceHeadroom)},
		{"operator --scrape-timeout", dur(DefaultScrapeTimeout)},
		{"operator --network-policies · chart networkPolicy.enabled", fmt.Sprint(DefaultNetworkPolicies)},
		{"operator --monitoring-namespace · chart networkPolicy.monitoringNamespaces", DefaultMonitoringNamespace},
		{"storage pod not Ready this long: its rollout is stuck (a newer spec replaces it)", dur(RolloutProgressDeadline)},
		{"ServiceMonitor interval", dur(ScrapeInterval)},
		{"largest key (client and store)", size(MaxKeyBytes)},
		{"largest value (client and store)", size(MaxValueBytes)},
		{"largest batch, keys and values together (client and store)", size(MaxBatchBytes)},
		{"largest gRPC message (store, client, forwarding)", size(MaxMessageBytes)},
		{"store gRPC port", fmt.Sprint(StoreGRPCPort)},
		{"compactor gRPC port", fmt.Sprint(CompactorGRPCPort)},
		{"store and compactor metrics port", fmt.Sprint(MetricsPort)},
		{"operator metrics and health port (TLS)", fmt.Sprint(OperatorMetricsPort)},
	}
}

func size(n int64) string {
	for _, u := range []struct {
		unit  string
		bytes int64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if n >= u.bytes && n%u.bytes == 0 {
			return fmt.Sprintf("%d %s", n/u.bytes, u.unit)
		}
	}
	return humanize.IBytes(uint64(n))
}

// dur prints 10m, 1h, 1m20s rather than 10m0s, 1h0m0s.
func dur(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// DefaultsMarkdown is docs/defaults.md.
func DefaultsMarkdown() string {
	var b strings.Builder
	b.WriteString("# Defaults\n\n")
	b.WriteString("Generated from `internal/contract` by `make generate`; do not edit. Every layer\n")
	b.WriteString("(engine, CLI flags, engine.yaml, the CRDs' defaults, the operator) takes these values\n")
	b.WriteString("from that one package, and tests fail when a layer disagrees.\n\n")
	b.WriteString("| setting | default |\n|---|---|\n")
	for _, s := range Settings() {
		fmt.Fprintf(&b, "| %s | %s |\n", s.Where, s.Value)
	}
	return b.String()
}
