// Package offload is the storage pod's side of offloaded compaction: a
// compaction.Executor that sends jobs to compaction workers over gRPC.
//
// A job goes to the region's workers in balanced order (BalancedOrder: the
// region's share of the workers first, then rendezvous order); a worker that
// refuses (RESOURCE_EXHAUSTED: no room in its cache), is unreachable or dies
// mid-job (the Compact stream breaks) is skipped for the next. When every
// worker failed, the mode decides: Preferred runs the job in this process,
// Required waits with backoff and tries again (until the caller's start
// timeout, if its Report sets one), Disabled never offloads. A job larger
// than every worker's whole cache runs in this process in every mode: no
// worker will ever admit it, and waiting would hold the region's
// compactions forever.
//
// A failed attempt installs nothing: the region commits a manifest only
// after Execute returned a result, and the output key of every attempt is
// the same, so a retry overwrites a leftover with identical content (the
// merge is deterministic) and the region deletes it if the job fails.
package offload

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"path"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v5"
	"github.com/dustin/go-humanize"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"

	"github.com/bellows-kv/bellows/internal/contract"
	"github.com/bellows-kv/bellows/internal/grpcmem"
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
	// Regions lists the regions this store serves: placement balances them
	// over the workers (Balanced). Nil balances over the regions this
	// executor has run jobs for.
	Regions func() []string
	// Epsilon is Balanced's slack (DefaultEpsilon when unset).
	Epsilon float64
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
	KeepOutput bool
	// Store names this store, stable across its restarts; Session names
	// this incarnation (New picks a random one when empty). Workers release
	// the outputs an earlier session of Store kept when a job of a new
	// session arrives: a restarted store cannot release them itself.
	Store, Session string
	// RemoteBlockTimeout bounds one block read from a worker's memory
	// (WarmupRemoteCache); RemoteBlockRetryAfter is how long a worker is
	// skipped for such reads after one failed. Defaults in
	// internal/contract: DefaultRemoteBlockTimeout,
	// DefaultRemoteBlockRetryAfter.
	RemoteBlockTimeout    time.Duration
	RemoteBlockRetryAfter time.Duration
	// RemoteCacheRate bounds the bytes per second all remote block reads
	// of this store pull from workers (0: unbounded); misses past it read
	// the bucket.
	RemoteCacheRate int64
	DialOptions     []grpc.DialOption
	Logger          *slog.Logger
	Registerer      prometheus.Registerer
}

// Executor implements compaction.Executor.
type Executor struct {
	opts  Options
	m     *metrics
	sem   chan struct{}
	seq   atomic.Uint64
	reads *remoteReads
	// placement keeps the balanced assignment between jobs.
	placement balancedCache

	// stop ends the announcer (see announce.go); done is closed when it
	// has returned.
	stop context.CancelFunc
	done chan struct{}

	mu      sync.Mutex
	conns   map[string]*grpc.ClientConn
	seen    map[string]bool // regions of jobs, when Options.Regions is nil
	pending int64
	depth   int
	// jobs are the jobs in flight by region (a region runs one at a
	// time): where each runs, for Where.
	jobs map[string]placement
}

// placement is where a job in flight runs: location "" until it starts.
type placement struct{ location, worker string }

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
	if opts.RemoteBlockTimeout <= 0 {
		opts.RemoteBlockTimeout = contract.DefaultRemoteBlockTimeout
	}
	if opts.RemoteBlockRetryAfter <= 0 {
		opts.RemoteBlockRetryAfter = contract.DefaultRemoteBlockRetryAfter
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Session == "" {
		opts.Session = rand.Text()
	}
	m := newMetrics(opts.Registerer)
	e := &Executor{
		opts:  opts,
		m:     m,
		sem:   make(chan struct{}, opts.MaxConcurrent),
		reads: newRemoteReads(opts.RemoteBlockTimeout, opts.RemoteBlockRetryAfter, opts.RemoteCacheRate, opts.Logger, m.remoteFetches),
		conns: map[string]*grpc.ClientConn{},
		seen:  map[string]bool{},
		jobs:  map[string]placement{},
		done:  make(chan struct{}),
	}
	ctx, stop := context.WithCancel(context.Background())
	e.stop = stop
	if opts.Mode != Disabled && opts.Store != "" && opts.KeepOutput {
		go e.announceLoop(ctx)
	} else {
		close(e.done)
	}
	return e, nil
}

