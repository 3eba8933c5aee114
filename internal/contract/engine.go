package contract

import (
	"errors"
	"fmt"
	"slices"

	"sigs.k8s.io/yaml"
)

// EngineConfig is engine.yaml: the storage engine's settings. The operator
// renders it from KVCluster.spec.engine into a ConfigMap; `bellows store
// --config FILE` reads it. A zero field means "the default" (EnsureDefaults).
type EngineConfig struct {
	Memstore        Memstore  `json:"memstore"`
	Retention       Retention `json:"retention"`
	BlockCacheBytes int64     `json:"blockCacheBytes"`
	// BlockCacheOnFlush caches each block a memstore flush writes as it
	// writes it (RocksDB's prepopulate_block_cache = kFlushOnly, HBase's
	// cacheDataOnWrite): the flushed data was being read from memory a
	// moment before, and a file not cached is read from the bucket, a
	// block per miss, until it is. Off by default, as in both; engine.yaml
	// only. Compactions' outputs follow warmup.mode instead.
	BlockCacheOnFlush bool        `json:"blockCacheOnFlush,omitempty"`
	Compaction        Compaction  `json:"compaction"`
	Offload           OffloadMode `json:"offload"`
	Warmup            Warmup      `json:"warmup"`
	SyncMode          SyncMode    `json:"syncMode"`
}

// Memstore configures the memstore.
type Memstore struct {
	Policy MemstorePolicy `json:"policy"`
	// Bytes is the size at which a region's memstore is flushed.
	Bytes int64 `json:"bytes"`
	// MaxWALBytes bounds each region's WAL: past it the memstore is
	// flushed so the WAL can be truncated (recovery time stays bounded).
	MaxWALBytes int64 `json:"maxWALBytes"`
	// MaxWALAge flushes a region whose oldest unflushed write is this
	// old, however little its memstore holds.
	MaxWALAge Duration `json:"maxWALAge"`
	// MaxStoreWALBytes caps the WAL of all of a store's regions together:
	// past it the regions with the oldest unflushed writes are flushed
	// first. 0: the store's memstore budget (its open regions × bytes).
	MaxStoreWALBytes int64 `json:"maxStoreWALBytes,omitempty"`
	// ActiveFraction (Accordion's A), PipelineSegments (S) and
	// RedundancyThreshold (Adaptive's R) tune the compacting policies;
	// engine.yaml only (the CRD keeps to the policy).
	ActiveFraction      float64 `json:"activeFraction"`
	PipelineSegments    int     `json:"pipelineSegments"`
	RedundancyThreshold float64 `json:"redundancyThreshold"`
}

// Retention says which old versions compactions, on disk and in memory,
// may drop (storage-engine/retention has the rule).
type Retention struct {
	// GCTTL is the history kept, as TiKV's and CockroachDB's MVCC GC
	// keep it: every read at a timestamp up to GCTTL old is exact, and a
	// version superseded longer ago than that is garbage unless an open
	// snapshot (a transaction's pinned start) reads it; a read older than
	// GCTTL is refused as SNAPSHOT_TOO_OLD. In-memory (Eager, Adaptive)
	// and disk compactions drop the garbage. 0, the default, keeps every
	// version.
	GCTTL Duration `json:"gcTTL"`
	// MaxVersions > 0 bounds versions by count instead: at most this many
	// newest versions of each key (and every version an open snapshot
	// reads) are kept, and a read below the newest data is exact only at
	// a pinned snapshot; GCTTL does not apply. 0: no count bound.
	MaxVersions int `json:"maxVersions"`
}

// Compaction is HBase's exploring/ratio minor-compaction policy.
type Compaction struct {
	MinFiles int     `json:"minFiles"`
	MaxFiles int     `json:"maxFiles"`
	Ratio    float64 `json:"ratio"`
	MaxBytes int64   `json:"maxBytes"`
}

// Warmup selects how the block cache moves to a compaction's output.
type Warmup struct {
	Mode WarmupMode `json:"mode"`
	// RateBytesPerSecond is w for ThrottledIncremental.
	RateBytesPerSecond int64 `json:"rateBytesPerSecond,omitempty"`
}

