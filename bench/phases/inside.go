package phases

import (
	"math"
	"slices"
	"time"
)

// A Sample is what the store and the run's processes had done by one
// instant: the store's own request latency (its histograms, before any
// network or client scheduling), its block cache's misses and where it read
// the blocks it missed, its warmup state, and each process's CPU time.
type Sample struct {
	At time.Time
	// Server-side latency of successful gets and scans; Count 0 when the
	// target has no server (in process).
	Get, Scan histogram
	// Block cache misses and the reads that served them, by source.
	Misses, BucketReads, WorkerReads uint64
	Switched                         time.Time
	Cached                           float64
	// CPU time per process: store, worker, workload.
	CPU map[string]time.Duration
}

// histogram is a latency histogram: the count and sum of observations
// (seconds) and the count per bucket, keyed by the bucket's upper bound.
type histogram struct {
	Count   uint64
	Sum     float64
	Buckets map[float64]uint64
	// Native says the buckets are a native histogram's (a factor of 1.09
	// apart) rather than the classic ones (a factor of 2).
	Native bool
}

// minus is what was observed between o and h (o earlier).
func (h histogram) minus(o histogram) histogram {
	d := histogram{Count: h.Count - o.Count, Sum: h.Sum - o.Sum, Buckets: map[float64]uint64{}, Native: h.Native}
	for ub, n := range h.Buckets {
		if n -= o.Buckets[ub]; n > 0 {
			d.Buckets[ub] = n
		}
	}
	return d
}

// quantile is the upper bound of the bucket holding quantile q, in
// seconds: an overestimate by at most the bucket's width.
func (h histogram) quantile(q float64) float64 {
	var total uint64
	bounds := make([]float64, 0, len(h.Buckets))
	for ub, n := range h.Buckets {
		total += n
		bounds = append(bounds, ub)
	}
	if total == 0 {
		return 0
	}
	slices.Sort(bounds)
	rank := uint64(math.Ceil(q * float64(total)))
	var seen uint64
	for _, ub := range bounds {
		if seen += h.Buckets[ub]; seen >= rank {
			return ub
		}
	}
	return bounds[len(bounds)-1]
}

// Inside is a span as the store and the processes saw it.
type Inside struct {
	// The store's own latency of the reads it answered in the span (ms);
	// absent when the target has no server.
	GetMeanMs  *float64 `json:"server_get_mean_ms,omitempty"`
	GetP99Ms   *float64 `json:"server_get_p99_ms,omitempty"`
	ScanMeanMs *float64 `json:"server_scan_mean_ms,omitempty"`
	ScanP99Ms  *float64 `json:"server_scan_p99_ms,omitempty"`
	// Reads is what the mechanism counts are per: the store's answered
	// gets and scans, or the client's in process.
	Reads int `json:"reads"`
	// Per 1,000 reads: block cache misses, and the reads of missed blocks
	// from the bucket and from a worker's memory.
	MissesPerKRead      float64 `json:"cache_misses_per_1000_reads"`
	BucketReadsPerKRead float64 `json:"bucket_reads_per_1000_reads"`
	WorkerReadsPerKRead float64 `json:"worker_reads_per_1000_reads"`
	// CPU used per second of the span, by process (1 = one core busy).
	CPU map[string]float64 `json:"cpu_cores"`
}

// insideOf is what happened between samples a and b; clientReads counts
// the reads when the store has no histograms (in process).
func insideOf(a, b Sample, clientReads int) Inside {
	in := Inside{CPU: map[string]float64{}}
	g, s := b.Get.minus(a.Get), b.Scan.minus(a.Scan)
	in.Reads = int(g.Count + s.Count)
	if in.Reads == 0 {
		in.Reads = clientReads
	}
	ms := func(h histogram) (mean, p99 *float64) {
		if h.Count == 0 {
			return nil, nil
		}
		m, p := h.Sum/float64(h.Count)*1e3, h.quantile(0.99)*1e3
		return &m, &p
	}
	in.GetMeanMs, in.GetP99Ms = ms(g)
	in.ScanMeanMs, in.ScanP99Ms = ms(s)
	if in.Reads > 0 {
		per := func(n uint64) float64 { return float64(n) * 1000 / float64(in.Reads) }
		in.MissesPerKRead = per(b.Misses - a.Misses)
		in.BucketReadsPerKRead = per(b.BucketReads - a.BucketReads)
		in.WorkerReadsPerKRead = per(b.WorkerReads - a.WorkerReads)
	}
	if span := b.At.Sub(a.At).Seconds(); span > 0 {
		for p, t := range b.CPU {
			in.CPU[p] = (t - a.CPU[p]).Seconds() / span
		}
	}
	return in
}
