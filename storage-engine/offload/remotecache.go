package offload

// Remote-cache reads (WarmupRemoteCache) put a compaction worker on the path
// of client reads: every miss on a new file asks the worker that wrote it.
// A worker that stops answering (a GC pause, SIGSTOP, a frozen VM, a
// partition) must not stall those reads, so:
//   - Every fetch has its own deadline (RemoteReads.Timeout), far below a
//     client's, and the file, already in the bucket, answers when it fails.
//   - One circuit breaker per worker address, shared by all of its jobs:
//     after a failed fetch the worker is skipped (misses read the bucket at
//     once) until RemoteReads.RetryAfter has passed; then one fetch probes
//     it, and its result closes or reopens the breaker.
//   - Concurrent misses on one block share one fetch (singleflight), so a
//     hot block costs the worker one RPC and a dead worker one deadline.
//   - The shared fetch runs detached from any one caller's context: a
//     caller whose client gave up returns at once, while the fetch, bounded
//     by the deadline, still serves the others and still counts for the
//     breaker.
//   - All remote reads of the store share one byte budget (RemoteCacheRate,
//     a token bucket allowed to go into debt by the fetch that crosses it):
//     while it is spent, misses read the bucket. One miss is one stream, so
//     without it the workers' per-stream --transfer-rate bounded nothing a
//     store pulled; and waiting for tokens would stall reads, which this
//     file exists to prevent. The bound is rate × t + burst + one block per
//     concurrent fetch.
//   - A job the worker no longer has (NotFound: released or expired) is
//     not the worker's fault: that job's reads go to the bucket for good,
//     and the breaker does not count it.
//
// Lock order: remoteReads.mu is taken alone, never across a fetch.

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sony/gobreaker/v2"
	"golang.org/x/sync/singleflight"
	"golang.org/x/time/rate"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Outcomes of a remote block fetch in bellows_remote_block_fetches_total.
const (
	OutcomeOK           = "ok"
	OutcomeTimeout      = "timeout"
	OutcomeError        = "error"
	OutcomeShortCircuit = "short_circuit"
	OutcomeRateLimited  = "rate_limited"
)

// errRateLimited: the store's remote-cache budget is spent for now.
var errRateLimited = errors.New("the store's remote-cache byte budget is spent; reading the bucket")

// errJobGone: the worker no longer keeps this job's output.
var errJobGone = errors.New("the worker no longer keeps this job's output")

// remoteReads serves single-block reads from workers for every job of an
// executor.
type remoteReads struct {
	timeout    time.Duration
	retryAfter time.Duration
	log        *slog.Logger
	fetches    *prometheus.CounterVec

	flights singleflight.Group
	// budget bounds the bytes all fetches pull (nil: unbounded).
	budget *rate.Limiter

	mu      sync.Mutex
	workers map[string]*workerReads // by address
}

// workerReads is one worker's breaker; last names the latest fetch, so the
// transition it causes is logged with its job (region and file).
type workerReads struct {
	cb   *gobreaker.CircuitBreaker[[]byte]
	last atomic.Pointer[attempt]
}

type attempt struct {
	job string
	err error
}

// minRemoteBurst keeps the budget's burst above any one block, so a
// fetch's bytes can always be charged.
const minRemoteBurst = 1 << 20

func newRemoteReads(timeout, retryAfter time.Duration, rateBytes int64, log *slog.Logger, fetches *prometheus.CounterVec) *remoteReads {
	rr := &remoteReads{timeout: timeout, retryAfter: retryAfter, log: log, fetches: fetches, workers: map[string]*workerReads{}}
	if rateBytes > 0 {
		// A burst of one second's budget: a warm-up's first misses are
		// served at once, the sustained rate is the bound.
		rr.budget = rate.NewLimiter(rate.Limit(rateBytes), int(max(rateBytes, minRemoteBurst)))
	}
	return rr
}

func (rr *remoteReads) worker(addr string) *workerReads {
	rr.mu.Lock()
	defer rr.mu.Unlock()
	if w := rr.workers[addr]; w != nil {
		return w
	}
	w := &workerReads{}
	w.cb = gobreaker.NewCircuitBreaker[[]byte](gobreaker.Settings{
		Name: addr,
		// One probe at a time while half-open: the rest read the bucket
		// instead of queueing behind a worker that may still be stuck.
		MaxRequests: 1,
		Timeout:     rr.retryAfter,
		// The first failure opens it: each failure cost a read a whole
		// deadline, and the next ones would cost the same.
		ReadyToTrip: func(c gobreaker.Counts) bool { return c.ConsecutiveFailures >= 1 },
		IsExcluded:  func(err error) bool { return errors.Is(err, errJobGone) },
		OnStateChange: func(name string, from, to gobreaker.State) {
			var job string
			var err error
			if a := w.last.Load(); a != nil {
				job, err = a.job, a.err
			}
			switch to {
			case gobreaker.StateOpen:
				rr.log.Warn("remote block reads from the worker failed; reading new files from the bucket", "worker", name, "job", job, "retry_in", rr.retryAfter, "err", err)
			case gobreaker.StateHalfOpen:
				rr.log.Info("retrying remote block reads from the worker", "worker", name, "job", job)
			case gobreaker.StateClosed:
				rr.log.Info("the worker serves remote block reads again", "worker", name, "job", job)
			}
		},
	})
	rr.workers[addr] = w
	return w
}

// block returns stored block i of b's job. An error means: read the file.
func (rr *remoteReads) block(ctx context.Context, b *remoteBlocks, i int) ([]byte, error) {
	if b.gone.Load() {
		rr.fetches.WithLabelValues(OutcomeShortCircuit).Inc()
		return nil, errJobGone
	}
	if rr.budget != nil && rr.budget.Tokens() < 0 {
		rr.fetches.WithLabelValues(OutcomeRateLimited).Inc()
		return nil, errRateLimited
	}
	w := rr.worker(b.worker)
	detached := context.WithoutCancel(ctx)
	ch := rr.flights.DoChan(b.jobID+"#"+strconv.Itoa(i), func() (any, error) {
		stored, err := w.cb.Execute(func() ([]byte, error) {
			fctx, cancel := context.WithTimeout(detached, rr.timeout)
			defer cancel()
			stored, err := b.fetchOne(fctx, i)
			if status.Code(err) == codes.NotFound {
				b.gone.Store(true)
				err = errJobGone
			}
			w.last.Store(&attempt{job: b.jobID, err: err})
			if err == nil && rr.budget != nil {
				// Charged after the fact (a block's size is known once it
				// arrived); the debt holds the next misses back.
				rr.budget.ReserveN(time.Now(), len(stored))
			}
			return stored, err
		})
		rr.fetches.WithLabelValues(outcome(err)).Inc()
		return stored, err
	})
	select {
	case res := <-ch:
		if res.Err != nil {
			return nil, res.Err
		}
		return res.Val.([]byte), nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func outcome(err error) string {
	switch {
	case err == nil:
		return OutcomeOK
	case errors.Is(err, gobreaker.ErrOpenState), errors.Is(err, gobreaker.ErrTooManyRequests):
		return OutcomeShortCircuit
	case errors.Is(err, context.DeadlineExceeded), status.Code(err) == codes.DeadlineExceeded:
		return OutcomeTimeout
	}
	return OutcomeError
}
