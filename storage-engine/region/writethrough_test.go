package region

import (
	"bytes"
	"context"
	"testing"

	"github.com/bellows-kv/bellows/storage-engine/blob"
	"github.com/bellows-kv/bellows/storage-engine/blockcache"
	"github.com/bellows-kv/bellows/storage-engine/compaction"
	"github.com/bellows-kv/bellows/storage-engine/sstable"
)

// In WriteThrough mode a local compaction leaves every block of its output
// in the block cache, put there as it was written: no read of the new file
// (no cache miss, no get) is needed. In None mode the same compaction leaves
// the new file cold.
func TestWriteThroughCachesTheOutputAsWritten(t *testing.T) {
	for _, tc := range []struct {
		mode   WarmupMode
		cached float64
	}{{WarmupWriteThrough, 1}, {WarmupNone, 0}} {
		t.Run(tc.mode.String(), func(t *testing.T) {
			ctx := context.Background()
			opts := testOptions(t, t.TempDir())
			opts.Warmup = tc.mode
			opts.DisableAutoCompaction = true
			r := mustOpen(t, opts)
			defer r.Close()
			for f := range 3 {
				for i := f; i < 600; i += 3 {
					if _, err := r.Put(key(i), bytes.Repeat([]byte{byte(i)}, 64)); err != nil {
						t.Fatal(err)
					}
				}
				if err := r.Flush(ctx); err != nil {
					t.Fatal(err)
				}
			}
			misses := opts.BlockCache.Stats().Misses
			info, err := r.Compact(ctx, true)
			if err != nil || info == nil || info.Output == "" {
				t.Fatalf("compact: %+v, %v", info, err)
			}
			if got := r.CachedFraction(); got != tc.cached {
				t.Fatalf("cached fraction of the new file %v, want %v", got, tc.cached)
			}
			if m := opts.BlockCache.Stats().Misses; m != misses {
				t.Fatalf("%d cache misses during the compaction: the output was read", m-misses)
			}
			if g := r.Stats().Gets.Load(); g != 0 {
				t.Fatalf("%d gets", g)
			}
			if tc.mode == WarmupWriteThrough {
				// The cached blocks are the file's: every key reads back.
				for i := range 600 {
					mustGet(t, r, string(key(i)), string(bytes.Repeat([]byte{byte(i)}, 64)))
				}
				if m := opts.BlockCache.Stats().Misses; m != misses {
					t.Fatalf("%d misses reading the compacted keys, want 0", m-misses)
				}
			}
		})
	}
}

// observedExecutor runs inner and records what the cache holds when it
// returns: before the region installs (or reads) anything of the output.
type observedExecutor struct {
	inner  compaction.Executor
	bucket *blob.Bucket
	cache  *blockcache.Cache
	// Set when Execute returns: the output's blocks, how many of them the
	// cache held, and the cache's evictions so far.
	blocks, cached int
	evictions      uint64
}

func (o *observedExecutor) Execute(ctx context.Context, job compaction.Job) (compaction.Result, error) {
	res, err := o.inner.Execute(ctx, job)
	o.evictions = o.cache.Stats().Evictions
	if err != nil || res.Empty {
		return res, err
	}
	obj, err := o.bucket.OpenObject(ctx, job.Output)
	if err != nil {
		return res, err
	}
	defer obj.Close()
	rd, err := sstable.OpenWithFileID(obj, obj.Size(), job.Output, o.cache, res.CacheFileID)
	if err != nil {
		return res, err
	}
	o.blocks = rd.NumBlocks()
	for i := range o.blocks {
		if rd.BlockCached(i) {
			o.cached++
		}
	}
	return res, nil
}

// loadThreeFiles writes 600 keys of 64 bytes in three interleaved flushes.
func loadThreeFiles(t *testing.T, r *Region) {
	t.Helper()
	for f := range 3 {
		for i := f; i < 600; i += 3 {
			if _, err := r.Put(key(i), bytes.Repeat([]byte{byte(i)}, 64)); err != nil {
				t.Fatal(err)
			}
		}
		if err := r.Flush(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
}

// Write-through caches each block as the merge writes it, not at the
// switch: when the executor returns, before the region has installed or
// read anything of the output, every block of it is in the cache.
func TestWriteThroughCachesEachBlockDuringTheMerge(t *testing.T) {
	opts := testOptions(t, t.TempDir())
	opts.Warmup = WarmupWriteThrough
	opts.DisableAutoCompaction = true
	obs := &observedExecutor{inner: WriteThroughExecutor{Bucket: opts.Bucket, Cache: opts.BlockCache}, bucket: opts.Bucket, cache: opts.BlockCache}
	opts.Executor = obs
	r := mustOpen(t, opts)
	defer r.Close()
	loadThreeFiles(t, r)
	if _, err := r.Compact(context.Background(), true); err != nil {
		t.Fatal(err)
	}
	if obs.blocks == 0 || obs.cached != obs.blocks {
		t.Fatalf("when the merge returned, %d of the output's %d blocks were cached; want all", obs.cached, obs.blocks)
	}
}

// The paper's finding about write-through (§5.3.1): with a cache that holds
// the data but not the old and the new files together, the new blocks evict
// blocks readers use while the compaction is still running.
func TestWriteThroughEvictsDuringTheCompaction(t *testing.T) {
	ctx := context.Background()
	opts := testOptions(t, t.TempDir())
	opts.Warmup = WarmupWriteThrough
	opts.DisableAutoCompaction = true
	warm := func(r *Region) {
		for i := range 600 {
			mustGet(t, r, string(key(i)), string(bytes.Repeat([]byte{byte(i)}, 64)))
		}
	}
	r0 := mustOpen(t, opts)
	loadThreeFiles(t, r0)
	warm(r0)
	data := opts.BlockCache.Stats().UsedBytes // the data's blocks, as cached
	if err := r0.Close(); err != nil {
		t.Fatal(err)
	}
	// 1.5 × the data: the data fits (but for the odd block of a full
	// shard: the cache is sharded), the old and new files together do not.
	capacity := data * 3 / 2
	opts.BlockCache = blockcache.New(capacity)
	obs := &observedExecutor{inner: WriteThroughExecutor{Bucket: opts.Bucket, Cache: opts.BlockCache}, bucket: opts.Bucket, cache: opts.BlockCache}
	opts.Executor = obs
	r := mustOpen(t, opts)
	defer r.Close()
	warm(r)
	before := opts.BlockCache.Stats().Evictions
	if _, err := r.Compact(ctx, true); err != nil {
		t.Fatal(err)
	}
	if obs.evictions <= before {
		t.Fatalf("no block was evicted while the merge wrote %d blocks into a cache of %d bytes holding %d bytes of data", obs.blocks, capacity, data)
	}
	t.Logf("%d blocks evicted while warming, %d more by the merge before the switch", before, obs.evictions-before)
}
