// Package offload is the storage pod's side of offloaded compaction: a
// compaction.Executor that sends jobs to compaction workers over gRPC.
//
// A job goes to the region's workers in rendezvous order; a worker that
// refuses (RESOURCE_EXHAUSTED: no room in its cache), is unreachable or dies
// mid-job (the Compact stream breaks) is skipped for the next. When every
// worker failed, the mode decides: Preferred runs the job in this process,
// Required waits with backoff and tries again, Disabled never offloads.
//
// A failed attempt installs nothing: the region commits a manifest only
// after Execute returned a result, and the output key of every attempt is
// the same, so a retry overwrites a leftover with identical content (the
// merge is deterministic) and the region deletes it if the job fails.
package offload

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v5"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"

	compactionpb "github.com/bellows-kv/bellows/proto/bellows/compaction/v1"
	"github.com/bellows-kv/bellows/storage-engine/compaction"
	"github.com/bellows-kv/bellows/storage-engine/compaction/compactionwire"
)

// Mode is engine.yaml's offload setting.
type Mode string

const (
	// Required: jobs run only on workers; when none takes a job it waits.
	Required Mode = "Required"
	// Preferred: jobs run on workers; when none takes a job it runs here.
	Preferred Mode = "Preferred"
	// Disabled: every job runs here.
	Disabled Mode = "Disabled"
)

// ParseMode accepts the three modes; empty means Preferred (the API default).
func ParseMode(s string) (Mode, error) {
	switch Mode(s) {
	case "":
		return Preferred, nil
	case Required, Preferred, Disabled:
		return Mode(s), nil
	}
	return "", fmt.Errorf("offload mode %q: want Required, Preferred or Disabled", s)
}

// Options configure an Executor.
type Options struct {
	Mode    Mode
	Workers Discovery
	// BucketURL is sent with every job: workers open the same bucket.
	BucketURL string
	// Local runs jobs in this process (Preferred fallback, Disabled).
	Local compaction.Executor
	// MaxConcurrent bounds the jobs this store runs at once, anywhere;
	// the rest wait in the queue the metrics report. Default 4.
	MaxConcurrent int
	// InputBytes sizes a job for the pending-bytes metric; nil counts 0.
	InputBytes func(compaction.Job) int64
	// RetryInitial and RetryMax shape Required mode's backoff between
	// rounds over all workers. Defaults 200ms and 10s.
	RetryInitial, RetryMax time.Duration
	// KeepOutput asks workers to keep output blocks for warmup; the result
	// then carries a BlockSource the region streams and releases.
	KeepOutput  bool
	DialOptions []grpc.DialOption
	Logger      *slog.Logger
	Registerer  prometheus.Registerer
}

// Executor implements compaction.Executor.
type Executor struct {
	opts Options
	m    *metrics
	sem  chan struct{}
	seq  atomic.Uint64

	mu      sync.Mutex
	conns   map[string]*grpc.ClientConn
	pending int64
	depth   int
}

// New returns an executor. Close it to close its connections.
func New(opts Options) (*Executor, error) {
	if opts.Local == nil {
		return nil, errors.New("offload: options: Local executor is required")
	}
	if opts.Mode == "" {
		opts.Mode = Preferred
	}
	if opts.Mode != Disabled && (opts.Workers == nil || opts.BucketURL == "") {
		return nil, fmt.Errorf("offload: mode %s needs workers and a bucket URL", opts.Mode)
	}
	if opts.MaxConcurrent <= 0 {
		opts.MaxConcurrent = 4
	}
	if opts.RetryInitial <= 0 {
		opts.RetryInitial = 200 * time.Millisecond
	}
	if opts.RetryMax <= 0 {
		opts.RetryMax = 10 * time.Second
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	return &Executor{
		opts:  opts,
		m:     newMetrics(opts.Registerer),
		sem:   make(chan struct{}, opts.MaxConcurrent),
		conns: map[string]*grpc.ClientConn{},
	}, nil
}

// Close closes the connections to workers.
func (e *Executor) Close() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, c := range e.conns {
		_ = c.Close()
	}
	e.conns = map[string]*grpc.ClientConn{}
	return nil
}

// Execute implements compaction.Executor.
func (e *Executor) Execute(ctx context.Context, job compaction.Job) (compaction.Result, error) {
	var size int64
	if e.opts.InputBytes != nil {
		size = e.opts.InputBytes(job)
	}
	e.queue(1, size)
	defer e.queue(-1, -size)
	select {
	case e.sem <- struct{}{}:
		defer func() { <-e.sem }()
	case <-ctx.Done():
		return compaction.Result{}, ctx.Err()
	}

	if e.opts.Mode == Disabled {
		return e.runLocal(ctx, job)
	}
	round := func() (compaction.Result, error) {
		res, err := e.tryWorkers(ctx, job)
		if err == nil || ctx.Err() != nil {
			return res, err
		}
		var perm *permanentError
		if errors.As(err, &perm) {
			return res, backoff.Permanent(err)
		}
		return res, err
	}
	if e.opts.Mode == Preferred {
		res, err := round()
		if err == nil {
			return res, nil
		}
		if ctx.Err() != nil {
			return compaction.Result{}, ctx.Err()
		}
		e.opts.Logger.Info("no worker ran the job; compacting locally", "region", job.Region, "err", err)
		return e.runLocal(ctx, job)
	}
	// Required: rounds over every worker, with backoff between them, until
	// one runs the job or the region gives up (closes: ctx).
	b := backoff.NewExponentialBackOff()
	b.InitialInterval, b.MaxInterval = e.opts.RetryInitial, e.opts.RetryMax
	return backoff.Retry(ctx, round, backoff.WithBackOff(b), backoff.WithMaxElapsedTime(0),
		backoff.WithNotify(func(err error, d time.Duration) {
			e.opts.Logger.Warn("no worker ran the job; retrying", "region", job.Region, "in", d, "err", err)
		}))
}

