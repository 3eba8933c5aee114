package compactor

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	compactionpb "github.com/bellows-kv/bellows/proto/bellows/compaction/v1"
	"github.com/bellows-kv/bellows/storage-engine/blob"
	"github.com/bellows-kv/bellows/storage-engine/compaction"
	"github.com/bellows-kv/bellows/storage-engine/compaction/compactionwire"
	"github.com/bellows-kv/bellows/storage-engine/sstable"
)

// keptOutput is a finished job's output, every data block as stored, in key
// order: what FetchBlocks streams.
type keptOutput struct {
	blocks []*compactionpb.Block
	bytes  int64
	timer  *time.Timer
}

func keepBlocks(r *sstable.Reader) (*keptOutput, error) {
	out := &keptOutput{}
	for i := range r.NumBlocks() {
		stored, err := r.ReadStoredBlock(i)
		if err != nil {
			return nil, err
		}
		h := r.BlockHandle(i)
		last := r.BlockLastUserKey(i)
		out.blocks = append(out.blocks, &compactionpb.Block{
			Index: uint32(i), Offset: h.Offset, Length: h.Length,
			LastUserKey: append([]byte(nil), last...), Stored: stored,
		})
		out.bytes += int64(len(stored) + len(last))
	}
	return out, nil
}

// Compact implements compactionpb.CompactorServer.
func (w *Worker) Compact(req *compactionpb.CompactRequest, stream compactionpb.Compactor_CompactServer) error {
	ctx := stream.Context()
	job, err := compactionwire.JobFromProto(req.Job)
	if err != nil {
		return status.Errorf(codes.InvalidArgument, "compact: %v", err)
	}
	if req.JobId == "" {
		return status.Error(codes.InvalidArgument, "compact: job_id is empty")
	}
	b, err := w.bucket(ctx, req.BucketUrl)
	if err != nil {
		return status.Errorf(codes.InvalidArgument, "compact: %v", err)
	}
	// Admission reserves the job's input size: the estimate of b (its output
	// is at most about as large, and that output is what stays in memory).
	size, err := inputBytes(ctx, b, job.Inputs)
	if err != nil {
		return status.Errorf(codeOf(err), "compact %s: %v", req.JobId, err)
	}
	if err := w.admit(req.JobId, size); err != nil {
		w.opts.Logger.Info("job refused", "job", req.JobId, "region", job.Region, "err", err)
		return err
	}
	var kept *keptOutput
	defer func() { w.finish(req.JobId, kept) }()
	if err := stream.Send(&compactionpb.CompactEvent{Event: &compactionpb.CompactEvent_Accepted_{
		Accepted: &compactionpb.CompactEvent_Accepted{ReservedBytes: size, Worker: w.opts.Name}}}); err != nil {
		w.m.jobs.WithLabelValues(resultAborted).Inc()
		return err
	}
	w.opts.Logger.Info("job accepted", "job", req.JobId, "region", job.Region, "inputs", len(job.Inputs), "bytes", size)

	// Every read of the job goes through the hook: it counts progress and
	// applies the worker's compaction rate limit. The stream's context is the
	// job's: if the caller goes away, reads fail and the merge stops.
	var read atomic.Int64
	hooked := b.WithReadHook(func(ctx context.Context, n int) error {
		read.Add(int64(n))
		if w.limiter != nil {
			return waitN(ctx, w.limiter, n)
		}
		return nil
	})
	type outcome struct {
		res  compaction.Result
		kept *keptOutput
		err  error
	}
	done := make(chan outcome, 1)
	began := time.Now()
	go func() {
		var o outcome
		var keep func(*sstable.Reader) error
		if req.KeepOutput {
			keep = func(r *sstable.Reader) (err error) { o.kept, err = keepBlocks(r); return err }
		}
		o.res, o.err = compaction.Execute(ctx, hooked, job, keep)
		done <- o
	}()
	tick := time.NewTicker(w.opts.ProgressInterval)
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
			// A failed send means the caller is gone; ctx is cancelled with
			// it and the merge returns shortly.
			_ = stream.Send(&compactionpb.CompactEvent{Event: &compactionpb.CompactEvent_Progress_{
				Progress: &compactionpb.CompactEvent_Progress{InputBytesRead: min(read.Load(), size), InputBytesTotal: size}}})
			continue
		case o := <-done:
			return w.complete(ctx, stream, req, job, o.res, o.kept, o.err, began, &kept)
		}
	}
}

