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
	// store and session of the job's caller (CompactRequest).
	store, session string
	blocks         []*compactionpb.Block
	bytes          int64
	timer          *time.Timer
	// keptAt orders eviction (oldest first); streams counts the open
	// FetchBlocks streams of it, which keep it from being evicted.
	keptAt  time.Time
	streams int
}

// keepBlocks wraps the blocks Execute captured as it wrote them: no read of
// the output back from the bucket.
func keepBlocks(blocks []compaction.StoredBlock) *keptOutput {
	out := &keptOutput{blocks: make([]*compactionpb.Block, 0, len(blocks))}
	for i, b := range blocks {
		out.blocks = append(out.blocks, &compactionpb.Block{
			Index: uint32(i), Offset: b.Handle.Offset, Length: b.Handle.Length,
			LastUserKey: b.LastUserKey, Stored: b.Stored,
		})
		out.bytes += int64(len(b.Stored) + len(b.LastUserKey))
	}
	return out
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
	// Before admission: the outputs of this store's dead incarnation may be
	// what fills the cache.
	w.announce(req.Store, req.Session)
	if err := w.admit(req.JobId, size); err != nil {
		w.opts.Logger.Info("job refused", "job", req.JobId, "region", job.Region, "err", err)
		return err
	}
	// Until complete converts it into the kept output, the reservation is
	// freed on every way out.
	finished := false
	defer func() {
		if !finished {
			w.finish(req.JobId, nil)
		}
	}()
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
		res compaction.Result
		err error
	}
	done := make(chan outcome, 1)
	began := time.Now()
	go func() {
		var o outcome
		o.res, o.err = compaction.Execute(ctx, hooked, job, req.KeepOutput)
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
			return w.complete(ctx, stream, req, job, o.res, o.err, began, &finished)
		}
	}
}

// complete reports a finished job. A kept output is registered (finish)
// before Done is sent, so a FetchBlocks issued the moment the caller reads
// Done finds it; *finished tells Compact the reservation is converted.
func (w *Worker) complete(ctx context.Context, stream compactionpb.Compactor_CompactServer, req *compactionpb.CompactRequest,
	job compaction.Job, res compaction.Result, err error, began time.Time, finished *bool) error {
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
	var out *keptOutput
	if req.KeepOutput && !res.Empty {
		out = keepBlocks(res.Kept)
		out.store, out.session = req.Store, req.Session
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
	w.finish(req.JobId, out)
	*finished = true
	if err := stream.Send(&compactionpb.CompactEvent{Event: &compactionpb.CompactEvent_Done_{Done: done}}); err != nil {
		// The caller never learns of the output; it will not fetch it.
		if out != nil {
			w.release(req.JobId, out)
		}
		w.m.jobs.WithLabelValues(resultAborted).Inc()
		return err
	}
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
	out, done := w.openStream(req.JobId)
	if out == nil {
		return status.Errorf(codes.NotFound, "compactor %s keeps no output of job %q (never kept, released or expired)", w.opts.Name, req.JobId)
	}
	defer done()
	if int(req.FromBlock) > len(out.blocks) {
		return status.Errorf(codes.OutOfRange, "job %s output has %d blocks, from_block is %d", req.JobId, len(out.blocks), req.FromBlock)
	}
	bps := w.opts.TransferRate
	if r := float64(req.RateBytesPerSecond); r > 0 && (bps <= 0 || r < bps) {
		bps = r
	}
	lim := newLimiterOrNil(bps)
	if d := w.opts.LinkLatency; d > 0 {
		// The modelled network's latency, once per stream.
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-stream.Context().Done():
			t.Stop()
			return status.FromContextError(stream.Context().Err()).Err()
		}
	}
	began := time.Now()
	var sent int64
	defer func() {
		if secs := time.Since(began).Seconds(); sent > 0 && secs > 0 {
			w.m.transferBytes.Add(float64(sent))
			w.m.transferSeconds.Add(secs)
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

// Announce implements compactionpb.CompactorServer.
func (w *Worker) Announce(_ context.Context, req *compactionpb.AnnounceRequest) (*compactionpb.AnnounceResponse, error) {
	if req.Store == "" || req.Session == "" {
		return nil, status.Error(codes.InvalidArgument, "announce: store and session are required")
	}
	return &compactionpb.AnnounceResponse{FreedBytes: w.announce(req.Store, req.Session)}, nil
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
