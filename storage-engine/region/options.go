package region

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/bellows-kv/bellows/internal/contract"
	"github.com/bellows-kv/bellows/storage-engine/blob"
	"github.com/bellows-kv/bellows/storage-engine/blockcache"
	"github.com/bellows-kv/bellows/storage-engine/compaction"
	"github.com/bellows-kv/bellows/storage-engine/hlc"
	"github.com/bellows-kv/bellows/storage-engine/memstore"
	"github.com/bellows-kv/bellows/storage-engine/sstable"
	"github.com/bellows-kv/bellows/storage-engine/wal"
)

// MaxKeySize is the largest key accepted.
const MaxKeySize = 64 << 10

// Options configure a region.
type Options struct {
	// Name identifies the region; its files live under regions/<Name>/.
	Name string
	// Clock issues the region's timestamps: the store's, shared by its
	// regions and its transactions (docs/clock.md). Nil: a clock of its
	// own on the wall clock, with no offset bound.
	Clock *hlc.Clock
	// Bucket holds SSTs and manifests.
	Bucket *blob.Bucket
	// WALDir is a local directory owned by this region.
	WALDir string
	// WALMode: sync (fsync before acknowledging) or async.
	WALMode         wal.Mode
	WALSyncInterval time.Duration
	// MemstoreBytes is the size at which the active memstore is frozen and
	// flushed.
	MemstoreBytes int64
	// MaxImmutableMemstores frozen memstores may wait for flush before
	// writers stall.
	MaxImmutableMemstores int
	// Memstore is the in-memory compaction (Accordion): the policy and
	// its parameters A, S and R; FlushBytes is MemstoreBytes.
	Memstore MemstoreOptions
	// MaxWALBytes bounds the region's WAL: past it the memstore is flushed
	// to disk so the WAL can be truncated, bounding recovery.
	MaxWALBytes int64
	// BlockCache may be shared by regions; nil disables caching.
	BlockCache *blockcache.Cache
	// SST configures the files written by flushes and compactions.
	SST sstable.WriterOptions
	// CacheFlushes puts each block a flush writes into BlockCache as it is
	// written (RocksDB's prepopulate_block_cache = kFlushOnly, HBase's
	// cacheDataOnWrite): what a flush writes was being read from the
	// memstore a moment before, and without it every read of the new file
	// misses until the file has been read once. Compactions' outputs are
	// not cached by it (Warmup decides those). engine.yaml's
	// blockCacheOnFlush.
	CacheFlushes bool
	// MaxValueSize is the largest value accepted.
	MaxValueSize int
	// MaxBatchBytes bounds one atomic batch.
	MaxBatchBytes int
	// Compaction selects minor compactions.
	Compaction compaction.Policy
	// DisableAutoCompaction stops minor compactions after flushes (tests
	// and benchmarks that drive compaction themselves).
	DisableAutoCompaction bool
	// Retention decides which old versions compactions keep.
	Retention compaction.Retention
	// Executor runs compactions; nil runs them in this process.
	Executor compaction.Executor
	// Warmup says how the cache moves to a compaction's output.
	Warmup WarmupMode
	// WarmupRateBytes bounds ThrottledIncremental warmup (bytes/s).
	WarmupRateBytes int64
	// Owner names this opener in manifests (diagnostics).
	Owner string
	// Lease is this opener's liveness lease, "<store>/<incarnation>",
	// recorded in the manifest it claims (manifest.Manifest.Lease).
	Lease string
	// DeriveFrom, for a region made by a split or merge whose first
	// manifest is not committed yet, names the parents' final manifests to
	// derive it from (split.go); ignored once the region has a manifest.
	DeriveFrom *DeriveFrom
	// ForceTakeover claims the region even if another store owns it and
	// has not released it (that store is dead, or its volume lost): it
	// fences the owner's WAL stream in the bucket and replays what the
	// stream holds, which is every write the owner acknowledged when it
	// kept its WAL in the bucket (WALInBucket), and what its archive had
	// shipped otherwise (docs/failover.md). The old owner is fenced: it
	// can neither flush nor acknowledge a write through the stream.
	ForceTakeover bool
	// WALInBucket (durability mode Bucket, docs/failover.md): every group
	// commit is in the region's WAL stream in the bucket before it is
	// acknowledged, so losing the store's node or volume loses no
	// acknowledged write; the local WAL is fsynced only as WALMode says.
	// Needs WALArchiveInterval, at which the stream's frontier is recorded.
	WALInBucket bool
	// WALArchiveInterval, if positive, ships the WAL to the bucket's
	// archive (wal-archive/, package walarchive) this often: the most
	// acknowledged writes a lost volume can take with it (the RPO). The
	// WAL keeps a segment until it is archived.
	WALArchiveInterval time.Duration
	// OwnershipCheckInterval: how often an open region looks for a newer
	// manifest than its own, so a store whose region was taken over
	// stops acknowledging writes; 0 checks only at its own commits.
	OwnershipCheckInterval time.Duration
	Logger                 *slog.Logger
	// BeforeFlushCommit, if set, runs once a flush has written its file
	// and before the manifest that lets the flushed WAL segments go:
	// whatever else must outlive them is saved there (the store: the
	// region's idempotency keys, which those segments' records carried).
	// It cannot fail the flush. final: the region refuses writes (a
	// release, split or merge); the hook then runs beside the file's
	// write, and the flush commits once both are done.
	BeforeFlushCommit func(ctx context.Context, final bool)
	// KeepReplayedRequests is how many of the newest requests (Batch
	// WithRequest) Open's WAL replay keeps for TakeReplayedRequests; 0
	// keeps none. The store keeps as many as its idempotency table holds.
	KeepReplayedRequests int
}

