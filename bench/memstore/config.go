// Package memstore reproduces the write-only results of Accordion
// (Bortnikov et al., VLDB 2018, §5): every in-memory compaction policy
// (None, Basic, Eager, Adaptive) on the same write workload, in the paper's
// shape scaled to this machine (16 B keys, 100 B values, writes in batches
// of ~10 KB, async WAL, a 64 MiB memstore, Zipf θ = 0.99 and uniform keys,
// retention of one version), with a reader of gets and 20-key scans running
// during the writes. Runs are interleaved over the policies and summarised
// by medians and spread; ratios are against None in the same invocation.
package memstore

import (
	"fmt"
	"math"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/bellows-kv/bellows/bench/report"
	"github.com/bellows-kv/bellows/internal/contract"
	"github.com/bellows-kv/bellows/storage-engine/memstore"
)

// The key distributions.
const (
	Zipf    = "zipf"
	Uniform = "uniform"
)

// Config is one invocation. Its JSON form is memstore.json's "config".
type Config struct {
	Policies      []string `json:"policies"`
	Distributions []string `json:"distributions"`
	// Keys is the key space: the writers and the reader draw from
	// [0, Keys).
	Keys      int     `json:"keys"`
	KeySize   int     `json:"keySize"`
	ValueSize int     `json:"valueSize"`
	Theta     float64 `json:"zipfTheta"`
	// Writes are the puts of one run, all writers together.
	Writes  int `json:"writes"`
	Writers int `json:"writers"`
	// BatchBytes is the client-side batch (the paper's 10 KB buffers):
	// a batch holds BatchBytes / (KeySize + ValueSize) puts.
	BatchBytes   int `json:"batchBytes"`
	PutsPerBatch int `json:"putsPerBatch"`
	// PacedWrites are puts issued after Writes at PacedWritesPerSec (all
	// writers together), a rate every policy sustains: the reader's
	// latency during them compares the policies' read paths under the
	// same write load. During the Writes, which run as fast as each
	// policy can, a policy that writes faster also takes more of the CPU
	// the reader needs. 0 skips the phase.
	PacedWrites       int `json:"pacedWrites"`
	PacedWritesPerSec int `json:"pacedWritesPerSecond"`
	// RawBytes is (Writes + PacedWrites) × (KeySize + ValueSize): the data
	// one run writes.
	RawBytes int64 `json:"rawBytesPerRun"`
	// ReadsPerSec paces the reader (open loop): gets and 20-key scans
	// alternate, so half of it each.
	ReadsPerSec int `json:"readsPerSecond"`
	ScanLength  int `json:"scanLength"`
	// ReaderOwnCore gives the reader the machine's last CPU to itself in
	// both phases (bench/cpu.OwnCore, which also doubles GOMAXPROCS so a P is free when it wakes): the
	// writers, the memstore's background work and the GC run on the other
	// CPUs, so the reader's latency is its read path's, not time spent
	// waiting for a CPU the writers hold.
	ReaderOwnCore bool `json:"readerOwnCore"`
	// IdleWriters (with ReaderOwnCore) runs each writer goroutine of the
	// full-speed writes on a thread of its own under SCHED_IDLE
	// (bench/cpu.LockIdle; not the paced ones, see writeAll): the
	// runtime's threads on the writers' CPU, which hand the reader back its
	// thread after a preemption or a wait, then preempt the writers at once
	// instead of queueing behind them.
	IdleWriters bool `json:"idleWriters"`
	// WriterYield (with ReaderOwnCore) has each writer of the full-speed
	// writes yield its CPU (bench/cpu.Yield) after each batch, as a
	// server's handler leaves it between requests: a runtime thread that
	// must hand the reader its thread back, or stop for the GC, waits at
	// most one batch for the writers.
	WriterYield bool `json:"writerYield,omitempty"`
	// The region.
	MemstoreBytes int64 `json:"memstoreBytes"`
	// ActiveFraction (A), PipelineSegments (S) and RedundancyThreshold
	// (R): 0 in a config takes the engine's defaults (internal/contract);
	// the resolved config states the values that ran.
	ActiveFraction      float64 `json:"activeFraction"`
	PipelineSegments    int     `json:"pipelineSegments"`
	RedundancyThreshold float64 `json:"redundancyThreshold"`
	// MaxVersions is the retention: 1 keeps only the newest version (so
	// Eager and Adaptive can drop the older ones); 0 keeps every version.
	MaxVersions int `json:"retentionMaxVersions"`
	// GCTTL, with MaxVersions 0, is the GC window (retention.gcTTL: the
	// engine's default retention): versions superseded longer ago are
	// dropped. 0 with MaxVersions 0 keeps every version (the engine's
	// default before gcTTL).
	GCTTL      time.Duration `json:"retentionGCTTL,omitempty"`
	WALMode    string        `json:"walMode"`
	CacheBytes int64         `json:"blockCacheBytes"`
	// CacheFlushes caches each block a flush writes (region.Options
	// CacheFlushes); false leaves a flushed file cold until it is read.
	CacheFlushes bool `json:"cacheFlushes,omitempty"`
	// Runs per policy and distribution, interleaved over the policies.
	Runs int    `json:"runs"`
	Seed uint64 `json:"seed"`
	// Goals are what the run is expected to show, stated before it ran.
	Goals []string `json:"goals"`
	// Machine and runtime, and when the run started (UTC), filled by Run.
	Machine string `json:"machine,omitempty"`
	Started string `json:"started,omitempty"`
	// Command is the command line that regenerates the report
	// (bellows-bench fills it in).
	Command string `json:"command,omitempty"`
	report.Provenance
	// TraceDir, when set, receives a runtime execution trace of each run's
	// full-speed writes, TraceWindow long from TraceAfter into them
	// (<distribution>-<policy>-<round>.trace): where the reader waited
	// (go tool trace -pprof=sched, -focus 'reader\).run'). A diagnostic,
	// not in the report.
	TraceDir string `json:"-"`
	// TraceSlow, with TraceDir, replaces the fixed window by a flight
	// recorder over each run's full-speed writes: the first read slower
	// than TraceSlow writes the recorder's last seconds, that read among
	// them, to <distribution>-<policy>-<round>-slow.trace. The waits that
	// move a run's mean are a few reads of many milliseconds, too rare for
	// a fixed 3 s window to catch (docs/memstore.md, "Measuring reads
	// while writers run flat out").
	TraceSlow time.Duration `json:"-"`
}

