package offload

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// Reasons a job did not start: the Admin Compact answer's ErrorInfo reason
// (WORKERS_REFUSING, CACHE_FULL, NO_WORKERS, STORE_BUSY) or note
// (JOB_TOO_LARGE).
const (
	// ReasonNoWorkers: discovery lists no worker.
	ReasonNoWorkers = "NO_WORKERS"
	// ReasonCacheFull: every worker refused for lack of room in its cache;
	// the job fits an empty one, so it waits for jobs and outputs to go.
	ReasonCacheFull = "CACHE_FULL"
	// ReasonWorkersRefusing: no worker ran the job and not all for room:
	// unreachable, draining, or the job failed there.
	ReasonWorkersRefusing = "WORKERS_REFUSING"
	// ReasonStoreBusy: the store already runs Options.MaxConcurrent
	// compactions; the job waits for one of them to finish.
	ReasonStoreBusy = "STORE_BUSY"
	// ReasonJobTooLarge: the job is larger than every worker's whole cache
	// (m); no worker will ever admit it, so it runs in the store.
	ReasonJobTooLarge = "JOB_TOO_LARGE"
)

// Report is what the executor says about one compaction to whoever asked
// for it (Admin Compact): where it ran, and why it did not start or ran
// locally. Attach one with WithReport; the region passes the context through
// to Execute.
type Report struct {
	// StartTimeout, set by the caller, bounds the wait for one of the
	// store's compaction slots and, in Required mode, for a worker: past
	// it Execute returns a *NotStartedError. 0: no bound.
	StartTimeout time.Duration

	mu       sync.Mutex
	location string
	worker   string
	note     string
}

type reportKey struct{}

// WithReport returns ctx carrying rep.
func WithReport(ctx context.Context, rep *Report) context.Context {
	return context.WithValue(ctx, reportKey{}, rep)
}

func reportOf(ctx context.Context) *Report {
	rep, _ := ctx.Value(reportKey{}).(*Report)
	return rep
}

func (r *Report) ran(location, worker, note string) {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.location, r.worker, r.note = location, worker, note
}

// Ran reports where the compaction ran (LocationRemote or LocationLocal,
// "" if it did not), the worker that ran it, and why it ran locally.
func (r *Report) Ran() (location, worker, note string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.location, r.worker, r.note
}

// NotStartedError: the job did not start within the Report's StartTimeout. Nothing ran; Reason is one of the Reason constants.
type NotStartedError struct {
	Reason string
	Waited time.Duration
	// Detail is the last round's answers, worker by worker.
	Detail string
}

func (e *NotStartedError) Error() string {
	return fmt.Sprintf("%s: the compaction did not start within %s: %s", e.Reason, e.Waited.Round(time.Millisecond), e.Detail)
}

// roundError is a round in which no worker ran the job.
type roundError struct {
	reason string
	detail string
}

func (e *roundError) Error() string { return e.reason + ": " + e.detail }