// Close closes the connections to workers.
func (e *Executor) Close() error {
	e.stop()
	<-e.done
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
	e.place(job.Region, &placement{})
	defer e.place(job.Region, nil)
	// The job is queued until it starts: a worker accepted it, or it runs
	// here. A running job is not backlog (the autoscaler would otherwise
	// ask for a worker per running job on top of the steady demand).
	var startOnce sync.Once
	dequeue := func() { startOnce.Do(func() { e.queue(-1, -size) }) }
	defer dequeue()
	started := func(location, worker string) {
		dequeue()
		e.place(job.Region, &placement{location, worker})
	}
	began := time.Now()
	rep := reportOf(ctx)
	var deadline time.Time
	var startBy <-chan time.Time
	if rep != nil && rep.StartTimeout > 0 {
		deadline = began.Add(rep.StartTimeout)
		t := time.NewTimer(rep.StartTimeout)
		defer t.Stop()
		startBy = t.C
	}
	timedOut, err := e.acquire(ctx, startBy)
	if err != nil {
		return compaction.Result{}, err
	}
	if timedOut {
		return compaction.Result{}, &NotStartedError{Reason: ReasonStoreBusy, Waited: time.Since(began),
			Detail: fmt.Sprintf("this store already runs %d compactions, the most it runs at once", e.opts.MaxConcurrent)}
	}
	defer func() { <-e.sem }()

	if e.opts.Mode == Disabled {
		return e.runLocal(ctx, job, "", started)
	}
	if e.opts.Mode != Required {
		// Only Required waits for workers; Preferred runs the job here.
		deadline = time.Time{}
	}
	round := func() (compaction.Result, error) {
		res, err := e.tryWorkers(ctx, job, size, started)
		if err == nil || ctx.Err() != nil {
			return res, err
		}
		var perm *permanentError
		var re *roundError
		switch {
		case errors.As(err, &perm):
			return res, backoff.Permanent(err)
		case errors.As(err, &re) && re.reason == ReasonJobTooLarge:
			return res, backoff.Permanent(err)
		case errors.As(err, &re) && !deadline.IsZero() && !time.Now().Before(deadline):
			return res, backoff.Permanent(&NotStartedError{Reason: re.reason, Waited: time.Since(began), Detail: re.detail})
		}
		return res, err
	}
	var res compaction.Result
	if e.opts.Mode == Preferred {
		res, err = round()
	} else {
		// Required: rounds over every worker, with backoff between them,
		// until one runs the job, the region gives up (closes: ctx), or the
		// caller's start timeout passes.
		b := backoff.NewExponentialBackOff()
		b.InitialInterval, b.MaxInterval = e.opts.RetryInitial, e.opts.RetryMax
		res, err = backoff.Retry(ctx, round, backoff.WithBackOff(&untilDeadline{b, deadline}), backoff.WithMaxElapsedTime(0),
			backoff.WithNotify(func(err error, d time.Duration) {
				e.opts.Logger.Warn("no worker ran the job; retrying", "region", job.Region, "in", d, "err", err)
			}))
	}
	var re *roundError
	var ns *NotStartedError
	switch {
	case err == nil:
		return res, nil
	case ctx.Err() != nil:
		return compaction.Result{}, ctx.Err()
	case errors.As(err, &re) && re.reason == ReasonJobTooLarge:
		// No worker will ever admit it: waiting (Required) would hold the
		// region's compactions forever.
		e.m.oversized.Inc()
		e.opts.Logger.Warn("job larger than every worker's cache; compacting in this store", "region", job.Region, "mode", e.opts.Mode, "err", err)
		return e.runLocal(ctx, job, err.Error(), started)
	case errors.As(err, &ns):
		// The caller chose not to wait; the compaction did not fail.
		return compaction.Result{}, err
	case e.opts.Mode == Preferred:
		e.opts.Logger.Info("no worker ran the job; compacting locally", "region", job.Region, "err", err)
		return e.runLocal(ctx, job, err.Error(), started)
	}
	// Only a permanent error ends Required's retries.
	e.m.failed(LocationRemote)
	return res, err
}

