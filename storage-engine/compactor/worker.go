// Package compactor is the compaction worker: it admits jobs by reserving
// memory, runs them against the bucket with the same code a storage pod runs
// locally (compaction.Execute), keeps each job's output blocks in memory as
// it writes them, for warmup, and serves them over gRPC (bellows.compaction.v1.Compactor).
//
// Invariants:
//   - used = Σ reservations of running jobs + Σ bytes of kept outputs ≤
//     capacity, except that a kept output may exceed its job's reservation
//     (the output is rarely larger than the inputs; refusing it after the
//     work is done would waste the job).
//   - A kept output never keeps a job out: its blocks are in the bucket
//     too, so admission evicts kept outputs no stream is reading, oldest
//     first, until the job fits, and refuses only when running jobs and
//     outputs being streamed leave no room. The store's next FetchBlocks of
//     an evicted output gets NOT_FOUND and reads the bucket instead.
//   - A job's reservation is freed exactly once: when it fails, is aborted
//     (its caller's stream broke), or is converted into its kept output.
//   - Every kept output of a store belongs to its latest announced session
//     (sessions): a job from a new session releases the earlier sessions'
//     outputs before admission, and an output finishing for a superseded
//     session is not kept. A restarted store never releases what its
//     previous incarnation held, so without this a small cache stays full
//     of dead outputs until the TTL and refuses every job.
//   - A kept output is registered before its Done is sent (a FetchBlocks
//     right after Done finds it) and dropped if that Send fails. Its blocks
//     are the ones the job wrote, captured as written: keeping never reads
//     the output back from the bucket.
//   - Drain returns true only when no job runs, no output is kept and no
//     FetchBlocks stream is open: a worker removed by scale-down loses
//     neither a compaction nor the warmup of one (bounded by the drain
//     timeout; a store whose warmup is cut short reads the bucket).
package compactor

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/dustin/go-humanize"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	compactionpb "github.com/bellows-kv/bellows/proto/bellows/compaction/v1"
	"github.com/bellows-kv/bellows/storage-engine/blob"
	"github.com/bellows-kv/bellows/storage-engine/compaction/compactionwire"
)

// Options configure a worker.
type Options struct {
	// Name identifies the worker in Accepted events and errors.
	Name string
	// CacheBytes is m: memory for running jobs and kept outputs.
	CacheBytes int64
	// TransferRate is w's bound: bytes per second FetchBlocks sends per
	// stream; 0 is unlimited.
	TransferRate float64
	// LinkLatency models the network between this worker and a store:
	// every FetchBlocks stream waits this long before its first block
	// (with TransferRate as the link's bandwidth). Benchmarks set it so a
	// remote fetch is not free; 0, the default, adds nothing.
	LinkLatency time.Duration
	// CompactionRateLimit bounds the bytes per second all jobs of this worker
	// read from the bucket together; 0 is unlimited.
	CompactionRateLimit float64
	// OutputTTL drops a kept output nobody released (its store died).
	OutputTTL time.Duration
	// ProgressInterval is how often a running job reports progress.
	ProgressInterval time.Duration
	Logger           *slog.Logger
	// Registerer receives the worker's metrics; nil registers none.
	Registerer prometheus.Registerer
}

// Worker runs compaction jobs. It implements compactionpb.CompactorServer.
type Worker struct {
	compactionpb.UnimplementedCompactorServer
	opts    Options
	limiter *rate.Limiter // nil: compaction reads are not throttled
	m       *metrics

	mu       sync.Mutex
	used     int64
	inflight map[string]int64 // job id → reserved bytes
	kept     map[string]*keptOutput
	sessions map[string]string // store → its latest announced session
	draining bool
	streams  int           // open FetchBlocks streams
	idle     chan struct{} // closed and replaced when a job, kept output or stream ends
	buckets  map[string]*blob.Bucket
	rejected uint64
	c, w     ewma
}

