package compactor

import "github.com/prometheus/client_golang/prometheus"

// metrics are the worker's series of docs/interfaces.md.
type metrics struct {
	inflight, used, capacity prometheus.Gauge
	compactionRate           prometheus.Gauge
	transferRate             prometheus.Gauge
	// transferBytes and transferSeconds give the autoscaler w as
	// Δbytes/Δseconds (see "bellows_compactor_transfer_bytes_total").
	transferBytes, transferSeconds prometheus.Counter
	rejections                     prometheus.Counter
	evictions                      prometheus.Counter
	jobs                           *prometheus.CounterVec
}

// Job results in bellows_compactor_jobs_total.
const (
	resultSuccess = "success"
	resultFailure = "failure"
	// resultAborted: the caller's stream broke (its store died or gave up).
	resultAborted = "aborted"
)

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		inflight: prometheus.NewGauge(prometheus.GaugeOpts{Name: "bellows_compactor_inflight_jobs",
			Help: "Compaction jobs running on this worker."}),
		used: prometheus.NewGauge(prometheus.GaugeOpts{Name: "bellows_compactor_cache_used_bytes",
			Help: "Memory reserved by running jobs plus kept output blocks."}),
		capacity: prometheus.NewGauge(prometheus.GaugeOpts{Name: "bellows_compactor_cache_capacity_bytes",
			Help: "The worker's cache size m (--cache-bytes)."}),
		compactionRate: prometheus.NewGauge(prometheus.GaugeOpts{Name: "bellows_compactor_compaction_rate_bytes_per_second",
			Help: "Measured compaction rate c: input bytes per second of job time (smoothed)."}),
		transferRate: prometheus.NewGauge(prometheus.GaugeOpts{Name: "bellows_compactor_transfer_rate_bytes_per_second",
			Help: "Measured transfer rate w: bytes per second sent by FetchBlocks (smoothed)."}),
		transferBytes: prometheus.NewCounter(prometheus.CounterOpts{Name: "bellows_compactor_transfer_bytes_total",
			Help: "Bytes sent by FetchBlocks streams."}),
		transferSeconds: prometheus.NewCounter(prometheus.CounterOpts{Name: "bellows_compactor_transfer_seconds_total",
			Help: "Seconds FetchBlocks streams spent sending (w = Δbytes/Δseconds)."}),
		rejections: prometheus.NewCounter(prometheus.CounterOpts{Name: "bellows_compactor_rejections_total",
			Help: "Jobs refused with RESOURCE_EXHAUSTED because the cache had no room."}),
		evictions: prometheus.NewCounter(prometheus.CounterOpts{Name: "bellows_compactor_kept_output_evictions_total",
			Help: "Kept outputs evicted to admit a job (their stores read those files from the bucket)."}),
		jobs: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "bellows_compactor_jobs_total",
			Help: "Finished jobs by result: success, failure, aborted."}, []string{"result"}),
	}
	for _, r := range []string{resultSuccess, resultFailure, resultAborted} {
		m.jobs.WithLabelValues(r)
	}
	if reg != nil {
		reg.MustRegister(m.inflight, m.used, m.capacity, m.compactionRate, m.transferRate, m.transferBytes, m.transferSeconds, m.rejections, m.evictions, m.jobs)
	}
	return m
}
