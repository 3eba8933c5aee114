// Package store is the composition root of `bellows store`, a storage pod:
// it turns a Config into a running store (bucket, block cache, offload
// executor, regions, forwarding, gRPC and HTTP servers). The CLI only binds
// flags and engine.yaml to Config.
package store

import (
	"errors"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/bellows-kv/bellows/internal/contract"
	"github.com/bellows-kv/bellows/internal/discovery"
	"github.com/bellows-kv/bellows/storage-engine/server"
)

// Config is everything a store runs with.
type Config struct {
	Listen, MetricsListen string
	// Bucket is the URL of region files and manifests.
	Bucket string
	// CreateBucket starts a new cluster in a file:// bucket that holds
	// none; without it such a bucket is refused (a mistyped path).
	CreateBucket bool
	// WALDir is the local directory of the regions' WALs.
	WALDir string
	// ConfigFile is engine.yaml; empty runs with Engine as given.
	ConfigFile string
	// Engine is engine.yaml's content (LoadEngineConfig fills it from
	// ConfigFile). An OffloadOverride replaces its offload mode.
	Engine          contract.EngineConfig
	OffloadOverride contract.OffloadMode
	// MemstorePolicyOverride replaces engine.yaml's memstore.policy.
	MemstorePolicyOverride contract.MemstorePolicy

	// Regions splits the key space evenly; SplitKeys, when set, splits it
	// at these keys instead.
	Regions   int
	SplitKeys []string
	// SplitBytes: a region whose data passes it splits (0: never). The
	// regions above are only the cluster's first: the region map in the
	// bucket says which exist after that.
	SplitBytes int64
	// SplitQPS: a region serving more requests per second than this (and
	// more than twice its store's median) splits at a sampled key (0:
	// never by load).
	SplitQPS float64
	// BalanceInterval: how often the balancer plans moves while this
	// store holds its lease (0: never here); MaxMovesInFlight bounds the
	// moves under way at once.
	BalanceInterval  time.Duration
	MaxMovesInFlight int
	BalanceMinBytes  int64
	// MergeBytes: adjacent regions each under it merge after MergeAfter
	// (0: never); the command's default is a quarter of SplitBytes.
	MergeBytes int64
	MergeAfter time.Duration
	// RecutTolerance: the balancer's re-cuts of uneven neighbours that
	// stopped growing (0: none; none either when merges are off).
	RecutTolerance float64
	// LoadWindow is the window request rates are measured over.
	LoadWindow time.Duration
	// RegionOwner is ORDINAL/REPLICAS; empty serves every region. With
	// ReplicasFrom it is only the ORDINAL.
	RegionOwner string
	// ReplicasFrom is NAMESPACE/STATEFULSET: REPLICAS is its spec.replicas,
	// watched, and the store is re-assigned on every change.
	ReplicasFrom string

	// Compactors is a static list of workers; CompactorService discovers
	// them from a Kubernetes Service's EndpointSlices (NAMESPACE/NAME).
	Compactors       []string
	CompactorService string
	// Peers is a static list of the cluster's stores; PeerService
	// discovers them from the headless Service. Neither: no forwarding.
	Peers       []string
	PeerService string

	ForceTakeover          bool
	OwnershipCheckInterval time.Duration
	// WALArchiveInterval: how often each region ships its WAL to the
	// bucket's archive (the RPO of durability Local); 0 does not archive.
	WALArchiveInterval time.Duration
	// Durability: contract.DurabilityBucket (every group commit in the
	// bucket before its ack) or contract.DurabilityLocal.
	Durability string
	// TLSDir, when set, serves mutual TLS from it and dials peers and
	// compaction workers with it (internal/tlsconfig).
	TLSDir string
	// TokensFile, with TLSDir, lets clients authenticate with a bearer
	// token of this file instead of a certificate (tlsconfig.Tokens),
	// reloaded when it changes.
	TokensFile string
	// ReleaseTimeout bounds the release of the regions on SIGTERM.
	ReleaseTimeout time.Duration
	// ReleasePollInterval: how often a region another store owns is
	// checked for its release.
	ReleasePollInterval time.Duration
	// TxnLockTTL: how long a cross-region commit's locks hold before a
	// reader may roll the transaction back.
	TxnLockTTL time.Duration
	// MaxClockOffset bounds how far apart the stores' clocks may be
	// (docs/clock.md); 0 turns the clock checks and read uncertainty off.
	MaxClockOffset time.Duration
	// TestClockOffset moves this store's physical clock: the process
	// tests' skewed stores. Not a setting.
	TestClockOffset time.Duration
	// TxnTimeout: how long a transaction BeginTxn registered may stay
	// open before it times out.
	TxnTimeout time.Duration
	// RemoteBlockTimeout and RemoteBlockRetryAfter shape block reads from
	// workers' memory (RemoteCache warmup): offload.Options.
	RemoteBlockTimeout    time.Duration
	RemoteBlockRetryAfter time.Duration
	// RemoteCacheRate bounds the bytes per second of those reads, all
	// workers together (0: unbounded).
	RemoteCacheRate float64
}