// New returns a worker.
func New(opts Options) *Worker {
	if opts.OutputTTL <= 0 {
		opts.OutputTTL = 10 * time.Minute
	}
	if opts.ProgressInterval <= 0 {
		opts.ProgressInterval = time.Second
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	w := &Worker{
		opts:     opts,
		inflight: map[string]int64{},
		kept:     map[string]*keptOutput{},
		sessions: map[string]string{},
		idle:     make(chan struct{}),
		buckets:  map[string]*blob.Bucket{},
		m:        newMetrics(opts.Registerer),
	}
	if opts.CompactionRateLimit > 0 {
		w.limiter = newLimiter(opts.CompactionRateLimit)
	}
	w.m.capacity.Set(float64(opts.CacheBytes))
	return w
}

// newLimiter allows a burst of a tenth of a second's bytes (at least one
// block), so a throttled transfer is smooth rather than a burst per second.
func newLimiter(bytesPerSecond float64) *rate.Limiter {
	return rate.NewLimiter(rate.Limit(bytesPerSecond), max(int(bytesPerSecond/10), 64<<10))
}

// waitN waits for n bytes of budget; n may exceed the limiter's burst.
func waitN(ctx context.Context, l *rate.Limiter, n int) error {
	for n > 0 {
		k := min(n, l.Burst())
		if err := l.WaitN(ctx, k); err != nil {
			return err
		}
		n -= k
	}
	return nil
}

// admit reserves size bytes for a job, or says why not as a gRPC status.
func (w *Worker) admit(id string, size int64) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case w.draining:
		return status.Errorf(codes.Unavailable, "compactor %s is draining and accepts no new jobs", w.opts.Name)
	case w.inflight[id] != 0 || w.kept[id] != nil:
		return status.Errorf(codes.AlreadyExists, "compactor %s already has job %s", w.opts.Name, id)
	case size > w.opts.CacheBytes:
		// Not "full": it would not fit an empty cache either, and the store
		// should not wait for room (it runs the job itself).
		w.rejected++
		w.m.rejections.Inc()
		st := status.Newf(codes.ResourceExhausted, "compactor %s: job %s needs %s, larger than the whole cache (%s)",
			w.opts.Name, id, humanize.IBytes(uint64(size)), humanize.IBytes(uint64(w.opts.CacheBytes)))
		if d, err := st.WithDetails(compactionwire.LargerThanCacheDetail(w.opts.CacheBytes)); err == nil {
			st = d
		}
		return st.Err()
	case w.used+size > w.opts.CacheBytes && !w.evictForLocked(size):
		w.rejected++
		w.m.rejections.Inc()
		return status.Errorf(codes.ResourceExhausted,
			"compactor %s: cache full: job %s needs %s, %s of %s free (%d jobs running, %d outputs kept)",
			w.opts.Name, id, humanize.IBytes(uint64(size)), humanize.IBytes(uint64(max(w.opts.CacheBytes-w.used, 0))),
			humanize.IBytes(uint64(w.opts.CacheBytes)), len(w.inflight), len(w.kept))
	}
	// A zero-byte job still counts as in flight.
	w.inflight[id] = max(size, 1)
	w.used += max(size, 1)
	w.updateGaugesLocked()
	return nil
}

// evictForLocked evicts kept outputs that no stream reads, oldest first,
// until size more bytes fit; it reports whether they do. It evicts nothing
// when even all of them would not make room.
func (w *Worker) evictForLocked(size int64) bool {
	var idle []string
	var freeable int64
	for id, k := range w.kept {
		if k.streams == 0 {
			idle = append(idle, id)
			freeable += k.bytes
		}
	}
	if w.used-freeable+size > w.opts.CacheBytes {
		return false
	}
	slices.SortFunc(idle, func(a, b string) int { return w.kept[a].keptAt.Compare(w.kept[b].keptAt) })
	for _, id := range idle {
		if w.used+size <= w.opts.CacheBytes {
			break
		}
		k := w.kept[id]
		freed := w.releaseLocked(id, k)
		w.m.evictions.Inc()
		w.opts.Logger.Info("evicted a kept output to admit a job: its store reads that file from the bucket", "job", id, "store", k.store, "bytes", freed)
	}
	return w.used+size <= w.opts.CacheBytes
}

// finish frees a job's reservation and, if out is not nil, keeps out in its
// place.
func (w *Worker) finish(id string, out *keptOutput) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.used -= w.inflight[id]
	delete(w.inflight, id)
	if out != nil && out.store != "" && w.sessions[out.store] != out.session {
		w.opts.Logger.Info("dropping the output of a superseded store session", "job", id, "store", out.store, "session", out.session)
		out = nil
	}
	if out != nil {
		out.keptAt = time.Now()
		w.kept[id] = out
		w.used += out.bytes
		out.timer = time.AfterFunc(w.opts.OutputTTL, func() { w.release(id, out) })
	}
	w.wakeLocked()
	w.updateGaugesLocked()
}

