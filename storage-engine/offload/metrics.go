package offload

import "github.com/prometheus/client_golang/prometheus"

// Locations in the compaction metrics.
const (
	LocationLocal  = "local"
	LocationRemote = "remote"
)

// Worker outcomes of one attempt (bellows_compaction_attempts_total).
const (
	AttemptOK          = "ok"          // the worker ran the job
	AttemptRefused     = "refused"     // RESOURCE_EXHAUSTED: no room in its cache
	AttemptUnavailable = "unavailable" // unreachable, draining, or the stream broke
	AttemptFailed      = "failed"      // the job failed on the worker
)

// A compaction counts once in bellows_compactions_total, by its final
// outcome: a job retried on three workers before one ran it is one remote
// success. Each try on a worker counts in bellows_compaction_attempts_total.
// Compactions cancelled by their region (released, closed) or caller count
// in neither total.
type metrics struct {
	compactions  *prometheus.CounterVec
	attempts     *prometheus.CounterVec
	oversized    prometheus.Counter
	bytes        *prometheus.CounterVec
	duration     *prometheus.HistogramVec
	queueDepth   prometheus.Gauge
	pendingBytes prometheus.Gauge
	// remoteFetches counts single-block reads from workers' memory
	// (WarmupRemoteCache) by outcome.
	remoteFetches *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		compactions: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "bellows_compactions_total",
			Help: "Compactions by where they ran (finally) and their final result; retries on other workers are attempts, not compactions."}, []string{"location", "result"}),
		attempts: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "bellows_compaction_attempts_total",
			Help: "Tries to run a compaction on a worker, by the worker's outcome: ok, refused (cache full), unavailable (unreachable, draining, stream broke), failed."}, []string{"worker_outcome"}),
		oversized: prometheus.NewCounter(prometheus.CounterOpts{Name: "bellows_compactions_oversized_total",
			Help: "Compactions larger than every worker's cache (m), run in this process whatever the offload mode."}),
		bytes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "bellows_compaction_bytes_total",
			Help: "Input bytes of successful compactions by where they ran."}, []string{"location"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "bellows_compaction_duration_seconds",
			Help:    "Duration of successful compactions by where they ran.",
			Buckets: prometheus.ExponentialBuckets(0.01, 2.5, 14)}, []string{"location"}),
		queueDepth: prometheus.NewGauge(prometheus.GaugeOpts{Name: "bellows_compaction_queue_depth",
			Help: "Compactions requested and not started (waiting for a slot or for a worker to accept them; running ones are not counted)."}),
		pendingBytes: prometheus.NewGauge(prometheus.GaugeOpts{Name: "bellows_compaction_pending_bytes",
			Help: "Input bytes of the compactions counted in bellows_compaction_queue_depth."}),
		remoteFetches: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "bellows_remote_block_fetches_total",
			Help: "Block reads from compaction workers' memory for cache misses (RemoteCache warmup), by outcome: ok, timeout, error, or short_circuit (the worker's breaker was open: read from the bucket without asking it). Concurrent misses on one block count once."}, []string{"outcome"}),
	}
	for _, l := range []string{LocationLocal, LocationRemote} {
		for _, r := range []string{"success", "failure"} {
			m.compactions.WithLabelValues(l, r)
		}
		m.bytes.WithLabelValues(l)
	}
	for _, o := range []string{AttemptOK, AttemptRefused, AttemptUnavailable, AttemptFailed} {
		m.attempts.WithLabelValues(o)
	}
	for _, o := range []string{OutcomeOK, OutcomeTimeout, OutcomeError, OutcomeShortCircuit} {
		m.remoteFetches.WithLabelValues(o)
	}
	if reg != nil {
		reg.MustRegister(m.compactions, m.attempts, m.oversized, m.bytes, m.duration, m.queueDepth, m.pendingBytes, m.remoteFetches)
	}
	return m
}

func (m *metrics) succeeded(location string, inputBytes int64, secs float64) {
	m.compactions.WithLabelValues(location, "success").Inc()
	m.bytes.WithLabelValues(location).Add(float64(inputBytes))
	m.duration.WithLabelValues(location).Observe(secs)
}

func (m *metrics) failed(location string) {
	m.compactions.WithLabelValues(location, "failure").Inc()
}
