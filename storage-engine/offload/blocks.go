package offload

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync/atomic"

	compactionpb "github.com/bellows-kv/bellows/proto/bellows/compaction/v1"
	"github.com/bellows-kv/bellows/storage-engine/compaction"
)

// remoteBlocks is a finished job's output as the worker that ran it keeps it
// in memory: the store's warmup streams it, or reads single blocks of it as
// a remote cache, until it releases it.
type remoteBlocks struct {
	client compactionpb.CompactorClient
	jobID  string
	worker string
	reads  *remoteReads
	// gone: the worker answered that it no longer keeps the job.
	gone atomic.Bool
}

var _ compaction.BlockSource = (*remoteBlocks)(nil)

func (b *remoteBlocks) Fetch(ctx context.Context, from int, rateBytes int64, fn func(int, []byte) error) error {
	stream, err := b.client.FetchBlocks(ctx, &compactionpb.FetchBlocksRequest{
		JobId: b.jobID, FromBlock: uint32(from), RateBytesPerSecond: uint64(max(rateBytes, 0)),
	})
	if err != nil {
		return fmt.Errorf("worker %s: fetching blocks of %s: %w", b.worker, b.jobID, err)
	}
	for {
		blk, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("worker %s: fetching blocks of %s: %w", b.worker, b.jobID, err)
		}
		if err := fn(int(blk.Index), blk.Stored); err != nil {
			return err
		}
	}
}

// Block reads one block for a cache miss, failing fast when the worker is
// slow or known to be unhealthy (remotecache.go); the caller then reads the
// file from the bucket.
func (b *remoteBlocks) Block(ctx context.Context, i int) ([]byte, error) {
	return b.reads.block(ctx, b, i)
}

func (b *remoteBlocks) fetchOne(ctx context.Context, i int) ([]byte, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := b.client.FetchBlocks(ctx, &compactionpb.FetchBlocksRequest{JobId: b.jobID, FromBlock: uint32(i), MaxBlocks: 1})
	if err != nil {
		return nil, fmt.Errorf("worker %s: block %d of %s: %w", b.worker, i, b.jobID, err)
	}
	blk, err := stream.Recv()
	if err != nil {
		return nil, fmt.Errorf("worker %s: block %d of %s: %w", b.worker, i, b.jobID, err)
	}
	if int(blk.Index) != i {
		return nil, fmt.Errorf("worker %s sent block %d for %d", b.worker, blk.Index, i)
	}
	return blk.Stored, nil
}

func (b *remoteBlocks) Release(ctx context.Context) error {
	_, err := b.client.Release(ctx, &compactionpb.ReleaseRequest{JobId: b.jobID})
	return err
}