// MemstorePolicy is the Accordion policy.
type MemstorePolicy string

// The memstore policies (storage-engine/memstore).
const (
	MemstoreNone     MemstorePolicy = "None"
	MemstoreBasic    MemstorePolicy = "Basic"
	MemstoreEager    MemstorePolicy = "Eager"
	MemstoreAdaptive MemstorePolicy = "Adaptive"
)

// MemstorePolicies lists every policy, in the order the CRD enum has them.
var MemstorePolicies = []MemstorePolicy{MemstoreNone, MemstoreBasic, MemstoreEager, MemstoreAdaptive}

// OffloadMode decides where compactions run.
type OffloadMode string

// The offload modes.
const (
	// OffloadRequired: jobs run only on workers; when none takes a job it waits.
	OffloadRequired OffloadMode = "Required"
	// OffloadPreferred: jobs run on workers; when none takes a job it runs locally.
	OffloadPreferred OffloadMode = "Preferred"
	// OffloadDisabled: every job runs in the store.
	OffloadDisabled OffloadMode = "Disabled"
)

// RunsLocally reports whether compactions in this warmup mode run in the
// store whatever the offload setting: WriteThrough caches what the store
// itself writes.
func (m WarmupMode) RunsLocally() bool { return m == WarmupWriteThrough }

// OffloadModes lists every mode, in the order the CRD enum has them.
var OffloadModes = []OffloadMode{OffloadRequired, OffloadPreferred, OffloadDisabled}

// WarmupMode is how the block cache moves to a compaction's output.
type WarmupMode string

// The warmup modes, in the engine's order (region.WarmupMode has the same
// names; a test in the store role checks every name converts).
const (
	WarmupNone                 WarmupMode = "None"
	WarmupOffload              WarmupMode = "Offload"
	WarmupRemoteCache          WarmupMode = "RemoteCache"
	WarmupPreSwitch            WarmupMode = "PreSwitch"
	WarmupIncremental          WarmupMode = "Incremental"
	WarmupThrottledIncremental WarmupMode = "ThrottledIncremental"
	// WarmupWriteThrough is the paper's §5.3.1 baseline: compactions run
	// in the store, which caches the output's blocks as it writes them.
	WarmupWriteThrough WarmupMode = "WriteThrough"
)

// WarmupModes lists every mode, in the order the CRD enum has them.
var WarmupModes = []WarmupMode{WarmupNone, WarmupOffload, WarmupRemoteCache, WarmupPreSwitch, WarmupIncremental, WarmupThrottledIncremental, WarmupWriteThrough}

// TransfersOutput reports whether a store in this mode streams compaction
// output back from the workers (FetchBlocks). The capacity model charges a
// compaction b/w of transfer time only then: in None and Offload the store
// reads the output from the bucket, and in WriteThrough it compacts
// locally, so a worker (if any) is free once it has written the output.
func (m WarmupMode) TransfersOutput() bool {
	switch m {
	case WarmupRemoteCache, WarmupPreSwitch, WarmupIncremental, WarmupThrottledIncremental:
		return true
	}
	return false
}

// SyncMode says when a write is acknowledged.
type SyncMode string

// The WAL sync modes.
const (
	// SyncModeSync fsyncs the WAL before acknowledging.
	SyncModeSync SyncMode = "sync"
	// SyncModeAsync acknowledges once the write is appended.
	SyncModeAsync SyncMode = "async"
)

// SyncModes lists every mode, in the order the CRD enum has them.
var SyncModes = []SyncMode{SyncModeSync, SyncModeAsync}

