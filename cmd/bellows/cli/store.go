package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/bellows-kv/bellows/cmd/bellows/serve"
	"github.com/bellows-kv/bellows/cmd/bellows/store"
	"github.com/bellows-kv/bellows/internal/contract"
)

func newStoreCommand() *cobra.Command {
	cfg := store.Default()
	var offload, memstorePolicy string
	cmd := &cobra.Command{
		Use:   "store",
		Short: "Run a storage pod: serve regions over gRPC (bellows.kv.v1.KV), offload their compactions",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg.OffloadOverride = contract.OffloadMode(offload)
			cfg.MemstorePolicyOverride = contract.MemstorePolicy(memstorePolicy)
			if !cmd.Flags().Changed(contract.FlagMergeBytes) {
				cfg.MergeBytes = cfg.SplitBytes / 4
			}
			if err := cfg.LoadEngineConfig(); err != nil {
				return err
			}
			if err := cfg.Validate(); err != nil {
				return err
			}
			log := serve.NewLogger(cmd.ErrOrStderr(), "store")
			setMemoryLimit(log)
			return store.Run(cmd.Context(), cfg, log, cmd.OutOrStdout())
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.Listen, contract.FlagListen, cfg.Listen, "gRPC address")
	f.StringVar(&cfg.MetricsListen, contract.FlagMetricsListen, cfg.MetricsListen, "HTTP address of /metrics, /healthz and /readyz")
	f.StringVar(&cfg.Bucket, contract.FlagBucket, "", "bucket URL of region files and manifests (file://, s3://, gs://, azblob://)")
	f.BoolVar(&cfg.CreateBucket, contract.FlagCreateBucket, false,
		"start a new, empty cluster in a file:// bucket that holds none (no "+contract.BucketMarker+"); without it such a bucket is refused as a likely mistyped path (object-store buckets are always accepted)")
	f.StringVar(&cfg.WALDir, contract.FlagWALDir, "", "local directory for the regions' WALs")
	f.StringVar(&cfg.ConfigFile, contract.FlagConfig, "", "engine settings file (engine.yaml); default settings if empty")
	f.IntVar(&cfg.Regions, contract.FlagRegions, cfg.Regions, "split the key space evenly by first byte into this many regions")
	f.StringSliceVar(&cfg.SplitKeys, contract.FlagSplitKeys, nil, "split the key space at these keys instead, e.g. g,p")
	f.Var(sizeFlag{&cfg.SplitBytes}, contract.FlagSplitBytes,
		"split a region whose data (files plus memstore) passes this size at the key that halves it, e.g. 512MiB; keep it at most half the workers' cache (--"+contract.FlagCacheBytes+") so a region's major compaction stays offloadable; 0 never splits")
	f.Float64Var(&cfg.SplitQPS, contract.FlagSplitQPS, cfg.SplitQPS,
		"split a region serving more requests per second than this, and more than twice its store's median, at a sampled key that halves its load (a single hot key is never split); 0 never splits by load")
	f.Var(sizeFlag{&cfg.MergeBytes}, contract.FlagMergeBytes,
		"merge two adjacent regions of this store when each holds less than this (and together less than half --"+contract.FlagSplitBytes+"), for --"+contract.FlagMergeAfter+"; default a quarter of --"+contract.FlagSplitBytes+"; 0 never merges")
	f.DurationVar(&cfg.MergeAfter, contract.FlagMergeAfter, cfg.MergeAfter, "how long two adjacent regions must stay small (and cold) before they merge")
	f.Float64Var(&cfg.RecutTolerance, contract.FlagRecutTolerance, cfg.RecutTolerance,
		"the balancer re-cuts two adjacent regions that held their size for --"+contract.FlagMergeAfter+" when one is further than this fraction from the mean region size (merged, then split at their byte median); 0 never re-cuts, nor does a store with --"+contract.FlagMergeBytes+"=0")
	f.DurationVar(&cfg.BalanceInterval, contract.FlagBalanceInterval, cfg.BalanceInterval,
		"with several stores, how often the store holding the balancer lease moves regions so every store holds about the mean bytes and requests (docs/regions.md); 0: this store never balances")
	f.Var(sizeFlag{&cfg.BalanceMinBytes}, contract.FlagBalanceMinBytes, "the least gap from the mean bytes per store the balancer moves regions for, e.g. 64MiB")
	f.IntVar(&cfg.MaxMovesInFlight, contract.FlagMaxMovesInFlight, cfg.MaxMovesInFlight, "region moves the balancer keeps under way at once, cluster-wide")
	f.DurationVar(&cfg.LoadWindow, contract.FlagLoadWindow, cfg.LoadWindow, "the window each region's request rate is measured over (splits and merges by load, the balancer)")
	f.StringVar(&cfg.RegionOwner, contract.FlagRegionOwner, "", "ORDINAL/REPLICAS: serve region i when i mod REPLICAS = ORDINAL (default all); with --"+contract.FlagReplicasFrom+", only ORDINAL")
	f.StringVar(&cfg.ReplicasFrom, contract.FlagReplicasFrom, "", "NAMESPACE/STATEFULSET whose spec.replicas is REPLICAS, watched: a replica change re-assigns the regions of the running store (needs get/list/watch on statefulsets)")
	f.StringSliceVar(&cfg.Compactors, contract.FlagCompactors, nil, "compaction workers, host:port,...")
	f.StringVar(&cfg.CompactorService, contract.FlagCompactorService, "", "NAMESPACE/NAME of the workers' Service (the ready endpoints of its EndpointSlices; needs list/watch on endpointslices)")
	f.StringVar(&offload, contract.FlagOffload, "", "Required, Preferred or Disabled; overrides engine.yaml")
	f.StringVar(&memstorePolicy, contract.FlagMemstorePolicy, "", fmt.Sprintf("the in-memory compaction policy, one of %v; overrides engine.yaml memstore.policy (default %s)", contract.MemstorePolicies, contract.DefaultMemstorePolicy))
	f.StringSliceVar(&cfg.Peers, contract.FlagPeers, nil, "the stores of the cluster, host:port,... (this one may be listed): requests for their regions are forwarded to them")
	f.StringVar(&cfg.PeerService, contract.FlagPeerService, "", "NAMESPACE/NAME of the stores' headless Service: the peers are its EndpointSlices' endpoints (needs list/watch on endpointslices)")
	f.BoolVar(&cfg.ForceTakeover, contract.FlagForceTakeover, false,
		"claim assigned regions even if another store owns them and has not released them: fence that store's WAL stream in the bucket and replay it (with --"+contract.FlagDurability+" "+contract.DurabilityBucket+" nothing acknowledged is lost; with "+contract.DurabilityLocal+", what its archive had not shipped is); use only when that store is gone")
	f.DurationVar(&cfg.OwnershipCheckInterval, contract.FlagOwnershipCheckInterval, cfg.OwnershipCheckInterval,
		"how often each region checks the bucket for a newer owner, so a store whose region was forcibly taken over stops acknowledging writes; 0 checks only at its own manifest commits")
	f.StringVar(&cfg.TLSDir, contract.FlagTLSDir, "", "directory of ca.crt, tls.crt and tls.key: serve mutual TLS (clients need a certificate of the CA, or a token with --"+contract.FlagTokensFile+") and dial peers and compactors with it; \"\": plaintext")
	f.StringVar(&cfg.TokensFile, contract.FlagTokensFile, "",
		"with --"+contract.FlagTLSDir+": a file of tokens, one per line \"ROLE SHA256 NAME\" (role read, write or admin; the token's SHA-256 in hex): a client may present one (authorization: Bearer TOKEN) instead of a certificate; reloaded when it changes")
	f.DurationVar(&cfg.WALArchiveInterval, contract.FlagWALArchiveInterval, cfg.WALArchiveInterval,
		"how often each region ships its WAL to the bucket's archive (wal-archive/), for point-in-time restore and against a lost volume: the most acknowledged writes a lost volume can take with it; 0 does not archive")
	f.StringVar(&cfg.Durability, contract.FlagDurability, cfg.Durability,
		"where a write is durable before it is acknowledged: "+contract.DurabilityBucket+" (its group commit in the region's WAL stream in the bucket: a lost node or volume loses no acknowledged write, RPO 0; a write waits for one bucket PUT) or "+
			contract.DurabilityLocal+" (the local WAL; the archive follows every --"+contract.FlagWALArchiveInterval+", which is the RPO when the node or volume is lost) (docs/failover.md)")
	f.DurationVar(&cfg.ReleaseTimeout, contract.FlagReleaseTimeout, cfg.ReleaseTimeout,
		"on SIGTERM, how long to spend releasing the regions (running compactions aborted, flushed, marked released) before the remaining requests are finished; a region not released in time stays owned by this store's WAL (it must fit in the pod's grace period)")
	f.DurationVar(&cfg.ReleasePollInterval, contract.FlagReleasePollInterval, cfg.ReleasePollInterval,
		"how often a region that another store owns is checked for its release (one bucket existence check per waiting region), so it is claimed that soon after")
	f.DurationVar(&cfg.TxnLockTTL, contract.FlagTxnLockTTL, cfg.TxnLockTTL,
		"how long the locks of a cross-region transaction's commit hold before a request that meets one may roll the transaction back (when its coordinator, the store owning its first key, crashed mid-commit)")
	f.DurationVar(&cfg.MaxClockOffset, contract.FlagMaxClockOffset, cfg.MaxClockOffset,
		"the largest offset between two stores' clocks the cluster tolerates: transactional reads restart on a version within it above their start, and a store whose clock is beyond 80% of it from a majority of its peers refuses requests (docs/clock.md); 0 turns both off")
	f.DurationVar(&cfg.TestClockOffset, contract.FlagTestClockOffset, 0, "test only: move this store's physical clock by this much")
	_ = f.MarkHidden(contract.FlagTestClockOffset)
	f.DurationVar(&cfg.TxnTimeout, contract.FlagTxnTimeout, cfg.TxnTimeout,
		"how long a transaction BeginTxn registered may stay open (neither committed nor rolled back) before it times out and its store stops keeping the versions it reads")
	f.DurationVar(&cfg.RemoteBlockTimeout, contract.FlagRemoteBlockTimeout, cfg.RemoteBlockTimeout,
		"RemoteCache warmup: how long a cache miss waits for a block from the compaction worker's memory before reading the bucket instead (keep it well under clients' deadlines)")
	f.DurationVar(&cfg.RemoteBlockRetryAfter, contract.FlagRemoteBlockRetryAfter, cfg.RemoteBlockRetryAfter,
		"RemoteCache warmup: after a worker failed a block read, how long misses read the bucket without asking it, before one read probes it again")
	f.Var(rateFlag{&cfg.RemoteCacheRate}, contract.FlagRemoteCacheRate,
		"RemoteCache warmup: bytes per second this store pulls from workers' memory for cache misses, all workers together, e.g. 8MB/s; misses past it read the bucket (0: unbounded)")
	_ = cmd.MarkFlagRequired(contract.FlagBucket)
	_ = cmd.MarkFlagRequired(contract.FlagWALDir)
	cmd.MarkFlagsMutuallyExclusive(contract.FlagRegions, contract.FlagSplitKeys)
	cmd.MarkFlagsMutuallyExclusive(contract.FlagPeers, contract.FlagPeerService)
	cmd.MarkFlagsMutuallyExclusive(contract.FlagCompactors, contract.FlagCompactorService)
	return cmd
}