func (e *Executor) queue(n int, bytes int64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.depth += n
	e.pending += bytes
	e.m.queueDepth.Set(float64(e.depth))
	e.m.pendingBytes.Set(float64(e.pending))
}

func (e *Executor) runLocal(ctx context.Context, job compaction.Job) (compaction.Result, error) {
	began := time.Now()
	res, err := e.opts.Local.Execute(ctx, job)
	e.m.record(LocationLocal, err == nil, res.InputBytes, time.Since(began).Seconds())
	return res, err
}

// permanentError: the job cannot succeed anywhere (an input is missing or
// corrupt); retrying on other workers or locally would fail the same way.
type permanentError struct{ err error }

func (p *permanentError) Error() string { return p.err.Error() }
func (p *permanentError) Unwrap() error { return p.err }

// tryWorkers offers the job to each worker in rendezvous order.
func (e *Executor) tryWorkers(ctx context.Context, job compaction.Job) (compaction.Result, error) {
	workers := Rendezvous(job.Region, e.opts.Workers.Compactors())
	if len(workers) == 0 {
		return compaction.Result{}, errors.New("no compaction workers known")
	}
	var errs []string
	for _, addr := range workers {
		began := time.Now()
		res, err := e.runRemote(ctx, addr, job)
		if err == nil {
			e.m.record(LocationRemote, true, res.InputBytes, time.Since(began).Seconds())
			return res, nil
		}
		if ctx.Err() != nil {
			return compaction.Result{}, ctx.Err()
		}
		code := status.Code(err)
		if code != codes.ResourceExhausted {
			// A refusal is not a failed compaction; anything else is.
			e.m.record(LocationRemote, false, 0, 0)
		}
		e.opts.Logger.Info("worker did not run the job", "worker", addr, "region", job.Region, "code", code, "err", err)
		if code == codes.NotFound || code == codes.DataLoss {
			return compaction.Result{}, &permanentError{fmt.Errorf("worker %s: %w", addr, err)}
		}
		errs = append(errs, fmt.Sprintf("%s: %v", addr, err))
	}
	return compaction.Result{}, fmt.Errorf("every worker failed: %s", strings.Join(errs, "; "))
}

func (e *Executor) conn(addr string) (*grpc.ClientConn, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if c := e.conns[addr]; c != nil {
		return c, nil
	}
	opts := append([]grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		// Keepalive turns a silent partition into a broken stream, so a
		// job on an unreachable worker fails instead of hanging.
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: 10 * time.Second, Timeout: 5 * time.Second}),
	}, e.opts.DialOptions...)
	c, err := grpc.NewClient(addr, opts...)
	if err != nil {
		return nil, err
	}
	e.conns[addr] = c
	return c, nil
}

// runRemote runs the job on one worker and waits for its Done event. The
// stream is the liveness channel: returning (or ctx ending) cancels it, and
// the worker aborts the job and frees its memory.
func (e *Executor) runRemote(ctx context.Context, addr string, job compaction.Job) (compaction.Result, error) {
	c, err := e.conn(addr)
	if err != nil {
		return compaction.Result{}, err
	}
	client := compactionpb.NewCompactorClient(c)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	id := fmt.Sprintf("%s/%s#%d", job.Region, path.Base(job.Output), e.seq.Add(1))
	stream, err := client.Compact(ctx, &compactionpb.CompactRequest{
		JobId: id, BucketUrl: e.opts.BucketURL, Job: compactionwire.JobToProto(job), KeepOutput: e.opts.KeepOutput,
	})
	if err != nil {
		return compaction.Result{}, err
	}
	for {
		ev, err := stream.Recv()
		if err == io.EOF {
			return compaction.Result{}, status.Errorf(codes.Unavailable, "worker %s ended job %s without a result", addr, id)
		}
		if err != nil {
			return compaction.Result{}, err
		}
		switch ev := ev.Event.(type) {
		case *compactionpb.CompactEvent_Accepted_:
			e.opts.Logger.Debug("job accepted", "worker", addr, "job", id, "reserved", ev.Accepted.ReservedBytes)
		case *compactionpb.CompactEvent_Done_:
			res, err := compactionwire.ResultFromDone(ev.Done)
			if err != nil {
				return compaction.Result{}, status.Errorf(codes.Internal, "worker %s: %v", addr, err)
			}
			if e.opts.KeepOutput {
				res.Blocks = &remoteBlocks{client: client, jobID: id, worker: addr}
			}
			return res, nil
		}
	}
}
