package store

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

const (
	namespace = "bellows"
	cacheSub  = "block_cache"
)

var (
	requests = promauto.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: namespace, Subsystem: "kv", Name: "request_duration_seconds",
	}, []string{"op"})
	hits = prometheus.NewCounter(prometheus.CounterOpts{Namespace: namespace, Subsystem: cacheSub, Name: "hits_total"})
	full = prometheus.NewGauge(prometheus.GaugeOpts{Name: "bellows_regions"})
	desc = prometheus.NewDesc(prometheus.BuildFQName(namespace, "region", "sst_files"), "help", []string{"region"}, nil)
	raw  = prometheus.NewDesc("bellows_compaction_queue_depth", "help", nil, nil)
)

func gauge(sub, name string) prometheus.Gauge {
	return prometheus.NewGauge(prometheus.GaugeOpts{Namespace: namespace, Subsystem: sub, Name: name})
}

var (
	_ = gauge("compactor", "inflight_jobs")
	_ = gauge("warmup", "progress_ratio")
)
