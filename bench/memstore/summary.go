package memstore

import (
	"math"
	"slices"

	"github.com/bellows-kv/bellows/storage-engine/memstore"
)

// Report is memstore.json: {"config": ..., "results": [...]}, one result per
// policy and distribution.
type Report struct {
	Config  Config   `json:"config"`
	Results []Result `json:"results"`
}

// Result is one policy on one distribution: medians over its runs, and
// ratios of those medians to None's medians on the same distribution in the
// same invocation. A ratio is null when None's median is 0 (nothing to
// compare with).
type Result struct {
	Policy       string `json:"policy"`
	Distribution string `json:"distribution"`
	// The fields.
	WriteOpsPerS        float64  `json:"write_ops_per_s"`
	WriteRatioVsNone    *float64 `json:"write_ratio_vs_none"`
	FlushesRatioVsNone  *float64 `json:"flushes_ratio_vs_none"`
	SSTBytesRatioVsNone *float64 `json:"sst_bytes_ratio_vs_none"`
	GetP99RatioVsNone   *float64 `json:"get_p99_ratio_vs_none"`
	// ScanRatioVsNone is of the mean 20-key scan latency.
	ScanRatioVsNone  *float64 `json:"scan_ratio_vs_none"`
	GCCPURatioVsNone *float64 `json:"gc_cpu_ratio_vs_none"`

	// More ratios of medians.
	CompactionsRatioVsNone *float64 `json:"compactions_ratio_vs_none"`
	WALBytesRatioVsNone    *float64 `json:"wal_bytes_ratio_vs_none"`
	ScanP99RatioVsNone     *float64 `json:"scan_p99_ratio_vs_none"`
	// The reader during the paced writes (every policy at the same write
	// rate): get p99 and mean 20-key scan latency against None's.
	PacedGetP99RatioVsNone  *float64 `json:"paced_get_p99_ratio_vs_none,omitempty"`
	PacedScanRatioVsNone    *float64 `json:"paced_scan_ratio_vs_none,omitempty"`
	PacedScanP99RatioVsNone *float64 `json:"paced_scan_p99_ratio_vs_none,omitempty"`
	// Medians of the other figures (see RunResult for what each is).
	Flushes             float64 `json:"flushes"`
	Compactions         float64 `json:"compactions"`
	SSTBytes            float64 `json:"sst_bytes"`
	FlushedBytes        float64 `json:"flushed_bytes"`
	CompactionBytes     float64 `json:"compaction_written_bytes"`
	WALBytes            float64 `json:"wal_bytes"`
	InMemoryFlushes     float64 `json:"in_memory_flushes"`
	Merges              float64 `json:"merges"`
	InMemoryCompactions float64 `json:"in_memory_compactions"`
	VersionsDropped     float64 `json:"versions_dropped"`
	GCCPUShare          float64 `json:"gc_cpu_share"`
	GetP99Ms            float64 `json:"get_p99_ms"`
	GetMeanMs           float64 `json:"get_mean_ms"`
	ScanMeanMs          float64 `json:"scan_mean_ms"`
	ScanP99Ms           float64 `json:"scan_p99_ms"`
	WriteStalls         float64 `json:"write_stalls"`
	PacedGetP99Ms       float64 `json:"paced_get_p99_ms,omitempty"`
	PacedScanMeanMs     float64 `json:"paced_scan_mean_ms,omitempty"`

	// Spread is every per-run figure's distribution over the runs.
	Spread map[string]Spread `json:"spread"`
	// PairedRatioVsNone is, per figure, the distribution over the rounds
	// of this policy's run over None's run of the same round (the same
	// key sequences, minutes apart at most): the spread of the ratios.
	PairedRatioVsNone map[string]Spread `json:"paired_ratio_vs_none,omitempty"`
	// Runs are every run, in round order.
	Runs []RunResult `json:"runs"`
}

// Spread is a figure over the runs: min, quartiles, median, max.
type Spread struct {
	Min    float64 `json:"min"`
	Q1     float64 `json:"q1"`
	Median float64 `json:"median"`
	Q3     float64 `json:"q3"`
	Max    float64 `json:"max"`
	N      int     `json:"n"`
}

// metric is a per-run figure, named as in RunResult's JSON.
type metric struct {
	name string
	of   func(RunResult) float64
}

