package server

import (
	"context"
	"math"
	"sync/atomic"
	"time"

	"github.com/KimMachineGun/automemlimit/memlimit"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/bellows-kv/bellows/storage-engine/blockcache"
	"github.com/bellows-kv/bellows/storage-engine/region"
)

// Metrics observes request latency by op and gRPC status code
// (bellows_kv_request_duration_seconds) and the requests forwarded to other
// stores (bellows_kv_forwarded_total).
type Metrics struct {
	// reg registers the metrics of the KV they observe (NewKV: its
	// watches').
	reg      prometheus.Registerer
	latency  *prometheus.HistogramVec
	forwards *prometheus.CounterVec
	// across counts batches committed across regions; acrossRetries their
	// attempts retried at a new start after a write conflict.
	across, acrossRetries prometheus.Counter
}

// ops maps KV methods to the op label; Admin and Regions calls are not
// client requests and are not observed.
var ops = map[string]string{
	"/bellows.kv.v1.KV/Get": "get", "/bellows.kv.v1.KV/Scan": "scan", "/bellows.kv.v1.KV/Put": "put",
	"/bellows.kv.v1.KV/Delete": "delete", "/bellows.kv.v1.KV/CompareAndSet": "compare-and-set", "/bellows.kv.v1.KV/Batch": "batch",
	"/bellows.kv.v1.KV/BatchGet": "batch-get", "/bellows.kv.v1.KV/DeleteRange": "delete-range",
	"/bellows.kv.v1.KV/BeginTxn": "begin-txn", "/bellows.kv.v1.KV/TxnGet": "txn-get", "/bellows.kv.v1.KV/CommitTxn": "commit-txn", "/bellows.kv.v1.KV/RollbackTxn": "rollback-txn",
	"/bellows.kv.v1.KV/TxnScan": "txn-scan",
	// A cross-region commit's calls between stores.
	"/bellows.kv.v1.KV/Prewrite": "prewrite", "/bellows.kv.v1.KV/ResolveLocks": "resolve-locks",
	"/bellows.kv.v1.KV/CheckTxnStatus": "check-txn-status", "/bellows.kv.v1.KV/ValidateReads": "validate-reads",
}

// NewMetrics registers the request metrics with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{reg: reg, latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "bellows_kv_request_duration_seconds",
		Help:    "KV request latency by op and gRPC status code (OK for a success).",
		Buckets: prometheus.ExponentialBuckets(25e-6, 2, 18), // 25µs … 3.3s
		// Scrapers that ask for the protobuf format also get a native
		// histogram, buckets 9% apart, where the classic ones double:
		// enough to tell a p99 moving by 10% (bellows-bench phases).
		NativeHistogramBucketFactor:     1.1,
		NativeHistogramMaxBucketNumber:  160,
		NativeHistogramMinResetDuration: time.Hour,
	}, []string{"op", "code"}),
		forwards: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bellows_kv_forwarded_total",
			Help: "Calls forwarded to the store serving the key's region, by op (a scan makes one per remote region; a retry after a map refresh counts again).",
		}, []string{"op"}),
		across: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "bellows_kv_batches_across_regions_total",
			Help: "Batches whose keys fell in more than one region, committed across them (two-phase commit) by this store.",
		}),
		acrossRetries: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "bellows_kv_batch_across_regions_retries_total",
			Help: "Attempts of batches across regions committed again at a new start timestamp after a write of one of their keys passed the start.",
		}),
	}
	// Only the successes are created up front: every series of every code
	// would be 15 ops × 17 codes × 20 series of a histogram, mostly zeros.
	// An error rate divides by the OK series, so those must exist from the
	// start; an error's series appears with the first error.
	for _, op := range ops {
		m.latency.WithLabelValues(op, codes.OK.String())
		m.forwards.WithLabelValues(op)
	}
	reg.MustRegister(m.latency, m.forwards, m.across, m.acrossRetries)
	return m
}