// MemstoreOptions configure the compacting memstore (memstore.Config).
type MemstoreOptions struct {
	Policy              memstore.Policy
	ActiveFraction      float64
	PipelineSegments    int
	RedundancyThreshold float64
}

func (o *Options) applyDefaults() {
	if o.Clock == nil {
		o.Clock = hlc.New(nil, 0)
	}
	if o.MemstoreBytes <= 0 {
		o.MemstoreBytes = contract.DefaultMemstoreBytes
	}
	m := &o.Memstore
	if m.Policy == "" {
		m.Policy = memstore.Policy(contract.DefaultMemstorePolicy)
	}
	if m.ActiveFraction == 0 {
		m.ActiveFraction = contract.DefaultMemstoreActiveFraction
	}
	if m.PipelineSegments == 0 {
		m.PipelineSegments = contract.DefaultMemstorePipelineSegments
	}
	if m.RedundancyThreshold == 0 {
		m.RedundancyThreshold = contract.DefaultMemstoreRedundancyThreshold
	}
	if o.MaxWALBytes <= 0 {
		o.MaxWALBytes = contract.DefaultMaxWALMemstores * o.MemstoreBytes
	}
	if o.MaxImmutableMemstores <= 0 {
		o.MaxImmutableMemstores = 2
	}
	if o.MaxValueSize <= 0 {
		o.MaxValueSize = 4 << 20
	}
	if o.MaxBatchBytes <= 0 {
		o.MaxBatchBytes = 64 << 20
	}
	if o.Compaction == (compaction.Policy{}) {
		o.Compaction = compaction.DefaultPolicy()
	}
	if o.SST.BlockSize == 0 {
		o.SST.BlockSize = 32 << 10
		o.SST.Compression = sstable.S2Compression
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
}

func (o *Options) validate() error {
	switch {
	case o.Name == "":
		return errors.New("region: options: Name is required")
	case o.Bucket == nil:
		return errors.New("region: options: Bucket is required")
	case o.WALDir == "":
		return errors.New("region: options: WALDir is required")
	}
	if err := o.memstoreConfig(nil).Validate(); err != nil {
		return fmt.Errorf("region: options: %w", err)
	}
	if err := o.Compaction.Validate(); err != nil {
		return fmt.Errorf("region: options: %w", err)
	}
	if o.Warmup == WarmupThrottledIncremental && o.WarmupRateBytes <= 0 {
		return fmt.Errorf("region: options: warmup mode ThrottledIncremental needs a positive rate, got %d bytes/s", o.WarmupRateBytes)
	}
	if o.WALInBucket && o.WALArchiveInterval <= 0 {
		return errors.New("region: options: WALInBucket needs a positive WALArchiveInterval (the WAL stream's frontier is recorded at it)")
	}
	if o.Retention.MaxVersions < 0 {
		return fmt.Errorf("region: options: retention maxVersions %d is negative", o.Retention.MaxVersions)
	}
	return nil
}

// memstoreConfig is the configuration of each memstore the region starts.
func (o *Options) memstoreConfig(stats *memstore.Stats) memstore.Config {
	return memstore.Config{
		Policy:              o.Memstore.Policy,
		FlushBytes:          o.MemstoreBytes,
		ActiveFraction:      o.Memstore.ActiveFraction,
		PipelineSegments:    o.Memstore.PipelineSegments,
		RedundancyThreshold: o.Memstore.RedundancyThreshold,
		Stats:               stats,
	}
}
