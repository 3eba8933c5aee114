package region

import (
	"bytes"
	"context"

	"github.com/bellows-kv/bellows/storage-engine/blob"
	"github.com/bellows-kv/bellows/storage-engine/blockcache"
	"github.com/bellows-kv/bellows/storage-engine/compaction"
)

// WriteThroughExecutor runs compactions in this process and puts each block
// of the output into the block cache as it is written (WarmupWriteThrough:
// the paper's write-through caching baseline, Ahmad & Kemme §5.3.1, "each
// block written ... is simultaneously cached in the block cache as well").
// The new blocks compete with the blocks readers are using while the
// compaction still runs — the cache churn the paper measured — and the new
// file needs no warmup after the switch. The blocks are cached under a file
// ID chosen before the merge (Result.CacheFileID), which the region opens
// the output with; a compaction that fails or writes nothing evicts them.
type WriteThroughExecutor struct {
	Bucket *blob.Bucket
	Cache  *blockcache.Cache
}

// Execute implements compaction.Executor.
func (e WriteThroughExecutor) Execute(ctx context.Context, job compaction.Job) (compaction.Result, error) {
	id := blockcache.NewFileID()
	job.SST.OnDataBlock = func(offset uint64, block, lastUserKey []byte) {
		// The writer reuses both buffers.
		e.Cache.Insert(blockcache.Key{File: id, Offset: offset}, bytes.Clone(block), bytes.Clone(lastUserKey))
	}
	res, err := compaction.Execute(ctx, e.Bucket, job, false)
	if err != nil || res.Empty {
		e.Cache.EvictFile(id)
		return res, err
	}
	res.CacheFileID = id
	return res, nil
}
