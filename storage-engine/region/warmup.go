package region

// Invariants of an incremental warmup (WarmupIncremental,
// WarmupThrottledIncremental); testdata/warmup_routing shows them:
//   - The manifest names only the output before the warmup starts, so a
//     restart mid-warmup opens the new file alone.
//   - T only grows, through the output's blocks' last keys in order, each
//     block cached before T reaches it. A request is served wholly from the
//     side its first key falls on when it starts (readState.tablesFor): the
//     new file at or below T, the old ones above.
//   - An old block is evicted only once T has passed its last key, so no
//     request that T sends to the old files needs it again.
//   - Flushes during the warmup reach both sides; the old version, and with
//     it the input files, is dropped when the warmup ends (finishWarming).

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync/atomic"

	"golang.org/x/time/rate"

	"github.com/bellows-kv/bellows/storage-engine/compaction"
)

// WarmupMode says how a region's block cache moves from a compaction's
// inputs to its output (Ahmad & Kemme, VLDB 2015, §5.3–5.4).
type WarmupMode int

const (
	// WarmupNone: the standard setup; compactions run locally and the cache
	// is cold for the new file after the switch.
	WarmupNone WarmupMode = iota
	// WarmupOffload: compactions run remotely; the cache is cold after the
	// switch.
	WarmupOffload
	// WarmupRemoteCache: misses on the new file are served from the
	// worker's memory instead of the bucket.
	WarmupRemoteCache
	// WarmupPreSwitch: every new block is fetched before the switch.
	WarmupPreSwitch
	// WarmupIncremental: new blocks are fetched in key order behind a
	// threshold T; a get of a key ≤ T, or a scan starting ≤ T, reads only
	// the new file, anything else only the old ones; old blocks ≤ T are
	// evicted as T advances.
	WarmupIncremental
	// WarmupThrottledIncremental is WarmupIncremental at a bounded byte
	// rate (Options.WarmupRateBytes).
	WarmupThrottledIncremental
	// WarmupWriteThrough is the paper's write-through baseline (§5.3.1):
	// compactions run locally and the store caches the output's blocks as
	// it writes them (WriteThroughExecutor), before the switch, so the
	// cache is warm after it without reading the file; the new blocks
	// compete with the hot old ones for the cache meanwhile.
	WarmupWriteThrough
)

var warmupNames = []string{"None", "Offload", "RemoteCache", "PreSwitch", "Incremental", "ThrottledIncremental", "WriteThrough"}

func (m WarmupMode) String() string {
	if int(m) < len(warmupNames) {
		return warmupNames[m]
	}
	return fmt.Sprintf("WarmupMode(%d)", int(m))
}

// ParseWarmupMode is the inverse of WarmupMode.String, ignoring case: it
// accepts the names the KVCluster API and engine.yaml use.
func ParseWarmupMode(s string) (WarmupMode, error) {
	for i, n := range warmupNames {
		if strings.EqualFold(s, n) {
			return WarmupMode(i), nil
		}
	}
	return 0, fmt.Errorf("unknown warmup mode %q (want one of %s)", s, strings.Join(warmupNames, ", "))
}

// warming is the state of an incremental warmup: reads below the threshold
// use the current version (with the compaction's output), the others old.
type warming struct {
	old       *version // the version with the compaction's inputs
	threshold atomic.Pointer[[]byte]
	inputs    []*table
	// evicted[i] is the first block of inputs[i] not yet evicted: blocks
	// are in key order, so advancing T evicts a prefix.
	evicted []int
}

// below reports whether key ≤ T.
func (w *warming) below(key []byte) bool {
	t := w.threshold.Load()
	return t != nil && bytes.Compare(key, *t) <= 0
}

// WarmupStats count warmup work.
type WarmupStats struct {
	BytesFromCompactor atomic.Uint64
	BytesFromBucket    atomic.Uint64
	// Progress is the fraction of the output's blocks warmed, in
	// millionths, of the running or last warmup.
	Progress atomic.Uint64
	Warmups  atomic.Uint64
	// SwitchedAt is when the last compaction's output replaced its inputs
	// for readers (Unix nanoseconds).
	SwitchedAt atomic.Int64
}

// CachedFraction is the fraction of the live files' data blocks that are in
// the block cache.
func (r *Region) CachedFraction() float64 {
	r.mu.RLock()
	v := r.current
	v.ref()
	r.mu.RUnlock()
	defer v.unref()
	var cached, total int
	for _, t := range v.tables {
		total += t.reader.NumBlocks()
		cached += t.reader.CachedBlocks()
	}
	if total == 0 {
		return 1
	}
	return float64(cached) / float64(total)
}

// WarmupStats returns the region's warmup counters.
func (r *Region) WarmupStats() *WarmupStats { return &r.warmStats }

// Warming reports whether an incremental warmup is running, and T.
func (r *Region) Warming() (bool, []byte) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if r.warm == nil {
		return false, nil
	}
	if t := r.warm.threshold.Load(); t != nil {
		return true, *t
	}
	return true, nil
}