// announce records session as store's current one and releases the outputs
// its earlier sessions kept (that incarnation is gone). Empty store or
// session: the caller does not take part. It returns the bytes freed.
func (w *Worker) announce(store, session string) (freed int64) {
	if store == "" || session == "" {
		return 0
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	prev, known := w.sessions[store]
	if prev == session {
		return 0
	}
	w.sessions[store] = session
	var n int
	for id, k := range w.kept {
		if k.store == store && k.session != session {
			freed += w.releaseLocked(id, k)
			n++
		}
	}
	if known || n > 0 {
		w.opts.Logger.Info("store started a new session; released its previous session's outputs",
			"store", store, "session", session, "previous", prev, "outputs", n, "bytes", freed)
	}
	return freed
}

// wakeLocked tells Drain to look again.
func (w *Worker) wakeLocked() {
	close(w.idle)
	w.idle = make(chan struct{})
}

// openStream finds a kept output and counts a FetchBlocks stream of it
// until done is called; under one lock, so Drain never sees the output
// released and the stream not yet open.
func (w *Worker) openStream(id string) (out *keptOutput, done func()) {
	w.mu.Lock()
	defer w.mu.Unlock()
	out = w.kept[id]
	if out == nil {
		return nil, nil
	}
	w.streams++
	out.streams++
	return out, func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		w.streams--
		out.streams--
		w.wakeLocked()
	}
}

// release drops a kept output; only the given one, so a TTL timer cannot
// drop a newer output of the same job id.
func (w *Worker) release(id string, out *keptOutput) int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.releaseLocked(id, out)
}

func (w *Worker) releaseLocked(id string, out *keptOutput) int64 {
	cur := w.kept[id]
	if cur == nil || (out != nil && cur != out) {
		return 0
	}
	cur.timer.Stop()
	delete(w.kept, id)
	w.used -= cur.bytes
	w.wakeLocked()
	w.updateGaugesLocked()
	return cur.bytes
}

func (w *Worker) updateGaugesLocked() {
	w.m.inflight.Set(float64(len(w.inflight)))
	w.m.used.Set(float64(w.used))
}

// Drain stops admitting jobs and waits until none is running and no output
// is kept or streaming (stores release outputs once warmed; the TTL drops
// the others), or ctx ends. It reports whether all of them finished.
func (w *Worker) Drain(ctx context.Context) bool {
	w.mu.Lock()
	w.draining = true
	w.mu.Unlock()
	for {
		w.mu.Lock()
		jobs, kept, streams, idle := len(w.inflight), len(w.kept), w.streams, w.idle
		w.mu.Unlock()
		if jobs == 0 && kept == 0 && streams == 0 {
			return true
		}
		select {
		case <-idle:
		case <-ctx.Done():
			w.opts.Logger.Warn("drain timed out", "jobs", jobs, "keptOutputs", kept, "streams", streams)
			return false
		}
	}
}

// Draining reports whether Drain was called.
func (w *Worker) Draining() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.draining
}

// bucket opens (once) the bucket a job names. Jobs carry the URL because one
// worker pool may serve several clusters.
func (w *Worker) bucket(ctx context.Context, url string) (*blob.Bucket, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if b := w.buckets[url]; b != nil {
		return b, nil
	}
	b, err := blob.Open(ctx, url)
	if err != nil {
		return nil, err
	}
	w.buckets[url] = b
	return b, nil
}

// Close releases the buckets.
func (w *Worker) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	var first error
	for url, b := range w.buckets {
		if err := b.Close(); err != nil && first == nil {
			first = fmt.Errorf("closing bucket %s: %w", url, err)
		}
	}
	w.buckets = map[string]*blob.Bucket{}
	for _, k := range w.kept {
		k.timer.Stop()
	}
	return first
}

// ewma is a smoothed rate; the first sample sets it.
type ewma struct {
	v   float64
	set bool
}

func (e *ewma) add(x float64) float64 {
	if !e.set {
		e.v, e.set = x, true
	} else {
		e.v = 0.7*e.v + 0.3*x
	}
	return e.v
}
