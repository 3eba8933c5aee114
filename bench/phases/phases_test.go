package phases

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/bellows-kv/bellows/storage-engine/server"
)

func TestRecorderMeansByPhase(t *testing.T) {
	start := time.Unix(0, 0)
	r := newRecorder(start, 100*time.Millisecond)
	// Baseline: gets of 1ms; later phase: gets of 3ms and a scan of 10ms.
	for i := 0; i < 10; i++ {
		r.add(start.Add(time.Duration(i)*10*time.Millisecond), time.Millisecond, false)
	}
	later := start.Add(time.Second)
	r.add(later, 3*time.Millisecond, false)
	r.add(later.Add(time.Millisecond), 10*time.Millisecond, true)
	if g, s := r.mean(start, later); g != 1 || s != 0 {
		t.Fatalf("baseline mean = %v, %v; want 1ms and no scans", g, s)
	}
	if g, s := r.mean(later, later.Add(time.Second)); g != 3 || s != 10 {
		t.Fatalf("later mean = %v, %v; want 3 and 10", g, s)
	}
	if got := pct(1, 3, 10, 1); got == nil || *got != 200 {
		t.Fatalf("pct(3,1) = %v, want +200%%", got)
	}
	if got := pct(0, 0, 10, 1); got != nil {
		t.Fatalf("a phase without operations: pct = %v, want nil (n/a)", *got)
	}
	ts, gets, _ := r.series()
	if len(ts) != 11 || gets[0] != 1 || gets[10] != 3 {
		t.Fatalf("series %v %v", ts, gets)
	}
}

func f64(v float64) *float64 { return &v }