// warmBlocks loads every block of out into the cache in key order, from src
// while it works and from the bucket after it fails or if there is none,
// calling step after each block.
func (r *Region) warmBlocks(ctx context.Context, out *table, src compaction.BlockSource, rateBytes int64, step func(i int)) error {
	r.checkIO("warming blocks")
	n := out.reader.NumBlocks()
	next := 0
	if src != nil {
		err := src.Fetch(ctx, 0, rateBytes, func(i int, stored []byte) error {
			if i != next {
				return fmt.Errorf("warmup: worker sent block %d, expected %d", i, next)
			}
			if err := out.reader.InsertStoredBlock(i, stored); err != nil {
				return err
			}
			r.warmStats.BytesFromCompactor.Add(uint64(len(stored)))
			next++
			step(i)
			return nil
		})
		if err != nil && ctx.Err() != nil {
			return ctx.Err()
		}
		if err != nil {
			r.opts.Logger.Warn("warmup from the compaction worker failed; finishing from the bucket", "region", r.opts.Name, "block", next, "err", err)
		}
	}
	var lim *rate.Limiter
	if rateBytes > 0 {
		lim = rate.NewLimiter(rate.Limit(rateBytes), int(max(rateBytes, 1<<20)))
	}
	for i := next; i < n; i++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		sz, err := out.reader.LoadBlockFromFile(i)
		if err != nil {
			return err
		}
		r.warmStats.BytesFromBucket.Add(uint64(sz))
		if lim != nil {
			if err := lim.WaitN(ctx, min(sz, lim.Burst())); err != nil {
				return err
			}
		}
		step(i)
	}
	return nil
}

func (r *Region) setProgress(i, n int) {
	r.warmStats.Progress.Store(uint64(float64(i+1) / float64(n) * 1e6))
}

// installWithWarmup switches the region from inputs to out according to the
// warmup mode; installed reports whether the manifest now names out instead
// of inputs (an error after that is the warmup's). The manifest is
// committed before any incremental warmup starts, so a restart mid-warmup
// opens only the new file. ctx ending before the commit installs nothing;
// after it, it only ends the warmup. major: inputs were every file of the
// region when the compaction began (installCompaction).
func (r *Region) installWithWarmup(ctx context.Context, inputs []*table, out *table, src compaction.BlockSource, major bool) (installed bool, err error) {
	defer func() {
		if src != nil {
			releaseBlocks(src)
		}
	}()
	install := func(warm bool) (bool, error) {
		if err := ctx.Err(); err != nil {
			// The region is being released: nothing may be installed
			// now (and out is not ours to keep).
			if out != nil {
				out.obsolete.Store(true)
				out.unref()
			}
			return false, err
		}
		if err := r.installCompaction(ctx, inputs, out, warm, major); err != nil {
			return false, err
		}
		return true, nil
	}
	mode := r.opts.Warmup
	if out == nil {
		return install(false)
	}
	switch mode {
	case WarmupRemoteCache:
		if src != nil {
			remote := src
			out.reader.SetRemote(func(ctx context.Context, i int) ([]byte, error) {
				b, err := remote.Block(ctx, i)
				if err == nil {
					r.warmStats.BytesFromCompactor.Add(uint64(len(b)))
				}
				return b, err
			})
			// The worker keeps the output until released: the table
			// releases it when it closes (table.remote).
			out.remote, out.releases = src, &r.remoteReleases
			src = nil
		}
		return install(false)
	case WarmupPreSwitch:
		r.warmStats.Warmups.Add(1)
		n := out.reader.NumBlocks()
		if err := r.warmBlocks(ctx, out, src, 0, func(i int) { r.setProgress(i, n) }); err != nil {
			out.obsolete.Store(true)
			out.unref()
			return false, err
		}
		return install(false)
	case WarmupWriteThrough:
		// The output's blocks entered the cache as they were written
		// (WriteThroughExecutor): nothing to warm.
		return install(false)
	case WarmupIncremental, WarmupThrottledIncremental:
		r.warmStats.Warmups.Add(1)
		if ok, err := install(true); !ok {
			return false, err
		}
		var rateBytes int64
		if mode == WarmupThrottledIncremental {
			rateBytes = r.opts.WarmupRateBytes
		}
		n := out.reader.NumBlocks()
		err := r.warmBlocks(ctx, out, src, rateBytes, func(i int) {
			// Block i is warm, so its partition was just read; should it
			// fail now, T stays behind and reads keep to the old files.
			if t, err := out.reader.BlockLastUserKey(i); err == nil {
				r.advanceThreshold(t)
			}
			r.setProgress(i, n)
		})
		r.finishWarming()
		return true, err
	default:
		return install(false)
	}
}

// advanceThreshold moves T to t and evicts the old files' blocks ≤ t: reads
// of those keys now go to the new file.
func (r *Region) advanceThreshold(t []byte) {
	r.mu.RLock()
	w := r.warm
	r.mu.RUnlock()
	if w == nil {
		return
	}
	w.threshold.Store(&t)
	for i, in := range w.inputs {
		w.evicted[i] = in.reader.EvictBlocksThrough(w.evicted[i], t)
	}
}

// finishWarming drops the old version; its input files are deleted once the
// last reader that chose them is done.
func (r *Region) finishWarming() {
	r.mu.Lock()
	w := r.warm
	r.warm = nil
	r.mu.Unlock()
	if w != nil {
		w.old.unref()
	}
}