// acquire takes one of the store's compaction slots, or reports that startBy
// fired first. A free slot wins even when startBy is ready too (select picks
// among ready cases at random).
func (e *Executor) acquire(ctx context.Context, startBy <-chan time.Time) (timedOut bool, err error) {
	select {
	case e.sem <- struct{}{}:
		return false, nil
	default:
	}
	select {
	case e.sem <- struct{}{}:
		return false, nil
	case <-ctx.Done():
		return false, ctx.Err()
	case <-startBy:
		return true, nil
	}
}

// untilDeadline shortens the backoff's waits so that a round runs at the
// start timeout, not up to RetryMax after it.
type untilDeadline struct {
	backoff.BackOff
	deadline time.Time
}

func (u *untilDeadline) NextBackOff() time.Duration {
	d := u.BackOff.NextBackOff()
	if !u.deadline.IsZero() {
		d = min(d, max(time.Until(u.deadline), 0))
	}
	return d
}

// place records where region's job runs; nil: it ended.
func (e *Executor) place(region string, p *placement) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if p == nil {
		delete(e.jobs, region)
		return
	}
	e.jobs[region] = *p
}

// Where implements compaction.Placer.
func (e *Executor) Where(region string) (location, worker string, ok bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	p, ok := e.jobs[region]
	return p.location, p.worker, ok
}

func (e *Executor) queue(n int, bytes int64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.depth += n
	e.pending += bytes
	e.m.queueDepth.Set(float64(e.depth))
	e.m.pendingBytes.Set(float64(e.pending))
}

// runLocal runs the job in this process; note, if not empty, says why (the
// Admin Compact answer).
func (e *Executor) runLocal(ctx context.Context, job compaction.Job, note string, started func(location, worker string)) (compaction.Result, error) {
	started(LocationLocal, "")
	began := time.Now()
	res, err := e.opts.Local.Execute(ctx, job)
	switch {
	case err == nil:
		e.m.succeeded(LocationLocal, res.InputBytes, time.Since(began).Seconds())
		reportOf(ctx).ran(LocationLocal, "", note)
	case ctx.Err() == nil:
		e.m.failed(LocationLocal)
	}
	return res, err
}

// permanentError: the job cannot succeed anywhere (an input is missing or
// corrupt); retrying on other workers or locally would fail the same way.
type permanentError struct{ err error }

func (p *permanentError) Error() string { return p.err.Error() }
func (p *permanentError) Unwrap() error { return p.err }

// order is the workers to offer a region's job to, best first.
func (e *Executor) order(region string) []string {
	var regions []string
	if e.opts.Regions != nil {
		regions = e.opts.Regions()
	} else {
		e.mu.Lock()
		e.seen[region] = true
		regions = slices.Collect(maps.Keys(e.seen))
		e.mu.Unlock()
	}
	return e.placement.order(region, regions, e.opts.Workers.Compactors(), e.opts.Epsilon)
}