// Default is a store's configuration before flags: contract defaults, no
// bucket or WAL directory.
func Default() Config {
	return Config{
		Listen:                 fmt.Sprintf(":%d", contract.StoreGRPCPort),
		MetricsListen:          fmt.Sprintf(":%d", contract.MetricsPort),
		Engine:                 contract.DefaultEngineConfig(),
		Regions:                int(contract.DefaultRegionCount),
		SplitBytes:             contract.DefaultSplitBytes,
		SplitQPS:               float64(contract.DefaultSplitQPS),
		BalanceInterval:        contract.DefaultBalanceInterval,
		MergeBytes:             contract.DefaultSplitBytes / 4,
		BalanceMinBytes:        contract.DefaultBalanceMinBytes,
		MergeAfter:             contract.DefaultMergeAfter,
		RecutTolerance:         contract.DefaultRecutTolerance,
		LoadWindow:             contract.DefaultLoadWindow,
		MaxMovesInFlight:       contract.DefaultMaxMovesInFlight,
		OwnershipCheckInterval: contract.DefaultOwnershipCheckInterval,
		WALArchiveInterval:     contract.DefaultWALArchiveInterval,
		Durability:             contract.DefaultDurability,
		ReleaseTimeout:         contract.DefaultReleaseTimeout,
		ReleasePollInterval:    contract.DefaultReleasePollInterval,
		TxnLockTTL:             contract.DefaultTxnLockTTL,
		TxnTimeout:             contract.DefaultTxnTimeout,
		MaxClockOffset:         contract.DefaultMaxClockOffset,
		RemoteBlockTimeout:     contract.DefaultRemoteBlockTimeout,
		RemoteBlockRetryAfter:  contract.DefaultRemoteBlockRetryAfter,
		RemoteCacheRate:        float64(contract.DefaultRemoteCacheRate),
	}
}

// LoadEngineConfig reads ConfigFile, when set, into Engine and fills its
// defaults.
func (c *Config) LoadEngineConfig() error {
	if c.ConfigFile != "" {
		data, err := os.ReadFile(c.ConfigFile)
		if err != nil {
			return fmt.Errorf("--%s: %w", contract.FlagConfig, err)
		}
		if c.Engine, err = contract.UnmarshalEngineConfig(data); err != nil {
			return fmt.Errorf("--%s %s: %w", contract.FlagConfig, c.ConfigFile, err)
		}
	}
	c.Engine.EnsureDefaults()
	if c.OffloadOverride != "" {
		c.Engine.Offload = c.OffloadOverride
	}
	if c.MemstorePolicyOverride != "" {
		c.Engine.Memstore.Policy = c.MemstorePolicyOverride
	}
	return nil
}

