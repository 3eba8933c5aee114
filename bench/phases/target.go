package phases

import (
	"context"
	"time"

	"github.com/bellows-kv/bellows/storage-engine/blockcache"
	"github.com/bellows-kv/bellows/storage-engine/kv"
	"github.com/bellows-kv/bellows/storage-engine/region"
)

// target is the store under test: a region in this process, or a `bellows
// store` process reached over gRPC as a client would reach it.
type target interface {
	Put(key, value []byte) error
	Get(key []byte) error
	// Scan reads up to n keys from start and returns how many it read.
	Scan(start, end []byte, n int) (int, error)
	Flush(ctx context.Context) error
	// Compact runs a major compaction and returns when it is installed.
	Compact(ctx context.Context) error
	// Sample is the store's state now (CPU times are the caller's):
	// Switched is when the last compaction's output replaced its inputs
	// for readers (zero before), Cached the fraction of the live files'
	// blocks in cache.
	Sample() (Sample, error)
	// WarmupBytes are the bytes warmup loaded, by source.
	WarmupBytes() (compactor, bucket uint64, err error)
}

// localTarget is a region in this process.
type localTarget struct {
	r     *region.Region
	cache *blockcache.Cache
}

func (t localTarget) Put(key, value []byte) error {
	_, err := t.r.Put(key, value)
	return err
}

func (t localTarget) Get(key []byte) error {
	_, _, err := t.r.Get(key, kv.MaxTimestamp)
	return err
}

func (t localTarget) Scan(start, end []byte, n int) (int, error) {
	rows, err := t.r.Scan(start, end, n, kv.MaxTimestamp)
	return len(rows), err
}

func (t localTarget) Flush(ctx context.Context) error { return t.r.Flush(ctx) }

func (t localTarget) Compact(ctx context.Context) error {
	_, err := t.r.Compact(ctx, true)
	return err
}

func (t localTarget) Sample() (Sample, error) {
	s := Sample{At: time.Now(), Cached: t.r.CachedFraction()}
	if sw := t.r.WarmupStats().SwitchedAt.Load(); sw > 0 {
		s.Switched = time.Unix(0, sw)
	}
	st := t.cache.Stats()
	s.Misses, s.BucketReads, s.WorkerReads = st.Misses, st.BucketReads, st.WorkerReads
	return s, nil
}

func (t localTarget) WarmupBytes() (uint64, uint64, error) {
	ws := t.r.WarmupStats()
	return ws.BytesFromCompactor.Load(), ws.BytesFromBucket.Load(), nil
}