func TestMarkdownIsFigure7Shaped(t *testing.T) {
	cfg := Default()
	cfg.StoreFlags = []string{"--remote-cache-rate=8000000B/s", "--wal-archive-interval=0s"}
	cfg.Command = "bellows-bench phases --repeat 16"
	rep := Report{Config: cfg, Modes: []ModeResult{
		{Mode: "ThrottledIncremental", Baseline: Baseline{GetMeanMs: 0.1, GetP99Ms: 0.9},
			Compaction: Phase{GetDegradationPct: f64(4), GetP99DegradationPct: f64(7), ScanDegradationPct: f64(1), ScanP99DegradationPct: f64(3), DurationS: 3},
			Warmup:     Phase{GetDegradationPct: f64(-2), GetP99DegradationPct: f64(9), ScanDegradationPct: f64(5), ScanP99DegradationPct: f64(6), DurationS: 5}},
		// PreSwitch's warmup phase is empty: n/a, never +0%.
		{Mode: "PreSwitch", Baseline: Baseline{GetMeanMs: 0.1},
			Compaction: Phase{GetDegradationPct: f64(30), GetP99DegradationPct: f64(80), ScanDegradationPct: f64(20), ScanP99DegradationPct: f64(50), DurationS: 4}}}}
	md := Markdown(rep)
	for _, want := range []string{"| ThrottledIncremental | 0.100 / 0.900 |", "| +4% | +7% | +1% | +3% | 3.0 | -2% | +9% | +5% | +6% | 5.0 |",
		"| PreSwitch |", "| +30% | +80% | +20% | +50% | 4.0 | n/a | n/a | n/a | n/a | 0.0 |",
		"compaction: get Δ", "get p99 Δ", "scan p99 Δ", "warmup s", "paper's regime", Goal, "1ms per FetchBlocks stream + 125 MB/s", "**Command:** `bellows-bench phases --repeat 16`",
		"Store settings beyond engine.yaml: `--remote-cache-rate=8000000B/s --wal-archive-interval=0s`"} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q:\n%s", want, md)
		}
	}
	if strings.Contains(md, "+0%") {
		t.Errorf("an empty phase shows as +0%%:\n%s", md)
	}
	js, err := json.Marshal(rep.Modes[1].Warmup)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"get_degradation_pct":null`, `"scan_degradation_pct":null`, `"get_p99_degradation_pct":null`, `"scan_p99_degradation_pct":null`} {
		if !strings.Contains(string(js), want) {
			t.Errorf("empty phase JSON lacks %s: %s", want, js)
		}
	}
	if err := (Config{Modes: []string{"Sideways"}, Keys: 1, ValueSize: 1, Files: 1, Readers: 1, ReadsPerSec: 1, WarmupRate: 1, Window: 1, Baseline: 1}).validate(); err == nil {
		t.Fatal("an unknown mode was accepted")
	}
}

func TestStoreTargetSamplesTheStoresMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	// The store's own request histogram, with its native buckets.
	lat := server.NewMetrics(reg)
	for i := range 990 {
		lat.Observe("get", nil, time.Duration(100+i%10)*time.Microsecond)
	}
	for range 10 {
		lat.Observe("get", nil, 5*time.Millisecond)
	}
	lat.Observe("scan", nil, time.Millisecond)
	gauges := map[string]float64{"bellows_block_cache_misses_total": 12, "bellows_block_cache_miss_bucket_reads_total": 5,
		"bellows_block_cache_miss_worker_reads_total": 7}
	for name, v := range gauges {
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name}, func() float64 { return v }))
	}
	perRegion := func(name string, v float64) {
		g := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name}, []string{"region"})
		g.WithLabelValues("region-000").Set(v)
		g.WithLabelValues("region-001").Set(5)
		reg.MustRegister(g)
	}
	perRegion("bellows_warmup_switched_timestamp_seconds", 1.7e9)
	perRegion("bellows_region_cached_ratio", 0.25)
	bytes := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "bellows_warmup_bytes_total"}, []string{"source"})
	bytes.WithLabelValues("bucket").Add(7)
	bytes.WithLabelValues("compactor").Add(11)
	reg.MustRegister(bytes)
	// The store compresses a scrape that accepts gzip, on the CPU the
	// timed reads need: every scrape must ask for it uncompressed.
	var gzipAsked atomic.Int32
	metrics := promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.Contains(r.Header.Get("Accept-Encoding"), "gzip") {
			gzipAsked.Add(1)
		}
		metrics.ServeHTTP(w, r)
	}))
	defer srv.Close()
	defer func() {
		if n := gzipAsked.Load(); n > 0 {
			t.Errorf("%d scrapes asked the store for gzip", n)
		}
	}()
	tg, err := newGRPCTarget("127.0.0.1:1", strings.TrimPrefix(srv.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer tg.Close()
	s, err := tg.Sample()
	if err != nil {
		t.Fatal(err)
	}
	if !s.Switched.Equal(time.Unix(1_700_000_000, 0)) || s.Cached != 0.25 {
		t.Fatalf("Switched, Cached = %v, %v", s.Switched, s.Cached)
	}
	if s.Misses != 12 || s.BucketReads != 5 || s.WorkerReads != 7 {
		t.Fatalf("misses %d, bucket reads %d, worker reads %d", s.Misses, s.BucketReads, s.WorkerReads)
	}
	if !s.Get.Native || s.Get.Count != 1000 || s.Scan.Count != 1 {
		t.Fatalf("get: native %v, count %d; scan count %d", s.Get.Native, s.Get.Count, s.Scan.Count)
	}
	// The native buckets resolve the p99 (the 990th of 1,000: 109 µs) and
	// the p99.5 (5 ms) to within their factor of 1.09; the classic ones
	// would say 200 µs and 6.4 ms.
	if p := s.Get.quantile(0.99); p < 109e-6 || p > 109e-6*1.1 {
		t.Fatalf("p99 %v s, want 109 µs within 9%%", p)
	}
	if p := s.Get.quantile(0.995); p < 5e-3 || p > 5e-3*1.1 {
		t.Fatalf("p99.5 %v s, want 5 ms within 9%%", p)
	}
	// A span is the difference of two samples.
	lat.Observe("get", nil, 2*time.Millisecond)
	later, err := tg.Sample()
	if err != nil {
		t.Fatal(err)
	}
	in := insideOf(s, later, 0)
	if in.Reads != 1 || *in.GetMeanMs < 1.99 || *in.GetMeanMs > 2.01 || *in.GetP99Ms < 2 || *in.GetP99Ms > 2.2 || in.ScanMeanMs != nil {
		t.Fatalf("the span of one 2 ms get: %+v", in)
	}
	if c, b, err := tg.WarmupBytes(); err != nil || c != 11 || b != 7 {
		t.Fatalf("WarmupBytes = %v, %v, %v", c, b, err)
	}
	if _, err := tg.gauge("bellows_absent", nil); err == nil || !strings.Contains(err.Error(), "bellows_absent") {
		t.Fatalf("a missing metric: err = %v", err)
	}
}

func TestRepeatsReportMedians(t *testing.T) {
	run := func(get float64) ModeResult {
		return ModeResult{Mode: "Incremental", Baseline: Baseline{GetMeanMs: get}, Compaction: Phase{GetDegradationPct: f64(get), GetP99DegradationPct: f64(2 * get)}, Warmup: Phase{DurationS: get}}
	}
	m := medianOf([]ModeResult{run(9), run(1), run(4)})
	if m.Baseline.GetMeanMs != 4 || *m.Compaction.GetDegradationPct != 4 || *m.Compaction.GetP99DegradationPct != 8 || m.Warmup.DurationS != 4 || len(m.Runs) != 3 {
		t.Fatalf("median of 9,1,4: %+v", m)
	}
	// Empty in every run: n/a, not 0.
	if m.Warmup.GetDegradationPct != nil || m.Warmup.ScanP99DegradationPct != nil {
		t.Fatalf("median of empty phases: %+v", m.Warmup)
	}
	// Empty in one run: the median of the others.
	e := run(100)
	e.Compaction.GetDegradationPct = nil
	if p := medianOf([]ModeResult{run(2), e, run(6)}).Compaction.GetDegradationPct; p == nil || *p != 4 {
		t.Fatalf("median of 2, n/a, 6 = %v, want 4", p)
	}
	cfg := Default()
	cfg.Repeats = 3
	md := Markdown(Report{Config: cfg, Modes: []ModeResult{m}})
	if !strings.Contains(md, "median of 3 runs") || !strings.Contains(md, "+9%, +1%, +4%") || !strings.Contains(md, "+18%, +2%, +8%") || !strings.Contains(md, "n/a, n/a, n/a") {
		t.Fatalf("markdown does not show the runs:\n%s", md)
	}
}

func TestShuffledRepetitionsRunEveryModeOnceInAnOrderOfTheirOwn(t *testing.T) {
	cfg := Default()
	listed := make([]int, len(cfg.Modes))
	for i := range listed {
		listed[i] = i
	}
	cfg.ShuffleModes = false
	for r := range 3 {
		if got := modeOrder(cfg, r); !slices.Equal(got, listed) {
			t.Fatalf("unshuffled repetition %d ran %v, want the listed order %v", r, got, listed)
		}
	}
	cfg.ShuffleModes = true
	orders := map[string]bool{}
	firsts := map[int]bool{}
	for r := range 20 {
		got := modeOrder(cfg, r)
		if again := modeOrder(cfg, r); !slices.Equal(got, again) {
			t.Fatalf("repetition %d ran %v, then %v: the order must follow from the seed", r, got, again)
		}
		if sorted := slices.Sorted(slices.Values(got)); !slices.Equal(sorted, listed) {
			t.Fatalf("repetition %d ran %v: not every mode once", r, got)
		}
		orders[fmt.Sprint(got)] = true
		firsts[got[0]] = true
	}
	// Eight modes, 20 repetitions: a shuffle that repeated one order, or
	// always led with the same mode, is not spreading what one run leaves
	// to the next.
	if len(orders) < 15 || len(firsts) < 4 {
		t.Fatalf("20 shuffled repetitions gave %d orders and %d first modes", len(orders), len(firsts))
	}
}

func TestRecorderP99AndEmpty(t *testing.T) {
	start := time.Unix(0, 0)
	r := newRecorder(start, 100*time.Millisecond)
	// 100 gets: 99 of 1ms and one of 50ms; p99 is 1ms (nearest rank), the
	// mean 1.49ms. 200 gets with two of 50ms: p99 50ms.
	for i := 0; i < 100; i++ {
		d := time.Millisecond
		if i == 42 {
			d = 50 * time.Millisecond
		}
		r.add(start.Add(time.Duration(i)*time.Millisecond), d, false)
	}
	g, s := r.stats(start, start.Add(time.Second))
	if g.Count != 100 || g.P99Ms != 1 || g.MeanMs != 1.49 || s.Count != 0 {
		t.Fatalf("stats = %+v %+v", g, s)
	}
	r.add(start.Add(150*time.Millisecond), 50*time.Millisecond, false)
	if g, _ := r.stats(start, start.Add(time.Second)); g.P99Ms != 50 {
		t.Fatalf("p99 of 101 with two slow = %v, want 50", g.P99Ms)
	}
	// A phase in which nothing began is empty: every figure n/a.
	p := phaseOf(r, start.Add(time.Second), start.Add(2*time.Second), g, s)
	if p.GetDegradationPct != nil || p.GetP99DegradationPct != nil || p.ScanDegradationPct != nil || p.Gets != 0 {
		t.Fatalf("empty phase: %+v", p)
	}
}

func TestDefaultIsThePapersRegime(t *testing.T) {
	c := Default()
	data := int64(c.Keys) * int64(c.ValueSize)
	if c.CacheBytes < data || c.CacheBytes >= 2*data || !slices.Contains(c.Modes, "WriteThrough") || c.Repeats < 5 || c.LinkLatency <= 0 || c.TransferRate <= 0 {
		t.Fatalf("default config %+v", c)
	}
	if err := c.validate(); err != nil {
		t.Fatal(err)
	}
	c.CacheBytes = 256 << 20
	if err := c.validate(); err == nil || !strings.Contains(err.Error(), "256 MiB") || !strings.Contains(err.Error(), "29 MiB") {
		t.Fatalf("a cache that holds old and new: err = %v", err)
	}
	c.Keys = 1000
	if r := c.resolved(); r.CacheBytes != 256<<20 {
		t.Fatalf("resolved overrode an explicit cache: %d", r.CacheBytes)
	}
	c.CacheBytes = 0
	if r := c.resolved(); r.CacheBytes != int64(float64(1000*c.ValueSize)/0.7) || r.validate() != nil {
		t.Fatalf("derived cache %d", r.CacheBytes)
	}
}

func TestBootstrapIntervalHoldsTheMeanAndNarrowsWithRuns(t *testing.T) {
	few := bootstrapMean([]float64{1, 5, 3, 7})
	if few.Mean != 4 || few.Lo > 4 || few.Hi < 4 || few.Lo < 1 || few.Hi > 7 {
		t.Fatalf("4 runs: %+v", few)
	}
	var many []float64
	for range 4 {
		many = append(many, 1, 5, 3, 7)
	}
	more := bootstrapMean(many)
	if more.Mean != 4 || more.Hi-more.Lo >= few.Hi-few.Lo {
		t.Fatalf("16 runs of the same spread should narrow the interval: %+v against %+v", more, few)
	}
	if one := bootstrapMean([]float64{2}); one.Lo != 2 || one.Hi != 2 {
		t.Fatalf("one run: %+v", one)
	}
}

func TestAnAAPairGivesTheResolutionAndTheVerdictUsesTheIntervals(t *testing.T) {
	if got := modeLabels([]string{"None", "ThrottledIncremental", "throttledincremental"}); !slices.Equal(got, []string{"None", "ThrottledIncremental", "ThrottledIncremental (A/A)"}) {
		t.Fatalf("labels %v", got)
	}
	mode := func(name string, getDelta ...float64) ModeResult {
		m := ModeResult{Mode: name}
		for _, d := range getDelta {
			m.Runs = append(m.Runs, RunResult{Compaction: Phase{GetDegradationPct: f64(d), ScanDegradationPct: f64(0), GetP99DegradationPct: f64(0)},
				Warmup: Phase{GetDegradationPct: f64(d), ScanDegradationPct: f64(0), GetP99DegradationPct: f64(0)}})
		}
		return m
	}
	rep := Report{Modes: []ModeResult{mode("None", 80, 90, 100), mode("ThrottledIncremental", 1, 2, 3), mode("ThrottledIncremental (A/A)", 2, 3, 4)}}
	res := Resolutions(rep)
	if len(res) != 6 || res[0].Phase != "compaction" || res[0].Figure != "mean get" || res[0].Mean != 1 || res[0].Bound != 1 {
		t.Fatalf("the A/A differences are 1 pp in every run: %+v", res)
	}
	md := markdownVerdict(rep)
	for _, want := range []string{"compaction mean get Δ ≤ 5%: **met** (mean +2.0%", "None's warmup mean get Δ ≥ 50% (the paper's problem visible): **met**",
		"resolution on mean get ≤ 2%: **met** (1.0 pp"} {
		if !strings.Contains(md, want) {
			t.Fatalf("verdict lacks %q:\n%s", want, md)
		}
	}
	// A mean within the goal whose interval reaches past it is a miss.
	rep.Modes[1] = mode("ThrottledIncremental", -6, 1, 14)
	if md := markdownVerdict(rep); !strings.Contains(md, "compaction mean get Δ ≤ 5%: **not met, unresolved** (the interval spans the bound) (mean +3.0%") {
		t.Fatalf("an interval reaching past the goal passed:\n%s", md)
	}
	rep.Modes[1] = mode("ThrottledIncremental", 6, 7, 8)
	if md := markdownVerdict(rep); !strings.Contains(md, "compaction mean get Δ ≤ 5%: **missed** (mean +7.0%") {
		t.Fatalf("an interval wholly past the goal was not a miss:\n%s", md)
	}
}

func TestTheControlsChangeIsDividedOut(t *testing.T) {
	p := Phase{GetDegradationPct: f64(10), Control: &ControlPhase{GetDegradationPct: f64(10)}}
	if v := meanGet(p); v == nil || *v > 1e-9 || *v < -1e-9 {
		t.Fatalf("+10%% with the control's +10%%: %v, want 0", v)
	}
	p.Control.GetDegradationPct = f64(-50)
	if v := meanGet(p); v == nil || *v < 119.99 || *v > 120.01 {
		t.Fatalf("+10%% with the control's -50%%: %v, want +120", v)
	}
	if v := meanGet(Phase{GetDegradationPct: f64(7)}); v == nil || *v != 7 {
		t.Fatalf("without a control: %v, want the change itself", v)
	}
	if v := meanGet(Phase{GetDegradationPct: f64(7), Control: &ControlPhase{}}); v != nil {
		t.Fatalf("a control with an empty phase: %v, want n/a", *v)
	}
}

// The report says where the control ran, because that decides what its
// division takes out: beside the store, the store's own CPU use as well.
func TestTheReportSaysWhereTheControlRan(t *testing.T) {
	run := RunResult{Compaction: Phase{GetDegradationPct: f64(1), Control: &ControlPhase{GetDegradationPct: f64(0)}},
		Warmup: Phase{GetDegradationPct: f64(1), Control: &ControlPhase{GetDegradationPct: f64(0)}}}
	rep := Report{Config: Default(), Modes: []ModeResult{{Mode: "ThrottledIncremental", Runs: []RunResult{run, run}}}}
	if md := markdownResolution(rep); !strings.Contains(md, "on the store's CPU (so it also slows when the store's own work takes that CPU") ||
		!strings.Contains(md, "(4500 reads/s)") {
		t.Fatalf("the default control runs beside the store at 4500 reads/s; the report says:\n%s", md)
	}
	rep.Config.ControlCPU = 1
	if md := markdownResolution(rep); !strings.Contains(md, "on CPU 1, not the store's") {
		t.Fatalf("a control on CPU 1 is described as:\n%s", md)
	}
	c := Default()
	c.ControlCPU = -1
	if err := c.validate(); err == nil || !strings.Contains(err.Error(), "--control-cpu -1") {
		t.Fatalf("a negative control CPU: %v", err)
	}
}

// The write-back before each baseline is reported from what the run
// recorded, not from whether it was shuffled: a report rendered again from
// an older JSON must not claim a write-back that run did not do.
func TestTheReportSaysThePageCacheWasWrittenBackOnlyWhenItWas(t *testing.T) {
	const writeback = "writing the page cache back before its baseline"
	for _, c := range []struct {
		shuffle, writeback bool
		want               []string
	}{
		{false, false, []string{"in the listed order"}},
		{false, true, []string{"in the listed order", writeback}},
		{true, false, []string{"order of its own"}},
		{true, true, []string{"order of its own", writeback}},
	} {
		got := orderString(Config{ShuffleModes: c.shuffle, WritebackBeforeBaseline: c.writeback})
		for _, w := range c.want {
			if !strings.Contains(got, w) {
				t.Errorf("shuffle=%v writeback=%v: %q lacks %q", c.shuffle, c.writeback, got, w)
			}
		}
		if !c.writeback && strings.Contains(got, writeback) {
			t.Errorf("shuffle=%v, no write-back recorded: %q claims one", c.shuffle, got)
		}
	}
}