// tryWorkers offers the job to each worker in balanced order. size is the
// job's input bytes (0: unknown), to tell a job no worker can ever admit.
func (e *Executor) tryWorkers(ctx context.Context, job compaction.Job, size int64, started func(location, worker string)) (compaction.Result, error) {
	workers := e.order(job.Region)
	if len(workers) == 0 {
		return compaction.Result{}, &roundError{ReasonNoWorkers, "no compaction workers known"}
	}
	var errs, refused []string
	var tooLarge int  // refusals saying the job exceeds the whole cache
	var largest int64 // the largest such cache
	for _, addr := range workers {
		began := time.Now()
		res, err := e.runRemote(ctx, addr, job, started)
		if err == nil {
			e.m.attempts.WithLabelValues(AttemptOK).Inc()
			e.m.succeeded(LocationRemote, res.InputBytes, time.Since(began).Seconds())
			reportOf(ctx).ran(LocationRemote, addr, "")
			return res, nil
		}
		if ctx.Err() != nil {
			return compaction.Result{}, ctx.Err()
		}
		code := status.Code(err)
		e.m.attempts.WithLabelValues(attemptOutcome(code)).Inc()
		e.opts.Logger.Info("worker did not run the job", "worker", addr, "region", job.Region, "code", code, "err", err)
		if code == codes.NotFound || code == codes.DataLoss {
			return compaction.Result{}, &permanentError{fmt.Errorf("worker %s: %w", addr, err)}
		}
		if code == codes.ResourceExhausted {
			refused = append(refused, addr)
			if m, ok := compactionwire.LargerThanCache(err); ok {
				tooLarge, largest = tooLarge+1, max(largest, m)
			}
		}
		errs = append(errs, fmt.Sprintf("%s: %v", addr, err))
	}
	detail := "every worker failed: " + strings.Join(errs, "; ")
	// Workers that did not answer (unreachable, draining) are taken to be
	// like those that did: one pool has one cache size (m).
	if tooLarge == 0 && len(refused) > 0 && size > 0 {
		// A worker of an older version does not say why it refused; its
		// Status says how large its cache is.
		if m, ok := e.largestCache(ctx, refused); ok && size > m {
			tooLarge, largest = len(refused), m
		}
	}
	if tooLarge > 0 && tooLarge == len(refused) {
		what := "the job is"
		if size > 0 {
			what = humanize.IBytes(uint64(size)) + " of inputs,"
		}
		return compaction.Result{}, &roundError{ReasonJobTooLarge, fmt.Sprintf("%s larger than every worker's cache (largest %s)",
			what, humanize.IBytes(uint64(largest)))}
	}
	if len(refused) == len(workers) {
		return compaction.Result{}, &roundError{ReasonCacheFull, detail}
	}
	return compaction.Result{}, &roundError{ReasonWorkersRefusing, detail}
}

// largestCache asks workers for their cache capacity (m); ok is false when
// none answered.
func (e *Executor) largestCache(ctx context.Context, addrs []string) (largest int64, ok bool) {
	for _, addr := range addrs {
		c, err := e.conn(addr)
		if err != nil {
			continue
		}
		sctx, cancel := context.WithTimeout(ctx, statusTimeout)
		st, err := compactionpb.NewCompactorClient(c).Status(sctx, &compactionpb.StatusRequest{})
		cancel()
		if err != nil {
			continue
		}
		largest, ok = max(largest, st.CacheCapacityBytes), true
	}
	return largest, ok
}

// statusTimeout bounds one Status call; a worker that does not answer is
// left out.
const statusTimeout = 2 * time.Second

// attemptOutcome classifies a worker's answer for the attempts metric.
func attemptOutcome(code codes.Code) string {
	switch code {
	case codes.OK:
		return AttemptOK
	case codes.ResourceExhausted:
		return AttemptRefused
	case codes.Unavailable, codes.DeadlineExceeded, codes.Canceled, codes.Aborted:
		return AttemptUnavailable
	}
	return AttemptFailed
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
	}, append(grpcmem.DialOptions(), e.opts.DialOptions...)...)
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
func (e *Executor) runRemote(ctx context.Context, addr string, job compaction.Job, started func(location, worker string)) (compaction.Result, error) {
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
		Store: e.opts.Store, Session: e.opts.Session,
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
			started(LocationRemote, addr)
			e.opts.Logger.Debug("job accepted", "worker", addr, "job", id, "reserved", ev.Accepted.ReservedBytes)
		case *compactionpb.CompactEvent_Done_:
			res, err := compactionwire.ResultFromDone(ev.Done)
			if err != nil {
				return compaction.Result{}, status.Errorf(codes.Internal, "worker %s: %v", addr, err)
			}
			if e.opts.KeepOutput {
				res.Blocks = &remoteBlocks{client: client, jobID: id, worker: addr, reads: e.reads}
			}
			return res, nil
		}
	}
}