var runMetrics = []metric{
	{"write_ops_per_s", func(r RunResult) float64 { return r.WriteOpsPerS }},
	{"write_seconds", func(r RunResult) float64 { return r.WriteSeconds }},
	{"flushes", func(r RunResult) float64 { return float64(r.Flushes) }},
	{"wal_forced_flushes", func(r RunResult) float64 { return float64(r.WALForcedFlushes) }},
	{"compactions", func(r RunResult) float64 { return float64(r.Compactions) }},
	{"sst_bytes", func(r RunResult) float64 { return float64(r.SSTBytes) }},
	{"flushed_bytes", func(r RunResult) float64 { return float64(r.FlushedBytes) }},
	{"compaction_written_bytes", func(r RunResult) float64 { return float64(r.CompactionBytes) }},
	{"final_flush_bytes", func(r RunResult) float64 { return float64(r.FinalFlushBytes) }},
	{"wal_bytes", func(r RunResult) float64 { return float64(r.WALBytes) }},
	{"write_stalls", func(r RunResult) float64 { return float64(r.WriteStalls) }},
	{"in_memory_flushes", func(r RunResult) float64 { return float64(r.InMemoryFlushes) }},
	{"merges", func(r RunResult) float64 { return float64(r.Merges) }},
	{"in_memory_compactions", func(r RunResult) float64 { return float64(r.InMemoryCompactions) }},
	{"versions_dropped", func(r RunResult) float64 { return float64(r.VersionsDropped) }},
	{"gc_cpu_share", func(r RunResult) float64 { return r.GCCPUShare }},
	{"gc_cpu_share_of_used", func(r RunResult) float64 { return r.GCCPUShareOfUsed }},
	{"gc_cycles", func(r RunResult) float64 { return float64(r.GCCycles) }},
	{"gc_pause_ms_per_s", func(r RunResult) float64 { return r.GCPauseMsPerS }},
	{"gc_pause_max_ms", func(r RunResult) float64 { return r.GCPauseMaxMs }},
	{"get_mean_ms", func(r RunResult) float64 { return r.GetMeanMs }},
	{"get_p99_ms", func(r RunResult) float64 { return r.GetP99Ms }},
	{"scan_mean_ms", func(r RunResult) float64 { return r.ScanMeanMs }},
	{"scan_p99_ms", func(r RunResult) float64 { return r.ScanP99Ms }},
	{"paced_write_ops_per_s", func(r RunResult) float64 { return r.PacedWriteOpsPerS }},
	{"paced_get_mean_ms", func(r RunResult) float64 { return r.PacedGetMeanMs }},
	{"paced_get_p99_ms", func(r RunResult) float64 { return r.PacedGetP99Ms }},
	{"paced_scan_mean_ms", func(r RunResult) float64 { return r.PacedScanMeanMs }},
	{"paced_scan_p99_ms", func(r RunResult) float64 { return r.PacedScanP99Ms }},
	{"skiplists_per_read", func(r RunResult) float64 { return r.SkiplistsPerRead }},
	{"flat_segments_per_read", func(r RunResult) float64 { return r.FlatsPerRead }},
	{"files_per_read", func(r RunResult) float64 { return r.FilesPerRead }},
	{"skiplist_versions_per_read", func(r RunResult) float64 { return r.SkiplistVersionsPerRead }},
	{"paced_skiplist_versions_per_read", func(r RunResult) float64 { return r.PacedSkiplistVersionsPerRead }},
	{"misses_per_1k_reads", func(r RunResult) float64 { return r.MissesPerKRead }},
	{"paced_misses_per_1k_reads", func(r RunResult) float64 { return r.PacedMissesPerKRead }},
	{"paced_skiplists_per_read", func(r RunResult) float64 { return r.PacedSkiplistsPerRead }},
	{"paced_flat_segments_per_read", func(r RunResult) float64 { return r.PacedFlatsPerRead }},
	{"paced_files_per_read", func(r RunResult) float64 { return r.PacedFilesPerRead }},
	{"reads_per_s", func(r RunResult) float64 { return perSecond(r.Gets+r.Scans, r.WriteSeconds) }},
	{"gc_cycles_per_s", func(r RunResult) float64 { return perSecond(int(r.GCCycles), r.WriteSeconds) }},
	// Gets and scans alternate: a phase's reads are twice its gets, to one.
	{"paced_reads_per_s", func(r RunResult) float64 {
		if r.PacedWriteOpsPerS == 0 {
			return 0
		}
		return perSecond(2*r.PacedGets, float64(r.PacedWrites)/r.PacedWriteOpsPerS)
	}},
	{"slow_reads", func(r RunResult) float64 { return float64(r.SlowReads) }},
	{"read_max_ms", func(r RunResult) float64 { return r.ReadMaxMs }},
	{"get_cpu_ms", func(r RunResult) float64 { return r.GetCPUMs }},
	{"scan_cpu_ms", func(r RunResult) float64 { return r.ScanCPUMs }},
	{"paced_get_cpu_ms", func(r RunResult) float64 { return r.PacedGetCPUMs }},
	{"paced_scan_cpu_ms", func(r RunResult) float64 { return r.PacedScanCPUMs }},
}

// pairedMetrics are the figures whose per-round ratio to None is kept.
var pairedMetrics = []string{"write_ops_per_s", "flushes", "compactions", "sst_bytes", "wal_bytes", "gc_cpu_share", "get_p99_ms", "scan_mean_ms", "scan_p99_ms",
	"paced_get_p99_ms", "paced_scan_mean_ms", "paced_scan_p99_ms"}

func metricOf(name string) func(RunResult) float64 {
	for _, m := range runMetrics {
		if m.name == name {
			return m.of
		}
	}
	panic("memstore bench: no metric " + name)
}