func (m *Metrics) batchAcrossRegions() {
	if m != nil {
		m.across.Inc()
	}
}

func (m *Metrics) batchAcrossRegionsRetried() {
	if m != nil {
		m.acrossRetries.Inc()
	}
}

// forwarded counts one forwarded call.
func (m *Metrics) forwarded(op string) {
	if m != nil {
		m.forwards.WithLabelValues(op).Inc()
	}
}

// UnaryInterceptor times unary KV calls.
func (m *Metrics) UnaryInterceptor(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	began := time.Now()
	resp, err := h(ctx, req)
	// A forwarded request is timed once, by the store the client called.
	if op, ok := ops[info.FullMethod]; ok && !forwarded(ctx) {
		m.Observe(op, err, time.Since(began))
	}
	return resp, err
}

// StreamInterceptor times streaming KV calls (Scan) to their end.
func (m *Metrics) StreamInterceptor(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	began := time.Now()
	err := h(srv, ss)
	if op, ok := ops[info.FullMethod]; ok && !forwarded(ss.Context()) {
		m.Observe(op, err, time.Since(began))
	}
	return err
}

// Observe records one request of op that took d and ended with err.
func (m *Metrics) Observe(op string, err error, d time.Duration) {
	m.latency.WithLabelValues(op, codeLabel(err)).Observe(d.Seconds())
}

// codeLabel is the code label of a call that returned err: the name of its
// gRPC status code. A code outside gRPC's 17 (a status a handler made up) is
// Unknown, as gRPC itself answers it, so the label's values stay a fixed set.
func codeLabel(err error) string {
	c := status.Code(err)
	if c > codes.Unauthenticated {
		c = codes.Unknown
	}
	return c.String()
}

