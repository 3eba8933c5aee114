package region

import (
	"bytes"
	"context"
	"testing"
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
