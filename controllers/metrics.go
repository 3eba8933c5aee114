package controllers

import (
	"github.com/prometheus/client_golang/prometheus"
)

// AutoscalerMetrics are the autoscaler's inputs and outputs per pool
// (docs/interfaces.md, label pool = namespace/name).
type AutoscalerMetrics struct {
	CompactionRate, TransferRate, CacheBytes, CompactionSize, CompactionsPerRegion,
	Regions, Backlog, ChargedDebt, OldestWait, Duration, ConcurrentJobs, CompactionsPerWorker, Desired, Replicas *prometheus.GaugeVec
}

// NewAutoscalerMetrics creates the gauges and registers them with reg.
func NewAutoscalerMetrics(reg prometheus.Registerer) *AutoscalerMetrics {
	g := func(name, help string) *prometheus.GaugeVec {
		v := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, []string{"pool"})
		reg.MustRegister(v)
		return v
	}
	return &AutoscalerMetrics{
		CompactionRate:       g("bellows_autoscaler_compaction_rate_bytes_per_second", "c: bytes per second a worker compacts (input)."),
		TransferRate:         g("bellows_autoscaler_transfer_rate_bytes_per_second", "w: bytes per second a worker streams back (input)."),
		CacheBytes:           g("bellows_autoscaler_cache_bytes", "m: a worker's cache bytes (input)."),
		CompactionSize:       g("bellows_autoscaler_compaction_size_bytes", "b: average requested compaction size (input)."),
		CompactionsPerRegion: g("bellows_autoscaler_compactions_per_region", "T: compactions requested per region per interval (input)."),
		Regions:              g("bellows_autoscaler_regions", "R: regions served by the pool (input)."),
		Backlog:              g("bellows_autoscaler_backlog", "Compactions queued on the stores (input)."),
		ChargedDebt:          g("bellows_autoscaler_charged_debt_bytes", "The stores' compaction debt the model is charged: their debt while compactions wait longer than maxCompactionWait, else 0 (input)."),
		OldestWait:           g("bellows_autoscaler_oldest_compaction_wait_seconds", "How long the stores' oldest wanted compaction had waited to start at the last evaluation (input)."),
		Duration:             g("bellows_autoscaler_compaction_duration_seconds", "D(b) = b/c + b/w (output)."),
		ConcurrentJobs:       g("bellows_autoscaler_concurrent_jobs_per_worker", "l = floor(m/b) (output)."),
		CompactionsPerWorker: g("bellows_autoscaler_compactions_per_worker", "h = (t/D)*l (output)."),
		Desired:              g("bellows_autoscaler_desired_replicas", "The autoscaler's recommendation after clamping and stabilization."),
		Replicas:             g("bellows_autoscaler_replicas", "The pool's current replicas."),
	}
}

// ScheduleMetrics say, per ScheduledBackup (label scheduled_backup =
// namespace/name), when its newest backup completed and how often it is
// due: the alert BellowsBackupTooOld compares the two.
type ScheduleMetrics struct {
	LastCompleted, Period *prometheus.GaugeVec
}

// NewScheduleMetrics creates the gauges and registers them with reg.
func NewScheduleMetrics(reg prometheus.Registerer) *ScheduleMetrics {
	g := func(name, help string) *prometheus.GaugeVec {
		v := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, []string{"scheduled_backup", "cluster"})
		reg.MustRegister(v)
		return v
	}
	return &ScheduleMetrics{
		LastCompleted: g("bellows_scheduled_backup_last_completed_timestamp_seconds",
			"When the ScheduledBackup's newest Backup completed (Unix time); its creation time until one has."),
		Period: g("bellows_scheduled_backup_period_seconds",
			"The time between the ScheduledBackup's next two backups (absent while it is suspended or its schedule is invalid)."),
	}
}

func (m *ScheduleMetrics) forget(scheduledBackup string) {
	if m == nil {
		return
	}
	m.LastCompleted.DeletePartialMatch(prometheus.Labels{"scheduled_backup": scheduledBackup})
	m.Period.DeletePartialMatch(prometheus.Labels{"scheduled_backup": scheduledBackup})
}