// RegisterStoreGauges exports the store's state, read at scrape time: block
// cache counters, SSTs per region, region count and compaction demand.
func RegisterStoreGauges(reg prometheus.Registerer, s *Store, cache *blockcache.Cache) {
	registerEngineMemory(reg, s, cache)
	cs := cacheStat(cache)
	reg.MustRegister(
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "bellows_block_cache_hits_total", Help: "Block cache hits."},
			cs(func(s blockcache.Stats) float64 { return float64(s.Hits) })),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "bellows_block_cache_misses_total", Help: "Block cache misses."},
			cs(func(s blockcache.Stats) float64 { return float64(s.Misses) })),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "bellows_block_cache_miss_bucket_reads_total",
			Help: "Blocks that reads missed in the cache and read from the bucket (warmup's loads are bellows_warmup_bytes_total)."},
			cs(func(s blockcache.Stats) float64 { return float64(s.BucketReads) })),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "bellows_block_cache_miss_worker_reads_total",
			Help: "Blocks that reads missed in the cache and read from a compaction worker's memory (RemoteCache)."},
			cs(func(s blockcache.Stats) float64 { return float64(s.WorkerReads) })),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "bellows_block_cache_evictions_total", Help: "Block cache evictions."},
			cs(func(s blockcache.Stats) float64 { return float64(s.Evictions) })),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "bellows_block_cache_bytes", Help: "Bytes in the block cache."},
			cs(func(s blockcache.Stats) float64 { return float64(s.UsedBytes) })),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "bellows_block_cache_capacity_bytes", Help: "Block cache capacity."},
			cs(func(s blockcache.Stats) float64 { return float64(s.Capacity) })),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "bellows_regions", Help: "Regions this store serves (open)."}, // contract.MetricStoreRegions (a drain reads it)
			func() float64 { return float64(countRegions(s, true)) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "bellows_regions_waiting", // contract.MetricStoreRegionsWaiting (a drain reads it)
			Help: "Regions assigned to this store that another store still owns; claimed once it releases them."},
			func() float64 { return float64(countRegions(s, false)) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "bellows_compaction_requested_total",
			Help: "Compactions requested (demand, not completions)."},
			sumRegions(s, func(r *region.Region) uint64 { return r.Stats().CompactionsRequested.Load() })),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "bellows_compaction_requested_bytes_total",
			Help: "Input bytes of requested compactions; b = bytes / requests."},
			sumRegions(s, func(r *region.Region) uint64 { return r.Stats().CompactionRequestedBytes.Load() })),
	)
	for _, c := range []struct {
		opts prometheus.CounterOpts
		of   func(*region.Region) uint64
	}{
		{prometheus.CounterOpts{Name: "bellows_memstore_in_memory_flushes_total", Help: "In-memory flushes: active segments pushed into the pipeline and flattened (Accordion)."},
			func(r *region.Region) uint64 { return r.MemstoreStats().InMemoryFlushes.Load() }},
		{prometheus.CounterOpts{Name: "bellows_memstore_merges_total", Help: "In-memory merges of the pipeline's segment indexes (nothing dropped)."},
			func(r *region.Region) uint64 { return r.MemstoreStats().Merges.Load() }},
		{prometheus.CounterOpts{Name: "bellows_memstore_compactions_total", Help: "In-memory compactions of the pipeline (versions retention does not need dropped)."},
			func(r *region.Region) uint64 { return r.MemstoreStats().Compactions.Load() }},
		{prometheus.CounterOpts{Name: "bellows_memstore_versions_dropped_total", Help: "Versions dropped by in-memory compactions before reaching disk."},
			func(r *region.Region) uint64 { return r.MemstoreStats().VersionsDropped.Load() }},
		{prometheus.CounterOpts{Name: "bellows_flush_bytes_total", Help: "SST bytes written by memstore flushes."},
			func(r *region.Region) uint64 { return r.Stats().FlushedBytes.Load() }},
		{prometheus.CounterOpts{Name: "bellows_compaction_written_bytes_total", Help: "SST bytes written by compactions installed in this store's regions."},
			func(r *region.Region) uint64 { return r.Stats().CompactionWrittenBytes.Load() }},
		{prometheus.CounterOpts{Name: "bellows_wal_archive_shipped_bytes_total", Help: "WAL bytes shipped to the bucket's archive (wal-archive/) by this store's open regions."},
			func(r *region.Region) uint64 { return uint64(r.ArchiveStatus().ShippedTotal) }},
		{prometheus.CounterOpts{Name: "bellows_wal_forced_flushes_total", Help: "Memstore flushes forced because a region's WAL outgrew memstore.maxWALBytes."},
			func(r *region.Region) uint64 { return r.Stats().WALForcedFlushes.Load() }},
	} {
		reg.MustRegister(prometheus.NewCounterFunc(c.opts, sumRegions(s, c.of)))
	}
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "bellows_store_recovery_seconds",
		Help: "How long the store's start took to open (and so replay the WAL of) every region it owned."},
		func() float64 { return s.Recovered().Seconds() }))
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "bellows_wal_archive_interval_seconds",
		Help: "How often the store's regions ship their WAL to the bucket's archive (--wal-archive-interval, the RPO; 0: not archived)."},
		func() float64 { return s.WALArchiveInterval().Seconds() }))
	reg.MustRegister(newRegionCounters(s))
	for reason, n := range map[string]*atomic.Uint64{"age": &s.WALBoundStats().AgeFlushes, "cap": &s.WALBoundStats().CapFlushes} {
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "bellows_wal_bound_flushes_total", Help: "Flushes the store forced to bound its WAL: age (memstore.maxWALAge), cap (memstore.maxStoreWALBytes).",
			ConstLabels: prometheus.Labels{"reason": reason},
		}, func() float64 { return float64(n.Load()) }))
	}
	for source, bytes := range map[string]func(*region.Region) uint64{
		"compactor": func(r *region.Region) uint64 { return r.WarmupStats().BytesFromCompactor.Load() },
		"bucket":    func(r *region.Region) uint64 { return r.WarmupStats().BytesFromBucket.Load() },
	} {
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "bellows_warmup_bytes_total", Help: "Bytes of compacted blocks loaded into the cache by warmup, by source.",
			ConstLabels: prometheus.Labels{"source": source},
		}, sumRegions(s, bytes)))
	}
	reg.MustRegister(newRegionGauges(s))
	reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "bellows_region_map_epoch",
			Help: "Epoch of the newest region map this store knows (0: fixed regions)."},
			func() float64 { m, _ := s.RegionMap(); return float64(m.Epoch) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "bellows_region_split_bytes",
			Help: "The store's split size: a region whose data passes it splits (0: never)."},
			func() float64 { return float64(s.opts.SplitBytes) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "bellows_cluster_regions", // contract.MetricClusterRegions (the autoscaler reads it)
			Help: "Regions in the newest region map this store knows: the cluster's region count (the autoscaler's R)."},
			func() float64 { m, _ := s.RegionMap(); return float64(len(m.Region)) }),
	)
	cp := s.Checkpoints()
	for result, n := range map[string]*atomic.Uint64{"success": &cp.Succeeded, "failure": &cp.Failed} {
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "bellows_backup_checkpoints_total", Help: "Region checkpoints this store ran for backups (Admin.Checkpoint, docs/backup.md), by result.",
			ConstLabels: prometheus.Labels{"result": result},
		}, func() float64 { return float64(n.Load()) }))
	}
	reg.MustRegister(
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "bellows_backup_copied_bytes_total",
			Help: "Bytes this store's backup checkpoints copied (or cut at the backup's timestamp) into the bucket's backups/sst/."},
			func() float64 { return float64(cp.CopiedBytes.Load()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "bellows_backup_checkpoint_seconds_total",
			Help: "Time this store spent in backup checkpoints: lock resolution, flush and copies."},
			func() float64 { return float64(cp.Nanos.Load()) / 1e9 }),
	)
	for _, reason := range []string{splitBySize, splitByLoad} {
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "bellows_region_splits_total", Help: "Splits this store committed, by what triggered them (docs/regions.md).",
			ConstLabels: prometheus.Labels{"reason": reason},
		}, func() float64 { return float64(s.SplitsBy(reason)) }))
	}
	reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "bellows_region_merges_total", Help: "Merges of two adjacent regions this store committed (docs/regions.md).",
	}, func() float64 { return float64(s.Merges()) }))
	reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "bellows_region_recuts_total", Help: "Re-cuts of two adjacent uneven regions (a merge and a split at the byte median) this store made for the balancer (docs/regions.md).",
	}, func() float64 { return float64(s.Recuts()) }))
}

