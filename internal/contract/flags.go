package contract

import "fmt"

// Flag names of `bellows store` and `bellows compactor` that the operator
// passes. The CLI binds these names; the operator builds arguments with Arg.
const (
	FlagListen        = "listen"
	FlagMetricsListen = "metrics-listen"

	// store
	FlagBucket      = "bucket"
	FlagWALDir      = "wal-dir"
	FlagConfig      = "config"
	FlagRegions     = "regions"
	FlagSplitKeys   = "split-keys"
	FlagRegionOwner = "region-owner"
	// FlagSplitBytes: a region whose data passes it splits in two
	// (docs/regions.md); 0 never splits.
	FlagSplitBytes = "split-bytes"
	// FlagSplitQPS: a region serving more requests per second than this
	// (and more than twice its store's median) splits at a sampled key;
	// 0 never splits by load.
	FlagSplitQPS = "split-qps"
	// FlagLoadWindow is the window request rates are measured over, for
	// splits and merges by load and for the balancer.
	FlagLoadWindow = "load-window"
	// FlagMergeBytes: adjacent regions on one store, each smaller than
	// this, merge (default a quarter of --split-bytes; 0 never merges);
	// FlagMergeAfter is how long they must stay that small and cold.
	FlagMergeBytes = "merge-bytes"
	FlagMergeAfter = "merge-after"
	// FlagRecutTolerance: two adjacent regions that held their size for
	// --merge-after, one further than this fraction from the mean region
	// size, are re-cut (merged and split at their byte median); 0 never.
	FlagRecutTolerance = "recut-tolerance"
	// FlagBalanceInterval: how often the balancer (the store holding its
	// lease) plans region moves; 0 turns the balancer off in this store.
	FlagBalanceInterval = "balance-interval"
	// FlagBalanceMinBytes: the least gap from the mean bytes a store
	// must show before the balancer moves regions.
	FlagBalanceMinBytes = "balance-min-bytes"
	// FlagMaxMovesInFlight bounds the region moves under way at once.
	FlagMaxMovesInFlight = "max-moves-in-flight"
	// FlagReplicasFrom is NAMESPACE/STATEFULSET: the replica count is
	// that StatefulSet's spec.replicas, watched, and --region-owner is
	// only the ORDINAL.
	FlagReplicasFrom           = "replicas-from"
	FlagCompactors             = "compactors"
	FlagCompactorService       = "compactor-service"
	FlagOffload                = "offload"
	FlagMemstorePolicy         = "memstore-policy"
	FlagPeers                  = "peers"
	FlagPeerService            = "peer-service"
	FlagForceTakeover          = "force-takeover"
	FlagOwnershipCheckInterval = "ownership-check-interval"
	FlagWALArchiveInterval     = "wal-archive-interval"
	FlagDurability             = "durability"
	// FlagTLSDir is a directory of ca.crt, tls.crt and tls.key
	// (internal/tlsconfig): the process serves and dials mutual TLS.
	FlagTLSDir = "tls-dir"
	// FlagTokensFile is a store's tokens file (ROLE SHA256 NAME per line,
	// internal/tlsconfig's Tokens): with --tls-dir, a client may present a
	// bearer token of it instead of a certificate.
	FlagTokensFile            = "tokens-file"
	FlagReleaseTimeout        = "release-timeout"
	FlagReleasePollInterval   = "release-poll-interval"
	FlagTxnLockTTL            = "txn-lock-ttl"
	FlagMaxClockOffset        = "max-clock-offset"
	FlagTestClockOffset       = "test-clock-offset"
	FlagTxnTimeout            = "txn-timeout"
	FlagRemoteBlockTimeout    = "remote-block-timeout"
	FlagRemoteBlockRetryAfter = "remote-block-retry-after"
	FlagRemoteCacheRate       = "remote-cache-rate"

	// compactor
	FlagCacheBytes          = "cache-bytes"
	FlagTransferRate        = "transfer-rate"
	FlagLinkLatency         = "link-latency"
	FlagCompactionRateLimit = "compaction-rate-limit"
	FlagDrainTimeout        = "drain-timeout"
	FlagOutputTTL           = "output-ttl"
	FlagName                = "name"
)

// Arg renders one flag as the operator passes it: --name=value.
func Arg(name string, value any) string { return fmt.Sprintf("--%s=%v", name, value) }

// PodIndexEnv is the environment variable holding a store pod's ordinal
// (from the StatefulSet's apps.kubernetes.io/pod-index label); the operator
// passes --region-owner=$(POD_INDEX) with --replicas-from, so the replica
// count is not in the pod template.
const PodIndexEnv = "POD_INDEX"

// PodNamespaceEnv is the environment variable holding a pod's namespace
// (the downward API's metadata.namespace): the storage pods' own, and the
// operator's, which its NetworkPolicies let scrape the metrics ports.
const PodNamespaceEnv = "POD_NAMESPACE"

// FlagCreateBucket lets `bellows store` (and `bellows local`) start a new
// cluster in a file:// bucket that holds none (no BucketMarker): without
// it, such a bucket is refused as a likely mistyped path.
const FlagCreateBucket = "create-bucket"
