package changefeed

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are a feed's: how far behind now its resolved mark is, the
// changes it delivered, and the polls that failed.
type Metrics struct {
	lag        prometheus.Gauge
	changes    prometheus.Counter
	pollErrors prometheus.Counter
}

// NewMetrics registers a feed's metrics with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		lag: prometheus.NewGauge(prometheus.GaugeOpts{Name: "bellows_changefeed_lag_seconds",
			Help: "How far behind now the change feed's resolved mark is: the archive's interval, or more while a region of its range is idle or failing over."}),
		changes: prometheus.NewCounter(prometheus.CounterOpts{Name: "bellows_changefeed_changes_total",
			Help: "Changes the change feed delivered."}),
		pollErrors: prometheus.NewCounter(prometheus.CounterOpts{Name: "bellows_changefeed_poll_errors_total",
			Help: "Reads of the WAL archive that failed and were retried."}),
	}
	reg.MustRegister(m.lag, m.changes, m.pollErrors)
	return m
}

// observe records a poll's outcome; resolved is the feed's mark after it
// (a timestamp in nanoseconds since the epoch).
func (m *Metrics) observe(u Update, resolved uint64, err error) {
	if m == nil {
		return
	}
	if err != nil {
		m.pollErrors.Inc()
	}
	m.changes.Add(float64(len(u.Changes)))
	if resolved > 0 {
		m.lag.Set(max(0, time.Since(time.Unix(0, int64(resolved))).Seconds()))
	}
}