// RegisterBalancerMetrics exports the balancer's moves and whether this
// store holds its lease.
func RegisterBalancerMetrics(reg prometheus.Registerer, b *Balancer) {
	failoverSeconds := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "bellows_failover_seconds",
		Help:    "Per dead store, from the end of its liveness lease to the region map epoch that moved its regions to living stores (the new owners then take each over from its WAL stream: bellows_region_recovery_seconds).",
		Buckets: []float64{0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60}})
	b.failoverSeconds.Store(failoverSeconds)
	reg.MustRegister(
		failoverSeconds,
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "bellows_region_moves_total",
			Help: "Region moves this store's balancer committed while it held the balancer lease (docs/regions.md §4)."},
			func() float64 { return float64(b.Moves()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "bellows_failovers_total",
			Help: "Regions this store's balancer gave to other stores because their owner's liveness lease ran out (docs/failover.md §5)."},
			func() float64 { return float64(b.Failovers()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "bellows_regions_without_live_owner", // contract.MetricRegionsWithoutLiveOwner (the operator reads it)
			Help: "Regions the region map gave, at this balancer's last failover check, to a store whose liveness lease ran out: 0 except for the moment before a failover commits, unless no living store can take them."},
			func() float64 { return float64(b.ownerless.Load()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "bellows_balancer_lease_held",
			Help: "1 when this store held the balancer lease at its last attempt: exactly one store of a cluster should."},
			func() float64 {
				if b.LeaseHeld() {
					return 1
				}
				return 0
			}),
	)
}

