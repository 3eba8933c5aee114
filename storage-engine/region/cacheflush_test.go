package region

import (
	"fmt"
	"testing"

	"github.com/bellows-kv/bellows/storage-engine/blockcache"
	"github.com/bellows-kv/bellows/storage-engine/kv"
)

// TestCacheFlushesServesTheFlushedFileFromTheCache: with CacheFlushes a
// flush caches each block it writes, so reading back every key of the
// file it wrote misses no block; without it the same reads miss and read
// the file. Either way the reads return what was written.
func TestCacheFlushesServesTheFlushedFileFromTheCache(t *testing.T) {
	for _, cacheFlushes := range []bool{false, true} {
		t.Run(fmt.Sprintf("CacheFlushes=%v", cacheFlushes), func(t *testing.T) {
			opts := testOptions(t, t.TempDir())
			opts.BlockCache = blockcache.New(8 << 20)
			opts.CacheFlushes = cacheFlushes
			opts.DisableAutoCompaction = true
			r := mustOpen(t, opts)
			defer r.Close()
			key := func(i int) []byte { return fmt.Appendf(nil, "k%05d", i) }
			for i := range 2000 {
				if _, err := r.Put(key(i), key(i)); err != nil {
					t.Fatal(err)
				}
			}
			if err := r.Flush(bg); err != nil {
				t.Fatal(err)
			}
			before := opts.BlockCache.Stats()
			for i := range 2000 {
				v, ok, err := r.Get(key(i), kv.MaxTimestamp)
				if err != nil || !ok || string(v) != string(key(i)) {
					t.Fatalf("Get(%s) = %q, %v, %v", key(i), v, ok, err)
				}
			}
			after := opts.BlockCache.Stats()
			misses, reads := after.Misses-before.Misses, after.BucketReads-before.BucketReads
			if cacheFlushes && (misses != 0 || reads != 0) {
				t.Fatalf("reads of the file a caching flush wrote missed %d blocks and read %d from the bucket", misses, reads)
			}
			if !cacheFlushes && reads == 0 {
				t.Fatal("reads of a flushed file nothing cached read no block from the bucket")
			}
		})
	}
}
