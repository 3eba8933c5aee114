package offload

import "github.com/prometheus/client_golang/prometheus"

// Locations in the compaction metrics.
const (
	LocationLocal  = "local"
	LocationRemote = "remote"
)

type metrics struct {
	compactions  *prometheus.CounterVec
	bytes        *prometheus.CounterVec
	duration     *prometheus.HistogramVec
	queueDepth   prometheus.Gauge
	pendingBytes prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		compactions: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "bellows_compactions_total",
			Help: "Compaction attempts by where they ran and result."}, []string{"location", "result"}),
		bytes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "bellows_compaction_bytes_total",
			Help: "Input bytes of successful compactions by where they ran."}, []string{"location"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "bellows_compaction_duration_seconds",
			Help:    "Duration of successful compactions by where they ran.",
			Buckets: prometheus.ExponentialBuckets(0.01, 2.5, 14)}, []string{"location"}),
		queueDepth: prometheus.NewGauge(prometheus.GaugeOpts{Name: "bellows_compaction_queue_depth",
			Help: "Compactions requested and not finished (waiting for a slot or a worker, or running)."}),
		pendingBytes: prometheus.NewGauge(prometheus.GaugeOpts{Name: "bellows_compaction_pending_bytes",
			Help: "Input bytes of the compactions counted in bellows_compaction_queue_depth."}),
	}
	for _, l := range []string{LocationLocal, LocationRemote} {
		for _, r := range []string{"success", "failure"} {
			m.compactions.WithLabelValues(l, r)
		}
		m.bytes.WithLabelValues(l)
	}
	if reg != nil {
		reg.MustRegister(m.compactions, m.bytes, m.duration, m.queueDepth, m.pendingBytes)
	}
	return m
}

func (m *metrics) record(location string, ok bool, inputBytes int64, secs float64) {
	if !ok {
		m.compactions.WithLabelValues(location, "failure").Inc()
		return
	}
	m.compactions.WithLabelValues(location, "success").Inc()
	m.bytes.WithLabelValues(location).Add(float64(inputBytes))
	m.duration.WithLabelValues(location).Observe(secs)
}