// regionGauges exports a gauge per open region, read at scrape time: the
// regions are those open then, so the daughters of a split, and regions a
// replica change assigns later, are exported as soon as they open.
//
// It also exports the store's compaction debt and oldest wait, summed and
// maxed over the same readings, so the autoscaler reads one series per store.
type regionGauges struct {
	s      *Store
	gauges []regionGauge
	// debt and oldestWait are the store's totals (contract).
	debt, oldestWait *prometheus.Desc
}

type regionGauge struct {
	desc  *prometheus.Desc
	kind  prometheus.ValueType
	value func(*regionState) float64
}

func newRegionGauges(s *Store) *regionGauges {
	g := func(name, help string, kind prometheus.ValueType, value func(*regionState) float64) regionGauge {
		return regionGauge{prometheus.NewDesc(name, help, []string{"region"}, nil), kind, value}
	}
	gauge := prometheus.GaugeValue
	return &regionGauges{s: s,
		debt: prometheus.NewDesc("bellows_compaction_debt_bytes", // contract.MetricCompactionDebtBytes (the autoscaler reads it)
			"Compaction debt of this store's regions: the input bytes their policies want compacted and are not getting, a waiting compaction's included (as RocksDB's estimate-pending-compaction-bytes).", nil, nil),
		oldestWait: prometheus.NewDesc("bellows_compaction_oldest_wait_seconds", // contract.MetricCompactionOldestWait (the autoscaler reads it)
			"How long this store's oldest wanted compaction has waited to start (0: none waits).", nil, nil),
		gauges: []regionGauge{
			g("bellows_region_compaction_debt_bytes", "The region's compaction debt: input bytes its policy wants compacted and is not getting (docs/operator.md).", gauge,
				func(st *regionState) float64 { return float64(st.compaction.PendingBytes) }),
			g("bellows_region_compaction_oldest_wait_seconds", "How long the region's oldest wanted compaction has waited to start (0: none waits).", gauge,
				func(st *regionState) float64 { return st.compactionWait.Seconds() }),
			g("bellows_region_sst_files", "Live SST files per region.", gauge,
				func(st *regionState) float64 { return float64(st.sstFiles) }),
			g("bellows_region_bytes", "The region's data as a split counts it: its files' blocks within its range plus its memstores (docs/regions.md).", gauge,
				func(st *regionState) float64 { return float64(st.dataBytes) }),
			g("bellows_region_requests_total", "Requests this store served for the region (keyed requests and scans), since it opened here.", prometheus.CounterValue,
				func(st *regionState) float64 { return float64(st.requests) }),
			g("bellows_warmup_progress_ratio", "Progress of the region's running or last warmup (T as a fraction of the new file's blocks).", gauge,
				func(st *regionState) float64 { return st.warmupProgress }),
			g("bellows_warmup_switched_timestamp_seconds", "When the region's last compaction output replaced its inputs for readers (Unix time; 0 before the first).", gauge,
				func(st *regionState) float64 {
					if st.switchedAt.IsZero() {
						return 0
					}
					return float64(st.switchedAt.UnixNano()) / 1e9
				}),
			g("bellows_region_memstore_pipeline_segments", "Immutable segments in the region's memstore pipeline (Accordion; 0 under policy None).", gauge,
				func(st *regionState) float64 { return float64(st.pipeline) }),
			g("bellows_region_wal_bytes", "Bytes of the region's WAL segments on disk (what a restart replays at most).", gauge,
				func(st *regionState) float64 { return float64(st.walBytes) }),
			g("bellows_region_wal_archive_lag_seconds", "How old the region's oldest WAL record not yet in the bucket's archive may be (0: the WAL is not archived): what a lost volume would take with it.", gauge,
				func(st *regionState) float64 { return st.archiveLag.Seconds() }),
			g("bellows_region_wal_archive_pending_bytes", "Bytes of the region's WAL on the volume that the archive does not hold yet (the volume keeps them until it does).", gauge,
				func(st *regionState) float64 { return float64(st.archivePending) }),
			g("bellows_region_recovery_replayed_bytes", "WAL bytes the region replayed when this store opened it.", gauge,
				func(st *regionState) float64 { return float64(st.recovery.ReplayedBytes) }),
			g("bellows_region_recovery_seconds", "How long opening the region took on this store, its WAL replay included.", gauge,
				func(st *regionState) float64 { return st.recovery.Open.Seconds() }),
			g("bellows_region_cached_ratio", "Fraction of the region's live data blocks in the block cache.", gauge,
				func(st *regionState) float64 { return st.cachedRatio }),
		}}
}

