package region

import (
	"context"
	"errors"
	"sync"

	"github.com/bellows-kv/bellows/storage-engine/blob"
	"github.com/bellows-kv/bellows/storage-engine/compaction"
	"github.com/bellows-kv/bellows/storage-engine/sstable"
)

// WriteThroughExecutor runs compactions in this process and keeps the
// output's blocks as they are written (compaction.Execute with keep, the
// same copy a worker keeps: WarmupWriteThrough, Ahmad & Kemme §5.3.1): the
// region inserts them into the block cache before the switch, so no read of
// the new file is needed to warm it. The copy handed to the region is capped
// at CacheBytes (the block cache's size): blocks past it would only evict
// the ones before them.
type WriteThroughExecutor struct {
	Bucket     *blob.Bucket
	CacheBytes int64
}

// Execute implements compaction.Executor.
func (e WriteThroughExecutor) Execute(ctx context.Context, job compaction.Job) (compaction.Result, error) {
	res, err := compaction.Execute(ctx, e.Bucket, job, true)
	if err != nil || res.Empty {
		return res, err
	}
	out := &writtenOutput{}
	var held int64
	for _, b := range res.Kept {
		if held += int64(len(b.Stored)); held > e.CacheBytes {
			break
		}
		out.blocks = append(out.blocks, b.Stored)
	}
	res.Kept = nil
	res.Blocks = out
	return res, nil
}

// writtenOutput is the leading blocks of a compaction's output as it was
// written, in key order. It is a compaction.BlockSource only to travel in
// compaction.Result (through the offload executor's local path); the region
// reads it with cache, never over the network.
type writtenOutput struct {
	mu     sync.Mutex
	blocks [][]byte
}

// cache inserts every data block of r that the copy holds, in key order,
// into the block cache, and drops the copy.
func (w *writtenOutput) cache(r *sstable.Reader) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for i, stored := range w.blocks {
		if i >= r.NumBlocks() || r.InsertStoredBlock(i, stored) != nil {
			break // the copy does not match the file: leave the rest cold
		}
	}
	w.blocks = nil
}

var errNotRemote = errors.New("write-through output is in this process, not on a worker")

func (w *writtenOutput) Fetch(context.Context, int, int64, func(int, []byte) error) error {
	return errNotRemote
}
func (w *writtenOutput) Block(context.Context, int) ([]byte, error) { return nil, errNotRemote }
func (w *writtenOutput) Release(context.Context) error {
	w.mu.Lock()
	w.blocks = nil
	w.mu.Unlock()
	return nil
}