func (w *Worker) complete(ctx context.Context, stream compactionpb.Compactor_CompactServer, req *compactionpb.CompactRequest,
	job compaction.Job, res compaction.Result, out *keptOutput, err error, began time.Time, kept **keptOutput) error {
	if err != nil {
		if ctx.Err() != nil {
			w.m.jobs.WithLabelValues(resultAborted).Inc()
			w.opts.Logger.Warn("job aborted: caller went away", "job", req.JobId, "region", job.Region)
			return status.FromContextError(ctx.Err()).Err()
		}
		w.m.jobs.WithLabelValues(resultFailure).Inc()
		w.opts.Logger.Warn("job failed", "job", req.JobId, "region", job.Region, "err", err)
		return status.Errorf(codeOf(err), "compact %s: %v", req.JobId, err)
	}
	if secs := time.Since(began).Seconds(); secs > 0 && res.InputBytes > 0 {
		w.mu.Lock()
		w.m.compactionRate.Set(w.c.add(float64(res.InputBytes) / secs))
		w.mu.Unlock()
	}
	blocks := 0
	if out != nil {
		blocks = len(out.blocks)
	}
	done, err := compactionwire.DoneFromResult(res, blocks)
	if err != nil {
		w.m.jobs.WithLabelValues(resultFailure).Inc()
		return status.Errorf(codes.Internal, "compact %s: %v", req.JobId, err)
	}
	if err := stream.Send(&compactionpb.CompactEvent{Event: &compactionpb.CompactEvent_Done_{Done: done}}); err != nil {
		// The caller never learns of the output; it will not fetch it.
		w.m.jobs.WithLabelValues(resultAborted).Inc()
		return err
	}
	*kept = out
	w.m.jobs.WithLabelValues(resultSuccess).Inc()
	w.opts.Logger.Info("job done", "job", req.JobId, "region", job.Region, "inputBytes", res.InputBytes,
		"outputBytes", res.Size, "took", time.Since(began).Round(time.Millisecond))
	return nil
}

func inputBytes(ctx context.Context, b *blob.Bucket, keys []string) (int64, error) {
	var total int64
	for _, k := range keys {
		o, err := b.OpenObject(ctx, k)
		if err != nil {
			return 0, err
		}
		total += o.Size()
		_ = o.Close()
	}
	return total, nil
}

// codeOf maps engine errors to gRPC codes so the caller can tell a job that
// can never succeed (missing or corrupt input) from a transient failure.
func codeOf(err error) codes.Code {
	switch {
	case errors.Is(err, blob.ErrNotFound):
		return codes.NotFound
	case errors.Is(err, sstable.ErrCorruption):
		return codes.DataLoss
	case errors.Is(err, context.Canceled):
		return codes.Canceled
	case errors.Is(err, context.DeadlineExceeded):
		return codes.DeadlineExceeded
	}
	return codes.Internal
}

// FetchBlocks implements compactionpb.CompactorServer.
func (w *Worker) FetchBlocks(req *compactionpb.FetchBlocksRequest, stream compactionpb.Compactor_FetchBlocksServer) error {
	w.mu.Lock()
	out := w.kept[req.JobId]
	w.mu.Unlock()
	if out == nil {
		return status.Errorf(codes.NotFound, "compactor %s keeps no output of job %q (never kept, released or expired)", w.opts.Name, req.JobId)
	}
	if int(req.FromBlock) > len(out.blocks) {
		return status.Errorf(codes.OutOfRange, "job %s output has %d blocks, from_block is %d", req.JobId, len(out.blocks), req.FromBlock)
	}
	bps := w.opts.TransferRate
	if r := float64(req.RateBytesPerSecond); r > 0 && (bps <= 0 || r < bps) {
		bps = r
	}
	lim := newLimiterOrNil(bps)
	began := time.Now()
	var sent int64
	defer func() {
		if secs := time.Since(began).Seconds(); sent > 0 && secs > 0 {
			w.mu.Lock()
			w.m.transferRate.Set(w.w.add(float64(sent) / secs))
			w.mu.Unlock()
		}
	}()
	blocks := out.blocks[req.FromBlock:]
	if n := int(req.MaxBlocks); n > 0 && n < len(blocks) {
		blocks = blocks[:n]
	}
	for _, blk := range blocks {
		if lim != nil {
			if err := waitN(stream.Context(), lim, len(blk.Stored)); err != nil {
				return status.FromContextError(err).Err()
			}
		}
		if err := stream.Send(blk); err != nil {
			return err
		}
		sent += int64(len(blk.Stored))
	}
	return nil
}

func newLimiterOrNil(bytesPerSecond float64) *rate.Limiter {
	if bytesPerSecond <= 0 {
		return nil
	}
	return newLimiter(bytesPerSecond)
}

// Release implements compactionpb.CompactorServer. Releasing an unknown job
// is not an error: the TTL may have dropped it already.
func (w *Worker) Release(_ context.Context, req *compactionpb.ReleaseRequest) (*compactionpb.ReleaseResponse, error) {
	return &compactionpb.ReleaseResponse{FreedBytes: w.release(req.JobId, nil)}, nil
}

// Status implements compactionpb.CompactorServer.
func (w *Worker) Status(context.Context, *compactionpb.StatusRequest) (*compactionpb.StatusResponse, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return &compactionpb.StatusResponse{
		CacheCapacityBytes:           w.opts.CacheBytes,
		CacheUsedBytes:               w.used,
		InflightJobs:                 uint32(len(w.inflight)),
		KeptOutputs:                  uint32(len(w.kept)),
		CompactionRateBytesPerSecond: w.c.v,
		TransferRateBytesPerSecond:   w.w.v,
		Draining:                     w.draining,
		Rejections:                   w.rejected,
	}, nil
}