// DefaultEngineConfig is engine.yaml with every default filled in.
func DefaultEngineConfig() EngineConfig {
	return EngineConfig{
		Memstore: Memstore{
			Policy: DefaultMemstorePolicy, Bytes: DefaultMemstoreBytes,
			MaxWALBytes:    DefaultMaxWALMemstores * DefaultMemstoreBytes,
			MaxWALAge:      Duration{DefaultMaxWALAge},
			ActiveFraction: DefaultMemstoreActiveFraction, PipelineSegments: DefaultMemstorePipelineSegments,
			RedundancyThreshold: DefaultMemstoreRedundancyThreshold,
		},
		Retention:       Retention{GCTTL: Duration{DefaultGCTTL}},
		BlockCacheBytes: DefaultBlockCacheBytes,
		Compaction: Compaction{
			MinFiles: DefaultCompactionMinFiles, MaxFiles: DefaultCompactionMaxFiles,
			Ratio: DefaultCompactionRatio, MaxBytes: DefaultCompactionMaxBytes,
		},
		Offload:  DefaultOffload,
		Warmup:   Warmup{Mode: DefaultWarmupMode},
		SyncMode: DefaultSyncMode,
	}
}

// EnsureDefaults fills every zero field with its default.
func (c *EngineConfig) EnsureDefaults() {
	d := DefaultEngineConfig()
	if c.Memstore.Policy == "" {
		c.Memstore.Policy = d.Memstore.Policy
	}
	if c.Memstore.Bytes == 0 {
		c.Memstore.Bytes = d.Memstore.Bytes
	}
	if c.Memstore.MaxWALBytes == 0 {
		c.Memstore.MaxWALBytes = DefaultMaxWALMemstores * c.Memstore.Bytes
	}
	if c.Memstore.MaxWALAge.Duration == 0 {
		c.Memstore.MaxWALAge = d.Memstore.MaxWALAge
	}
	if c.Memstore.ActiveFraction == 0 {
		c.Memstore.ActiveFraction = d.Memstore.ActiveFraction
	}
	if c.Memstore.PipelineSegments == 0 {
		c.Memstore.PipelineSegments = d.Memstore.PipelineSegments
	}
	if c.Memstore.RedundancyThreshold == 0 {
		c.Memstore.RedundancyThreshold = d.Memstore.RedundancyThreshold
	}
	if c.Retention.GCTTL.Duration == 0 {
		c.Retention.GCTTL = d.Retention.GCTTL
	}
	if c.BlockCacheBytes == 0 {
		c.BlockCacheBytes = d.BlockCacheBytes
	}
	if c.Compaction.MinFiles == 0 {
		c.Compaction.MinFiles = d.Compaction.MinFiles
	}
	if c.Compaction.MaxFiles == 0 {
		c.Compaction.MaxFiles = d.Compaction.MaxFiles
	}
	if c.Compaction.Ratio == 0 {
		c.Compaction.Ratio = d.Compaction.Ratio
	}
	if c.Compaction.MaxBytes == 0 {
		c.Compaction.MaxBytes = d.Compaction.MaxBytes
	}
	if c.Offload == "" {
		c.Offload = d.Offload
	}
	if c.Warmup.Mode == "" {
		c.Warmup.Mode = d.Warmup.Mode
	}
	if c.SyncMode == "" {
		c.SyncMode = d.SyncMode
	}
}