// TraceAfter and TraceWindow place Config.TraceDir's trace inside the
// full-speed writes, which last 8 s or more at the default size: past the
// first flushes, short enough to read.
const (
	TraceAfter  = 4 * time.Second
	TraceWindow = 3 * time.Second
	// slowTraceAge is how far back a slow read's trace reaches: the read,
	// and what led up to it (a GC cycle's mark phase lasts up to a second
	// at full speed).
	slowTraceAge = 2 * time.Second
)

// The goals of issue #12, stated before the run.
const (
	GoalBasicThroughput = "Basic ≥ +25% write throughput over None on Zipf (the paper: +47.6% on SSD, +25.4% on HDD)"
	GoalAdaptiveIO      = "Adaptive ≤ 0.5× None's flushes and ≤ 0.75× its SST bytes written (the paper: −58% flushes, ≈ −30% bytes)"
	// GoalReads is issue #12's get p99 goal with issue #27's mean scan
	// beside it, judged with the reader on a core of its own.
	GoalReads = "no policy worse than 1.10× None's get p99 or mean scan"
	// The reads goal is judged twice: during the saturated writes and
	// during the paced writes (the same write load).
	goalReadsSaturated = GoalReads + ", during the writes at full speed"
	goalReadsPaced     = GoalReads + ", during the paced writes (every policy at the same write rate)"
)

// The goals' thresholds.
const (
	basicMinWriteRatio    = 1.25
	adaptiveMaxFlushRatio = 0.5
	adaptiveMaxSSTRatio   = 0.75
	maxReadRatioVsNone    = 1.10
)

const (
	defaultMemstoreBytes = 64 << 20
	// defaultWritesPerMemstore: a run writes this many memstores of raw
	// data (Writes × (key + value)), so None flushes to disk several times.
	defaultWritesPerMemstore = 6
)

// DefaultKeys is the key space of the default run: 2,000,000 keys, the
// paper's ratio of key space to memstore. The paper's write-only run has
// 100M keys over 50 regions (2M per region) and flushes a region's memstore
// about every 340K puts (None: 1468 flushes for 500M puts). Here a 64 MiB
// memstore under None holds about 350K puts of 116 B (measured: 10 flushes
// for 3.5M puts; the skiplist's per-entry overhead is the rest), so 2M keys
// keep that ratio. Under Zipf θ = 0.99 one memstore's 350K writes then
// touch about a third as many distinct keys (the top key takes ~6% of the
// writes, the top thousand about half): the hot set is overwritten many
// times within one memstore, the regime where in-memory compaction
// matters. Under uniform keys ~90% of a memstore's writes are to distinct
// keys: the reference case where it cannot help.
const DefaultKeys = 2_000_000

// Default is the full run: both distributions, the four policies, five
// interleaved runs each, ≈ 6 × 64 MiB of raw data per run (3.5M puts: about
// 10 disk flushes under None). 40 runs of 8–16 s on two idle cores (None is
// the slowest): about 10 minutes.
func Default() Config {
	c := Config{
		Policies:      []string{string(memstore.None), string(memstore.Basic), string(memstore.Eager), string(memstore.Adaptive)},
		Distributions: []string{Zipf, Uniform},
		Keys:          DefaultKeys,
		KeySize:       16,
		ValueSize:     100,
		Theta:         0.99,
		Writers:       2,
		BatchBytes:    10_000,
		ReadsPerSec:   2000,
		ReaderOwnCore: runtime.NumCPU() >= 2,
		WriterYield:   true,
		// 800K puts at 100K/s: 8 s of reads (8000 gets) under a write
		// load about half of None's full speed on this machine.
		PacedWrites:       800_000,
		PacedWritesPerSec: 100_000,
		ScanLength:        20,
		MemstoreBytes:     defaultMemstoreBytes,
		MaxVersions:       1,
		CacheBytes:        256 << 20,
		Runs:              5,
		Seed:              12,
	}
	c.Writes = DefaultWrites(c.MemstoreBytes, c.KeySize+c.ValueSize)
	return c.Resolved()
}