func (c *regionGauges) Describe(ch chan<- *prometheus.Desc) {
	for _, g := range c.gauges {
		ch <- g.desc
	}
	ch <- c.debt
	ch <- c.oldestWait
}

func (c *regionGauges) Collect(ch chan<- prometheus.Metric) {
	now := time.Now()
	var debt int64
	var oldest time.Duration
	c.s.Open(func(a *Assignment, e *region.Region) {
		st := readRegion(a, e, now)
		for _, g := range c.gauges {
			ch <- prometheus.MustNewConstMetric(g.desc, g.kind, g.value(&st), a.Name())
		}
		debt += st.compaction.PendingBytes
		oldest = max(oldest, st.compactionWait)
	})
	ch <- prometheus.MustNewConstMetric(c.debt, prometheus.GaugeValue, float64(debt))
	ch <- prometheus.MustNewConstMetric(c.oldestWait, prometheus.GaugeValue, oldest.Seconds())
}

// regionCounters exports counters of the open regions per region.
//
// They are not summed over the store as the other region counters are: a
// sum drops when a region leaves the store (a release, a replica change),
// which rate() reads as a counter reset, counting the remaining regions'
// whole totals again as new errors, so an alert on any increase would fire
// at every region move. A series per region instead ends with the region's
// move and starts again from zero when it comes back (a new region.Region),
// both of which rate() reads right. The regions are those open at scrape
// time, so regions a replica change assigns later are exported too.
type regionCounters struct {
	s        *Store
	counters []regionCounter
}

type regionCounter struct {
	desc *prometheus.Desc
	of   func(*region.Region) uint64
}

func newRegionCounters(s *Store) *regionCounters {
	return &regionCounters{s: s, counters: []regionCounter{
		{prometheus.NewDesc("bellows_flush_errors_total",
			"Memstore flushes of the region that failed (each is retried with backoff; the WAL keeps the writes meanwhile).",
			[]string{"region"}, nil),
			func(r *region.Region) uint64 { return r.Stats().FlushErrors.Load() }},
		{prometheus.NewDesc("bellows_write_stalls_total",
			"Times a write to the region waited because its frozen memstores were all still waiting for flush (the write path's backpressure; each wake-up that still finds them waiting counts again).",
			[]string{"region"}, nil),
			func(r *region.Region) uint64 { return r.Stats().WriteStalls.Load() }},
	}}
}

func (c *regionCounters) Describe(ch chan<- *prometheus.Desc) {
	for _, rc := range c.counters {
		ch <- rc.desc
	}
}

func (c *regionCounters) Collect(ch chan<- prometheus.Metric) {
	c.s.Open(func(a *Assignment, e *region.Region) {
		for _, rc := range c.counters {
			ch <- prometheus.MustNewConstMetric(rc.desc, prometheus.CounterValue, float64(rc.of(e)), a.Name())
		}
	})
}