// Validate reports every problem of a defaulted config, each naming its
// engine.yaml key.
func (c EngineConfig) Validate() error {
	var errs []error
	bad := func(key string, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s %s: "+format, append([]any{EngineConfigFile, key}, args...)...))
	}
	oneOf := func(key string, v string, allowed []string) {
		if !slices.Contains(allowed, v) {
			bad(key, "%q is not one of %v", v, allowed)
		}
	}
	oneOf("memstore.policy", string(c.Memstore.Policy), names(MemstorePolicies))
	oneOf("offload", string(c.Offload), names(OffloadModes))
	oneOf("warmup.mode", string(c.Warmup.Mode), names(WarmupModes))
	oneOf("syncMode", string(c.SyncMode), names(SyncModes))
	if c.Memstore.Bytes < MinMemstoreBytes {
		bad("memstore.bytes", "%d is below the minimum %d (1 MiB)", c.Memstore.Bytes, MinMemstoreBytes)
	}
	if c.Memstore.MaxWALBytes < c.Memstore.Bytes {
		bad("memstore.maxWALBytes", "%d is below memstore.bytes %d: every memstore would be flushed before it fills", c.Memstore.MaxWALBytes, c.Memstore.Bytes)
	}
	if c.Memstore.MaxWALAge.Duration < MinMaxWALAge {
		bad("memstore.maxWALAge", "%v is below the minimum %v: a region would flush a file every few writes; e.g. %v", c.Memstore.MaxWALAge, MinMaxWALAge, DefaultMaxWALAge)
	}
	if c.Memstore.MaxStoreWALBytes < 0 {
		bad("memstore.maxStoreWALBytes", "%d is negative (0: the store's memstore budget)", c.Memstore.MaxStoreWALBytes)
	} else if c.Memstore.MaxStoreWALBytes > 0 && c.Memstore.MaxStoreWALBytes < c.Memstore.Bytes {
		bad("memstore.maxStoreWALBytes", "%d is below memstore.bytes %d: the store would flush every memstore before it fills", c.Memstore.MaxStoreWALBytes, c.Memstore.Bytes)
	}
	if !(c.Memstore.ActiveFraction > 0 && c.Memstore.ActiveFraction <= 1) {
		bad("memstore.activeFraction", "%v is not in (0, 1], e.g. %v", c.Memstore.ActiveFraction, DefaultMemstoreActiveFraction)
	}
	if c.Memstore.PipelineSegments < 1 {
		bad("memstore.pipelineSegments", "%d is below 1, e.g. %d", c.Memstore.PipelineSegments, DefaultMemstorePipelineSegments)
	}
	if !(c.Memstore.RedundancyThreshold > 0 && c.Memstore.RedundancyThreshold < 1) {
		bad("memstore.redundancyThreshold", "%v is not in (0, 1), e.g. %v", c.Memstore.RedundancyThreshold, DefaultMemstoreRedundancyThreshold)
	}
	if d := c.Retention.GCTTL.Duration; d != 0 && d < MinGCTTL {
		bad("retention.gcTTL", "%v is below the minimum %v: reads a clock offset old would be refused; e.g. 10m, or 0 to keep every version", c.Retention.GCTTL, MinGCTTL)
	}
	if c.Retention.MaxVersions < 0 {
		bad("retention.maxVersions", "%d is negative (0: no count bound; retention.gcTTL decides)", c.Retention.MaxVersions)
	}
	if c.BlockCacheBytes < 0 {
		bad("blockCacheBytes", "%d is negative", c.BlockCacheBytes)
	}
	if c.Compaction.MinFiles < 2 {
		bad("compaction.minFiles", "%d is below 2", c.Compaction.MinFiles)
	}
	if c.Compaction.MaxFiles < c.Compaction.MinFiles {
		bad("compaction.maxFiles", "%d is below minFiles %d", c.Compaction.MaxFiles, c.Compaction.MinFiles)
	}
	if c.Compaction.Ratio <= 0 {
		bad("compaction.ratio", "%v must be positive", c.Compaction.Ratio)
	}
	if c.Compaction.MaxBytes <= 0 {
		bad("compaction.maxBytes", "%d must be positive", c.Compaction.MaxBytes)
	}
	if c.Warmup.RateBytesPerSecond < 0 {
		bad("warmup.rateBytesPerSecond", "%d is negative", c.Warmup.RateBytesPerSecond)
	}
	if c.Warmup.Mode == WarmupThrottledIncremental && c.Warmup.RateBytesPerSecond <= 0 {
		bad("warmup.rateBytesPerSecond", "mode ThrottledIncremental needs a positive rate")
	}
	return errors.Join(errs...)
}

func names[T ~string](vs []T) []string {
	out := make([]string, len(vs))
	for i, v := range vs {
		out[i] = string(v)
	}
	return out
}

// MarshalEngineConfig renders engine.yaml. Output is deterministic (keys sorted).
func MarshalEngineConfig(c EngineConfig) ([]byte, error) {
	return yaml.Marshal(c)
}

// UnmarshalEngineConfig parses engine.yaml, rejecting unknown keys. It does
// not fill defaults.
func UnmarshalEngineConfig(data []byte) (EngineConfig, error) {
	var c EngineConfig
	if err := yaml.UnmarshalStrict(data, &c); err != nil {
		return EngineConfig{}, fmt.Errorf("%s: %w", EngineConfigFile, err)
	}
	return c, nil
}