// Validate reports every problem of the configuration, each naming its flag
// or engine.yaml key.
func (c Config) Validate() error {
	var errs []error
	flag := func(name, format string, args ...any) {
		errs = append(errs, fmt.Errorf("--%s: "+format, append([]any{name}, args...)...))
	}
	if c.Bucket == "" {
		flag(contract.FlagBucket, "required: the bucket URL of region files and manifests (file://, s3://, gs://, azblob://)")
	}
	if c.WALDir == "" {
		flag(contract.FlagWALDir, "required: a local directory for the regions' WALs")
	}
	if _, err := c.Spans(); err != nil {
		errs = append(errs, err)
	}
	if c.ReplicasFrom != "" {
		if _, err := c.Ordinal(); err != nil {
			errs = append(errs, err)
		}
		if _, _, err := discovery.ParseService(c.ReplicasFrom); err != nil {
			flag(contract.FlagReplicasFrom, "%v", err)
		}
	} else if _, err := server.ParseOwner(c.RegionOwner); err != nil {
		errs = append(errs, err)
	}
	if len(c.Compactors) > 0 && c.CompactorService != "" {
		flag(contract.FlagCompactors, "set either --%s or --%s, not both", contract.FlagCompactors, contract.FlagCompactorService)
	}
	if len(c.Peers) > 0 && c.PeerService != "" {
		flag(contract.FlagPeers, "set either --%s or --%s, not both", contract.FlagPeers, contract.FlagPeerService)
	}
	if c.Engine.Offload == contract.OffloadRequired && len(c.Compactors) == 0 && c.CompactorService == "" {
		errs = append(errs, fmt.Errorf("offload mode Required needs workers: pass --%s or --%s", contract.FlagCompactors, contract.FlagCompactorService))
	}
	if c.TokensFile != "" && c.TLSDir == "" {
		flag(contract.FlagTokensFile, "tokens are accepted over TLS only: give --%s too (a token sent in plaintext could be read on the way)", contract.FlagTLSDir)
	}
	if c.SplitBytes < 0 {
		flag(contract.FlagSplitBytes, "%d is negative; 0 never splits", c.SplitBytes)
	} else if c.SplitBytes > 0 && c.SplitBytes < contract.MinMemstoreBytes {
		flag(contract.FlagSplitBytes, "%d is under %d (the least memstore): a region would split at every flush", c.SplitBytes, contract.MinMemstoreBytes)
	}
	if c.SplitQPS < 0 || math.IsNaN(c.SplitQPS) || math.IsInf(c.SplitQPS, 0) {
		flag(contract.FlagSplitQPS, "%v is not a rate: write requests per second, e.g. 3000, or 0 to never split by load", c.SplitQPS)
	}
	if c.MergeBytes < 0 {
		flag(contract.FlagMergeBytes, "%d is negative; 0 never merges", c.MergeBytes)
	}
	if c.LoadWindow <= 0 {
		flag(contract.FlagLoadWindow, "%v must be positive, e.g. %v", c.LoadWindow, contract.DefaultLoadWindow)
	}
	if c.RecutTolerance < 0 || c.RecutTolerance >= 1 {
		flag(contract.FlagRecutTolerance, "%v must be in [0, 1), e.g. %v (0 never re-cuts)", c.RecutTolerance, contract.DefaultRecutTolerance)
	}
	if c.MergeAfter <= 0 {
		flag(contract.FlagMergeAfter, "%v must be positive, e.g. %v", c.MergeAfter, contract.DefaultMergeAfter)
	}
	if c.BalanceMinBytes < 0 {
		flag(contract.FlagBalanceMinBytes, "%d is negative", c.BalanceMinBytes)
	}
	if c.BalanceInterval < 0 {
		flag(contract.FlagBalanceInterval, "%v is negative; give how often to balance, e.g. 5s, or 0 never to balance from this store", c.BalanceInterval)
	}
	if c.MaxMovesInFlight < 1 {
		flag(contract.FlagMaxMovesInFlight, "%d: want at least 1 region move at a time", c.MaxMovesInFlight)
	}
	if c.OwnershipCheckInterval < 0 {
		flag(contract.FlagOwnershipCheckInterval, "%v is negative", c.OwnershipCheckInterval)
	}
	if c.WALArchiveInterval < 0 {
		flag(contract.FlagWALArchiveInterval, "%v is negative; write how often to ship the WAL to the bucket, e.g. 5s, or 0 not to archive it", c.WALArchiveInterval)
	}
	switch c.Durability {
	case contract.DurabilityBucket:
		if c.WALArchiveInterval == 0 {
			flag(contract.FlagDurability, "%s keeps the WAL in the bucket, which needs --%s above 0 (the stream's frontier is recorded at it); set it, or --%s %s",
				c.Durability, contract.FlagWALArchiveInterval, contract.FlagDurability, contract.DurabilityLocal)
		}
	case contract.DurabilityLocal:
	default:
		flag(contract.FlagDurability, "%q is not a durability mode: want one of %v", c.Durability, contract.DurabilityModes)
	}
	if c.ReleaseTimeout <= 0 {
		flag(contract.FlagReleaseTimeout, "%v must be positive", c.ReleaseTimeout)
	}
	if c.ReleasePollInterval <= 0 {
		flag(contract.FlagReleasePollInterval, "%v must be positive", c.ReleasePollInterval)
	}
	if c.MaxClockOffset < 0 {
		flag(contract.FlagMaxClockOffset, "%v is negative: give the largest offset between two stores' clocks (0 turns the checks off)", c.MaxClockOffset)
	}
	if c.TxnLockTTL < 100*time.Millisecond {
		flag(contract.FlagTxnLockTTL, "%v is under 100ms: commits would roll back before they finish", c.TxnLockTTL)
	}
	if c.TxnTimeout < time.Second {
		flag(contract.FlagTxnTimeout, "%v is under 1s: transactions would time out before a client could commit them", c.TxnTimeout)
	}
	if c.RemoteBlockTimeout <= 0 {
		flag(contract.FlagRemoteBlockTimeout, "%v must be positive", c.RemoteBlockTimeout)
	}
	if c.RemoteBlockRetryAfter <= 0 {
		flag(contract.FlagRemoteBlockRetryAfter, "%v must be positive", c.RemoteBlockRetryAfter)
	}
	if err := c.Engine.Validate(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// Ordinal is --region-owner's ORDINAL under --replicas-from.
func (c Config) Ordinal() (int, error) {
	o, err := strconv.Atoi(c.RegionOwner)
	if err != nil || o < 0 {
		return 0, fmt.Errorf("--%s %q: with --%s want the ORDINAL alone, e.g. 2", contract.FlagRegionOwner, c.RegionOwner, contract.FlagReplicasFrom)
	}
	return o, nil
}

// Spans is the whole key space's split into regions.
func (c Config) Spans() ([]server.Span, error) {
	if len(c.SplitKeys) > 0 {
		return server.SplitAt(c.SplitKeys)
	}
	return server.SplitEvenly(c.Regions)
}

// SplitList splits a comma-separated flag value, dropping blanks.
func SplitList(s string) []string {
	return strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' })
}