// sumRegions is a metric function adding f over the store's open regions.
// registerEngineMemory exports the engine's memory by kind, the block
// cache's lookups of index and filter partitions, and the container's
// memory limit the process runs under (read once: a pod's limit changes
// only with a restart), which an alert compares with the process's memory.
func registerEngineMemory(reg prometheus.Registerer, s *Store, cache *blockcache.Cache) {
	limit, err := memlimit.FromCgroup()
	if err != nil || limit >= math.MaxInt64/2 {
		limit = 0 // no memory controller, or no limit set
	}
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "bellows_store_memory_limit_bytes",
		Help: "The memory limit of the store's container (cgroup); 0 when it has none."},
		func() float64 { return float64(limit) }))
	cs := cacheStat(cache)
	reg.MustRegister(
		engineMemory("block_cache_data", cs(func(s blockcache.Stats) float64 { return float64(s.UsedBytes - s.MetaBytes) })),
		engineMemory("block_cache_index_filter", cs(func(s blockcache.Stats) float64 { return float64(s.MetaBytes) })),
		engineMemory("pinned_index_filter", sumRegions(s, func(r *region.Region) uint64 { return uint64(r.TableMemoryBytes()) })),
		engineMemory("memstores", sumRegions(s, func(r *region.Region) uint64 { return uint64(r.MemstoreUsedBytes()) })),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "bellows_block_cache_index_filter_hits_total",
			Help: "Lookups of SST index and filter partitions found in the block cache."},
			cs(func(s blockcache.Stats) float64 { return float64(s.MetaHits) })),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "bellows_block_cache_index_filter_misses_total",
			Help: "Lookups of SST index and filter partitions missed in the block cache and read from the file."},
			cs(func(s blockcache.Stats) float64 { return float64(s.MetaMisses) })),
	)
}

// cacheStat makes gauge and counter functions that read one of cache's
// statistics at scrape time.
func cacheStat(cache *blockcache.Cache) func(f func(blockcache.Stats) float64) func() float64 {
	return func(f func(blockcache.Stats) float64) func() float64 {
		return func() float64 { return f(cache.Stats()) }
	}
}

// engineMemory is one kind of the engine's memory (docs/memory.md): the
// block cache's data blocks and its index and filter partitions (both
// within the cache's capacity), the index and filters held outside it
// (format 1 files and format 2 top levels), and the memstores.
func engineMemory(kind string, f func() float64) prometheus.Collector {
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "bellows_engine_memory_bytes",
		Help:        "The storage engine's memory by kind (docs/memory.md).",
		ConstLabels: prometheus.Labels{"kind": kind}}, f)
}

func sumRegions(s *Store, f func(*region.Region) uint64) func() float64 {
	return func() float64 {
		var n uint64
		s.Open(func(_ *Assignment, e *region.Region) { n += f(e) })
		return float64(n)
	}
}

func countRegions(s *Store, open bool) int {
	n := 0
	for _, r := range s.Assignments() {
		if _, err := r.Engine(); (err == nil) == open {
			n++
		}
	}
	return n
}

// RegisterLivenessMetrics exports the store's liveness lease
// (docs/failover.md §3).
func RegisterLivenessMetrics(reg prometheus.Registerer, l *Liveness) {
	reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "bellows_liveness_renewal_lag_seconds",
			Help: "Seconds since this store last renewed its liveness lease in the bucket: above the lease term (3s), the store serves nothing and its regions fail over."},
			func() float64 {
				last := l.Keeper.LastRenewal()
				if last.IsZero() {
					return 0
				}
				return time.Since(last).Seconds()
			}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "bellows_liveness_serving",
			Help: "1 while this store's liveness lease lets it serve, 0 once it has run out (UNAVAILABLE LEASE_EXPIRED)."},
			func() float64 {
				if l.Keeper.Serving(time.Now()) {
					return 1
				}
				return 0
			}),
	)
}