// spreadOf is the distribution of v (quartiles by linear interpolation).
func spreadOf(v []float64) Spread {
	if len(v) == 0 {
		return Spread{}
	}
	s := slices.Clone(v)
	slices.Sort(s)
	return Spread{Min: s[0], Q1: quantile(s, 0.25), Median: quantile(s, 0.5), Q3: quantile(s, 0.75), Max: s[len(s)-1], N: len(s)}
}

func quantile(sorted []float64, q float64) float64 {
	pos := q * float64(len(sorted)-1)
	lo := int(math.Floor(pos))
	hi := min(lo+1, len(sorted)-1)
	return sorted[lo] + (pos-float64(lo))*(sorted[hi]-sorted[lo])
}

func values(runs []RunResult, of func(RunResult) float64) []float64 {
	out := make([]float64, len(runs))
	for i, r := range runs {
		out[i] = of(r)
	}
	return out
}

func median(runs []RunResult, of func(RunResult) float64) float64 {
	return spreadOf(values(runs, of)).Median
}

// ratio is a/b; nil if b is 0 (1 if both are).
func ratio(a, b float64) *float64 {
	var v float64
	switch {
	case b != 0:
		v = a / b
	case a == 0:
		v = 1
	default:
		return nil
	}
	return &v
}

func summarize(cfg Config, runs map[key][]RunResult) Report {
	rep := Report{Config: cfg}
	for _, dist := range cfg.Distributions {
		none := runs[key{string(memstore.None), dist}]
		for _, p := range cfg.Policies {
			rs := runs[key{p, dist}]
			rep.Results = append(rep.Results, result(p, dist, rs, none))
		}
	}
	return rep
}

func result(policy, dist string, rs, none []RunResult) Result {
	med := func(name string) float64 { return median(rs, metricOf(name)) }
	vsNone := func(name string) *float64 { return ratio(med(name), median(none, metricOf(name))) }
	res := Result{
		Policy: policy, Distribution: dist,
		WriteOpsPerS:            med("write_ops_per_s"),
		WriteRatioVsNone:        vsNone("write_ops_per_s"),
		FlushesRatioVsNone:      vsNone("flushes"),
		SSTBytesRatioVsNone:     vsNone("sst_bytes"),
		GetP99RatioVsNone:       vsNone("get_p99_ms"),
		ScanRatioVsNone:         vsNone("scan_mean_ms"),
		GCCPURatioVsNone:        vsNone("gc_cpu_share"),
		CompactionsRatioVsNone:  vsNone("compactions"),
		WALBytesRatioVsNone:     vsNone("wal_bytes"),
		ScanP99RatioVsNone:      vsNone("scan_p99_ms"),
		Flushes:                 med("flushes"),
		Compactions:             med("compactions"),
		SSTBytes:                med("sst_bytes"),
		FlushedBytes:            med("flushed_bytes"),
		CompactionBytes:         med("compaction_written_bytes"),
		WALBytes:                med("wal_bytes"),
		InMemoryFlushes:         med("in_memory_flushes"),
		Merges:                  med("merges"),
		InMemoryCompactions:     med("in_memory_compactions"),
		VersionsDropped:         med("versions_dropped"),
		GCCPUShare:              med("gc_cpu_share"),
		GetP99Ms:                med("get_p99_ms"),
		GetMeanMs:               med("get_mean_ms"),
		ScanMeanMs:              med("scan_mean_ms"),
		ScanP99Ms:               med("scan_p99_ms"),
		WriteStalls:             med("write_stalls"),
		PacedGetP99Ms:           med("paced_get_p99_ms"),
		PacedScanMeanMs:         med("paced_scan_mean_ms"),
		PacedGetP99RatioVsNone:  vsNone("paced_get_p99_ms"),
		PacedScanRatioVsNone:    vsNone("paced_scan_mean_ms"),
		PacedScanP99RatioVsNone: vsNone("paced_scan_p99_ms"),
		Spread:                  map[string]Spread{},
		Runs:                    rs,
	}
	for _, m := range runMetrics {
		res.Spread[m.name] = spreadOf(values(rs, m.of))
	}
	if policy != string(memstore.None) && len(none) == len(rs) {
		res.PairedRatioVsNone = map[string]Spread{}
		for _, name := range pairedMetrics {
			of := metricOf(name)
			var v []float64
			for i := range rs {
				if r := ratio(of(rs[i]), of(none[i])); r != nil {
					v = append(v, *r)
				}
			}
			res.PairedRatioVsNone[name] = spreadOf(v)
		}
	}
	return res
}

// Find is the result of a policy on a distribution.
func (rep Report) Find(policy, dist string) (Result, bool) {
	for _, r := range rep.Results {
		if r.Policy == policy && r.Distribution == dist {
			return r, true
		}
	}
	return Result{}, false
}

func perSecond(n int, seconds float64) float64 {
	if seconds <= 0 {
		return 0
	}
	return float64(n) / seconds
}