// DefaultWrites is the writes of a run for a memstore: 6 × its bytes of raw
// data, rounded up to 100K puts, so None flushes it to disk several times.
func DefaultWrites(memstoreBytes int64, putBytes int) int {
	n := float64(defaultWritesPerMemstore*memstoreBytes) / float64(putBytes)
	return int(math.Ceil(n/100_000) * 100_000)
}

// Resolved fills what a config derives: the engine's defaults for A, S and
// R, puts per batch, raw bytes, the WAL mode and the goals.
func (c Config) Resolved() Config {
	if c.ActiveFraction == 0 {
		c.ActiveFraction = contract.DefaultMemstoreActiveFraction
	}
	if c.PipelineSegments == 0 {
		c.PipelineSegments = contract.DefaultMemstorePipelineSegments
	}
	if c.RedundancyThreshold == 0 {
		c.RedundancyThreshold = contract.DefaultMemstoreRedundancyThreshold
	}
	if put := c.KeySize + c.ValueSize; put > 0 {
		c.PutsPerBatch = max(c.BatchBytes/put, 1)
	}
	c.RawBytes = int64(c.Writes+c.PacedWrites) * int64(c.KeySize+c.ValueSize)
	c.WALMode = "async"
	c.Goals = []string{GoalBasicThroughput, GoalAdaptiveIO, GoalReads}
	return c
}

// Validate reports the first setting out of range, naming its flag.
func (c Config) Validate() error {
	if len(c.Policies) == 0 || len(c.Distributions) == 0 {
		return fmt.Errorf("--policies and --distributions must not be empty")
	}
	for _, p := range c.Policies {
		switch memstore.Policy(p) {
		case memstore.None, memstore.Basic, memstore.Eager, memstore.Adaptive:
		default:
			return fmt.Errorf("--policies: %q is not one of None, Basic, Eager, Adaptive", p)
		}
	}
	if !slices.Contains(c.Policies, string(memstore.None)) {
		return fmt.Errorf("--policies must include None: every ratio is against it")
	}
	for _, d := range c.Distributions {
		if d != Zipf && d != Uniform {
			return fmt.Errorf("--distributions: %q is not one of %s, %s", d, Zipf, Uniform)
		}
	}
	switch {
	case c.Keys <= 0 || c.Writes <= 0 || c.Writers <= 0 || c.Runs <= 0:
		return fmt.Errorf("--keys, --writes, --writers and --runs must be positive")
	case c.KeySize < 16:
		// keyOf writes "k" and 15 digits; wider keys are padded.
		return fmt.Errorf("--key-size %d: at least 16", c.KeySize)
	case c.ValueSize <= 0 || c.BatchBytes <= 0:
		return fmt.Errorf("--value-size and --batch-bytes must be positive")
	case c.PacedWrites < 0 || c.PacedWritesPerSec < 0 || (c.PacedWrites > 0 && c.PacedWritesPerSec == 0):
		return fmt.Errorf("--paced-writes must not be negative, and --paced-rate must be positive when --paced-writes is")
	case c.ReadsPerSec < 0 || c.ScanLength <= 0:
		return fmt.Errorf("--reads must not be negative and --scan-length must be positive")
	case c.MemstoreBytes < contract.MinMemstoreBytes:
		return fmt.Errorf("--memstore-mib: at least %d MiB", contract.MinMemstoreBytes>>20)
	case c.Theta <= 0 || c.Theta >= 1:
		return fmt.Errorf("--theta %v must be in (0, 1) (YCSB's generator)", c.Theta)
	case c.MaxVersions < 0:
		return fmt.Errorf("--max-versions must not be negative")
	case c.GCTTL < 0:
		return fmt.Errorf("--gc-ttl must not be negative")
	case c.CacheBytes <= 0:
		return fmt.Errorf("--cache-mib must be positive")
	case c.WriterYield && c.IdleWriters:
		return fmt.Errorf("--writer-yield and --idle-writers: choose one (an idle writer needs no yield, and starves)")
	case c.TraceSlow < 0 || (c.TraceSlow > 0 && c.TraceDir == ""):
		return fmt.Errorf("--trace-slow %v: must not be negative, and needs --trace-dir for its traces", c.TraceSlow)
	}
	if c.Keys >= 1e15 {
		return fmt.Errorf("--keys %d: at most 15 digits", c.Keys)
	}
	return nil
}

func (c Config) String() string {
	return fmt.Sprintf("%s × %s, %d keys, %d writes × %d runs", strings.Join(c.Policies, ","), strings.Join(c.Distributions, ","), c.Keys, c.Writes, c.Runs)
}
