package phases

import (
	"context"
	crand "crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"

	"github.com/bellows-kv/bellows/bench/cpu"
	"github.com/bellows-kv/bellows/bench/engine"
	"github.com/bellows-kv/bellows/internal/contract"
	"github.com/bellows-kv/bellows/storage-engine/blob"
	"github.com/bellows-kv/bellows/storage-engine/blockcache"
	"github.com/bellows-kv/bellows/storage-engine/compaction"
	"github.com/bellows-kv/bellows/storage-engine/offload"
	"github.com/bellows-kv/bellows/storage-engine/region"
	"github.com/bellows-kv/bellows/storage-engine/sstable"
	"github.com/bellows-kv/bellows/storage-engine/wal"
)

// Processes start the processes of one mode's run.
type Processes struct {
	// Compactor starts a compaction worker and returns its gRPC address,
	// its process ID (for its CPU time) and a function that stops it.
	Compactor func(ctx context.Context, name string) (addr string, pid int, stop func(), err error)
	// Store, if set, runs the region in a `bellows store` process (with
	// the given bucket, WAL directory, engine.yaml and compactor, "" for
	// none) and the workload reaches it over gRPC; if nil the region runs
	// in this process.
	Store func(ctx context.Context, name string, args StoreArgs) (grpcAddr, metricsAddr string, pid int, stop func(), err error)
}

// StoreArgs configure a store process.
type StoreArgs struct {
	BucketURL, WALDir, Config, Compactor string
	// Control: this is the control store (Config.ControlCPU says where it
	// runs), not the one under test.
	Control bool
}

// Phase is one phase's latency against the baseline: the change of the
// mean and of the p99 of get and scan latency. A figure is null (n/a) when
// the phase is empty: no operation of its kind began in it (PreSwitch's
// warmup phase is empty by construction).
type Phase struct {
	GetDegradationPct     *float64 `json:"get_degradation_pct"`
	ScanDegradationPct    *float64 `json:"scan_degradation_pct"`
	GetP99DegradationPct  *float64 `json:"get_p99_degradation_pct"`
	ScanP99DegradationPct *float64 `json:"scan_p99_degradation_pct"`
	DurationS             float64  `json:"duration_s"`
	GetMeanMs             *float64 `json:"get_mean_ms"`
	ScanMeanMs            *float64 `json:"scan_mean_ms"`
	GetP99Ms              *float64 `json:"get_p99_ms"`
	ScanP99Ms             *float64 `json:"scan_p99_ms"`
	Gets                  int      `json:"gets"`
	Scans                 int      `json:"scans"`
	// Control is the same figures of the control store's reads in the
	// same windows, against its own baseline (each run; absent without a
	// control).
	Control *ControlPhase `json:"control,omitempty"`
	// Inside is the phase as the store and the processes saw it (each run;
	// absent from a summary of runs).
	Inside *Inside `json:"inside,omitempty"`
}

// ControlPhase is the control store's change in a phase against its own
// baseline: what the machine alone did to latency in those seconds.
type ControlPhase struct {
	GetDegradationPct    *float64 `json:"get_degradation_pct"`
	ScanDegradationPct   *float64 `json:"scan_degradation_pct"`
	GetP99DegradationPct *float64 `json:"get_p99_degradation_pct"`
}

// Baseline is the latency before the compaction.
type Baseline struct {
	GetMeanMs  float64 `json:"get_mean_ms"`
	ScanMeanMs float64 `json:"scan_mean_ms"`
	GetP99Ms   float64 `json:"get_p99_ms"`
	ScanP99Ms  float64 `json:"scan_p99_ms"`
	Inside     *Inside `json:"inside,omitempty"`
}

// ModeResult is one warmup mode's run.
type ModeResult struct {
	Mode       string   `json:"mode"`
	Baseline   Baseline `json:"baseline"`
	Compaction Phase    `json:"compaction"`
	Warmup     Phase    `json:"warmup"`
	// Series and phase boundaries (seconds since the workload started)
	// feed the plot.
	Series         Series  `json:"series"`
	CompactionAtS  float64 `json:"compaction_start_s"`
	SwitchAtS      float64 `json:"switch_s"`
	WarmupEndAtS   float64 `json:"warmup_end_s"`
	BytesCompactor uint64  `json:"warmup_bytes_from_compactor"`
	BytesBucket    uint64  `json:"warmup_bytes_from_bucket"`
	// Runs are every repetition when the config repeats the modes; the
	// fields above are then medians (series and boundaries: the first run).
	Runs []RunResult `json:"runs,omitempty"`
}

// RunResult is one repetition of a mode.
type RunResult struct {
	Baseline   Baseline `json:"baseline"`
	Compaction Phase    `json:"compaction"`
	Warmup     Phase    `json:"warmup"`
}

// Series is per-window mean latency.
type Series struct {
	TimeS  []float64 `json:"time_s"`
	GetMs  []float64 `json:"get_ms"`
	ScanMs []float64 `json:"scan_ms"`
}

// Report is phases.json.
type Report struct {
	Config Config       `json:"config"`
	Modes  []ModeResult `json:"modes"`
	// Order is each repetition's order of the modes, as indexes into
	// Config.Modes (ShuffleModes).
	Order [][]int `json:"order,omitempty"`
}

// Progress reports what the run is doing and how far it is (0..1).
type Progress func(what string, done float64)

// Run runs every configured mode, one after the other, each on a fresh
// bucket, region and worker.
func Run(ctx context.Context, cfg Config, dir string, start Processes, progress Progress) (Report, error) {
	cfg = cfg.resolved()
	if err := cfg.validate(); err != nil {
		return Report{}, err
	}
	cfg.WritebackBeforeBaseline = settleWritesBack
	rep := Report{Config: cfg}
	repeats := max(cfg.Repeats, 1)
	runs := make([][]ModeResult, len(cfg.Modes))
	labels := modeLabels(cfg.Modes)
	total := float64(repeats * len(cfg.Modes))
	// Repetitions interleave the modes, so a slow spell of a shared
	// machine spreads over all of them instead of one.
	for r := 0; r < repeats; r++ {
		order := modeOrder(cfg, r)
		rep.Order = append(rep.Order, order)
		for k, i := range order {
			mode, _ := region.ParseWarmupMode(cfg.Modes[i])
			n := float64(r*len(cfg.Modes) + k)
			step := func(what string, frac float64) {
				label := mode.String()
				if repeats > 1 {
					label = fmt.Sprintf("%s (run %d/%d)", mode, r+1, repeats)
				}
				progress(fmt.Sprintf("%s: %s", label, what), (n+frac)/total)
			}
			res, err := runMode(ctx, cfg, filepath.Join(dir, fmt.Sprintf("%d-%s-%d", i, mode, r)), mode, start, step)
			if err != nil {
				return rep, fmt.Errorf("mode %s: %w", labels[i], err)
			}
			res.Mode = labels[i]
			runs[i] = append(runs[i], res)
		}
	}
	for _, rs := range runs {
		rep.Modes = append(rep.Modes, medianOf(rs))
	}
	progress("done", 1)
	return rep, nil
}

// modeOrder is the order repetition r runs the modes in, as indexes into
// cfg.Modes: the listed order, or with ShuffleModes a permutation drawn
// from the seed and r (the same on every run of the same config).
func modeOrder(cfg Config, r int) []int {
	order := make([]int, len(cfg.Modes))
	for i := range order {
		order[i] = i
	}
	if cfg.ShuffleModes {
		rng := rand.New(rand.NewPCG(cfg.Seed, uint64(r)))
		rng.Shuffle(len(order), func(a, b int) { order[a], order[b] = order[b], order[a] })
	}
	return order
}

// AASuffix marks the second run of a mode the config lists twice: an A/A
// pair, whose difference is the run's noise floor.
const AASuffix = " (A/A)"

// modeLabels names each configured mode, a repeated one with AASuffix.
func modeLabels(modes []string) []string {
	seen := map[string]bool{}
	out := make([]string, len(modes))
	for i, m := range modes {
		mode, _ := region.ParseWarmupMode(m)
		out[i] = mode.String()
		if seen[out[i]] {
			out[i] += AASuffix
		}
		seen[mode.String()] = true
	}
	return out
}

// medianOf summarises repetitions of one mode: each figure is the median
// over the runs; the series and phase boundaries are the first run's.
func medianOf(rs []ModeResult) ModeResult {
	if len(rs) == 1 {
		return rs[0]
	}
	out := rs[0]
	out.Runs = nil
	// medOpt is the median of the runs that have the figure (an empty
	// phase has none); nil if none has.
	medOpt := func(f func(ModeResult) *float64) *float64 {
		var v []float64
		for _, r := range rs {
			if x := f(r); x != nil {
				v = append(v, *x)
			}
		}
		if len(v) == 0 {
			return nil
		}
		m := median(v)
		return &m
	}
	med := func(f func(ModeResult) float64) float64 {
		return *medOpt(func(r ModeResult) *float64 { v := f(r); return &v })
	}
	medInt := func(f func(ModeResult) int) int {
		return int(med(func(r ModeResult) float64 { return float64(f(r)) }))
	}
	out.Baseline = Baseline{GetMeanMs: med(func(r ModeResult) float64 { return r.Baseline.GetMeanMs }),
		ScanMeanMs: med(func(r ModeResult) float64 { return r.Baseline.ScanMeanMs }),
		GetP99Ms:   med(func(r ModeResult) float64 { return r.Baseline.GetP99Ms }),
		ScanP99Ms:  med(func(r ModeResult) float64 { return r.Baseline.ScanP99Ms })}
	phase := func(p func(ModeResult) Phase) Phase {
		return Phase{
			GetDegradationPct:     medOpt(func(r ModeResult) *float64 { return p(r).GetDegradationPct }),
			ScanDegradationPct:    medOpt(func(r ModeResult) *float64 { return p(r).ScanDegradationPct }),
			GetP99DegradationPct:  medOpt(func(r ModeResult) *float64 { return p(r).GetP99DegradationPct }),
			ScanP99DegradationPct: medOpt(func(r ModeResult) *float64 { return p(r).ScanP99DegradationPct }),
			DurationS:             med(func(r ModeResult) float64 { return p(r).DurationS }),
			GetMeanMs:             medOpt(func(r ModeResult) *float64 { return p(r).GetMeanMs }),
			ScanMeanMs:            medOpt(func(r ModeResult) *float64 { return p(r).ScanMeanMs }),
			GetP99Ms:              medOpt(func(r ModeResult) *float64 { return p(r).GetP99Ms }),
			ScanP99Ms:             medOpt(func(r ModeResult) *float64 { return p(r).ScanP99Ms }),
			Gets:                  medInt(func(r ModeResult) int { return p(r).Gets }),
			Scans:                 medInt(func(r ModeResult) int { return p(r).Scans }),
		}
	}
	out.Compaction = phase(func(r ModeResult) Phase { return r.Compaction })
	out.Warmup = phase(func(r ModeResult) Phase { return r.Warmup })
	for _, r := range rs {
		out.Runs = append(out.Runs, RunResult{Baseline: r.Baseline, Compaction: r.Compaction, Warmup: r.Warmup})
	}
	return out
}

func runMode(ctx context.Context, cfg Config, dir string, mode region.WarmupMode, start Processes, step Progress) (ModeResult, error) {
	res := ModeResult{Mode: mode.String()}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return res, err
	}
	bucketURL, err := blob.WithCostModel("file://"+filepath.Join(dir, "bucket"), cfg.Bucket)
	if err != nil {
		return res, err
	}
	bucket, err := blob.Open(ctx, bucketURL)
	if err != nil {
		return res, err
	}
	defer bucket.Close()

	var compactor string
	// Whose CPU time the run reports: this process is the workload.
	pids := map[string]int{"workload": 0}
	// None and WriteThrough (the paper's baselines) compact in the store.
	if mode != region.WarmupNone && mode != region.WarmupWriteThrough {
		addr, pid, stop, err := start.Compactor(ctx, "compactor-"+mode.String())
		if err != nil {
			return res, err
		}
		defer stop()
		compactor, pids["worker"] = addr, pid
	}
	var r target
	if start.Store != nil {
		t, pid, stop, err := startStoreProcess(ctx, cfg, dir, mode, bucketURL, compactor, false, start.Store)
		if err != nil {
			return res, err
		}
		defer stop()
		r, pids["store"] = t, pid
	} else {
		t, stop, err := openLocal(ctx, cfg, dir, mode, bucket, bucketURL, compactor)
		if err != nil {
			return res, err
		}
		defer stop()
		r = t
	}

	// The control: a second store process with a small dataset of its
	// own, read in the same seconds and never compacted. Whatever moves its
	// latency between the baseline and a phase is the machine, not the
	// mode, and is divided out of the target's change (DiD).
	var ctl target
	ccfg := controlConfig(cfg)
	if cfg.ControlKeys > 0 && start.Store != nil {
		cdir := filepath.Join(dir, "control")
		if err := os.MkdirAll(cdir, 0o755); err != nil {
			return res, err
		}
		curl, err := blob.WithCostModel("file://"+filepath.Join(cdir, "bucket"), cfg.Bucket)
		if err != nil {
			return res, err
		}
		t, pid, stop, err := startStoreProcess(ctx, ccfg, cdir, region.WarmupNone, curl, "", true, start.Store)
		if err != nil {
			return res, fmt.Errorf("control store: %w", err)
		}
		defer stop()
		ctl, pids["control"] = t, pid
	}

	step("loading", 0)
	if err := load(ctx, r, cfg); err != nil {
		return res, err
	}
	if ctl != nil {
		if err := load(ctx, ctl, ccfg); err != nil {
			return res, fmt.Errorf("control store: %w", err)
		}
		if err := prewarm(ctl, ccfg); err != nil {
			return res, fmt.Errorf("control store: %w", err)
		}
	}
	step("warming the cache", 0.1)
	if err := prewarm(r, cfg); err != nil {
		return res, err
	}
	// The load's files (and the previous run's) are dirty in the page
	// cache, and the kernel writes them back about 30 s after they were
	// written: in this run's compaction and warmup phases, on some runs
	// more than others. Written back now, they are not in any phase.
	step("writing back the page cache", 0.15)
	settle()

	sample := func() (Sample, error) {
		s, err := r.Sample()
		if err != nil {
			return s, err
		}
		s.CPU = map[string]time.Duration{}
		for name, pid := range pids {
			if s.CPU[name], err = cpu.CPUTime(pid); err != nil {
				return s, err
			}
		}
		return s, nil
	}
	sBegan, err := sample()
	if err != nil {
		return res, err
	}
	began := sBegan.At
	rec := newRecorder(began, time.Duration(cfg.Window))
	ctlRec := newRecorder(began, time.Duration(cfg.Window))
	stop := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan error, cfg.Readers+2)
	if ctl != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- readLoop(ctl, ccfg, ctlRec, 1000, stop)
		}()
	}
	for g := 0; g < cfg.Readers; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			errs <- readLoop(r, cfg, rec, uint64(g), stop)
		}(g)
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		errs <- updateLoop(r, cfg, stop)
	}()
	// The probe samples the store at one rate from the first read to the
	// last, so each phase carries the same cost of being watched: a
	// scrape takes the store's CPU for a moment, and scraping only after
	// the baseline put that in every mode's compaction and warmup p99.
	samples := make(chan probeResult, 1<<16)
	wg.Add(1)
	go func() {
		defer wg.Done()
		probe(sample, probeInterval, samples, stop)
	}()
	halt := func() error {
		close(stop)
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				return err
			}
		}
		return nil
	}

	step("baseline", 0.2)
	sT0, err := nextSample(samples, func(s Sample) bool { return s.At.Sub(began) >= time.Duration(cfg.Baseline) })
	if err != nil {
		_ = halt()
		return res, err
	}
	t0 := sT0.At
	done := make(chan error, 1)
	go func() {
		done <- r.Compact(ctx)
	}()
	step("compaction", 0.35)
	sTs, sTe, err := awaitPhases(samples, mode, cfg, t0, done, step)
	ts, te := sTs.Switched, sTe.At
	if mode == region.WarmupPreSwitch {
		te = ts
	}
	if err != nil {
		_ = halt()
		return res, err
	}
	if _, err := nextSample(samples, func(s Sample) bool { return s.At.Sub(sTe.At) >= time.Duration(cfg.Tail) }); err != nil {
		_ = halt()
		return res, err
	}
	if err := halt(); err != nil {
		return res, err
	}

	bg, bs := rec.stats(began, t0)
	res.Baseline = Baseline{GetMeanMs: bg.MeanMs, ScanMeanMs: bs.MeanMs, GetP99Ms: bg.P99Ms, ScanP99Ms: bs.P99Ms}
	res.Compaction = phaseOf(rec, t0, ts, bg, bs)
	res.Warmup = phaseOf(rec, ts, te, bg, bs)
	if ctl != nil {
		cg, cs := ctlRec.stats(began, t0)
		res.Compaction.Control = controlOf(phaseOf(ctlRec, t0, ts, cg, cs))
		res.Warmup.Control = controlOf(phaseOf(ctlRec, ts, te, cg, cs))
	}
	// The store's counters are read at the probe's ticks: a phase's begin
	// at the switch is the first sample that saw it (at most a tick late).
	inside := func(a, b Sample, from, to time.Time) *Inside {
		g, s := rec.stats(from, to)
		in := insideOf(a, b, g.Count+s.Count)
		return &in
	}
	res.Baseline.Inside = inside(sBegan, sT0, began, t0)
	res.Compaction.Inside = inside(sT0, sTs, t0, ts)
	if mode != region.WarmupPreSwitch {
		res.Warmup.Inside = inside(sTs, sTe, ts, te)
	}
	res.Series.TimeS, res.Series.GetMs, res.Series.ScanMs = rec.series()
	res.CompactionAtS = t0.Sub(began).Seconds()
	res.SwitchAtS = ts.Sub(began).Seconds()
	res.WarmupEndAtS = te.Sub(began).Seconds()
	res.BytesCompactor, res.BytesBucket, err = r.WarmupBytes()
	return res, err
}

// controlConfig is the control store's run: ControlKeys keys in one
// file, read by one reader at ControlReadsPerSec.
func controlConfig(cfg Config) Config {
	c := cfg
	c.Keys, c.Files, c.Readers, c.ReadsPerSec = cfg.ControlKeys, 1, 1, cfg.ControlReadsPerSec
	c.Seed = cfg.Seed + 1
	return c
}

func controlOf(p Phase) *ControlPhase {
	return &ControlPhase{GetDegradationPct: p.GetDegradationPct, ScanDegradationPct: p.ScanDegradationPct, GetP99DegradationPct: p.GetP99DegradationPct}
}

// phaseOf is the latency of the operations that began in [from, to)
// against the baseline's.
func phaseOf(rec *recorder, from, to time.Time, bg, bs Latency) Phase {
	p := Phase{DurationS: max(to.Sub(from).Seconds(), 0)}
	g, s := rec.stats(from, to)
	p.Gets, p.Scans = g.Count, s.Count
	if g.Count > 0 {
		p.GetMeanMs, p.GetP99Ms = &g.MeanMs, &g.P99Ms
	}
	if s.Count > 0 {
		p.ScanMeanMs, p.ScanP99Ms = &s.MeanMs, &s.P99Ms
	}
	p.GetDegradationPct = pct(g.Count, g.MeanMs, bg.Count, bg.MeanMs)
	p.GetP99DegradationPct = pct(g.Count, g.P99Ms, bg.Count, bg.P99Ms)
	p.ScanDegradationPct = pct(s.Count, s.MeanMs, bs.Count, bs.MeanMs)
	p.ScanP99DegradationPct = pct(s.Count, s.P99Ms, bs.Count, bs.P99Ms)
	return p
}

// pct is the change in percent of a phase's figure against the
// baseline's; nil (n/a) if either has no operations.
func pct(n int, phase float64, baseN int, base float64) *float64 {
	if n == 0 || baseN == 0 || base == 0 {
		return nil
	}
	v := (phase/base - 1) * 100
	return &v
}

// probeInterval is how often the probe samples the store: fine enough to
// place a phase's boundary, rare enough not to load it.
const probeInterval = 100 * time.Millisecond

type probeResult struct {
	Sample
	err error
}

// probe samples every interval until stop, into out (never blocking: a
// full channel drops the sample).
func probe(sample func() (Sample, error), interval time.Duration, out chan<- probeResult, stop <-chan struct{}) {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case <-tick.C:
		}
		s, err := sample()
		select {
		case out <- probeResult{s, err}:
		default:
		}
	}
}

// nextSample is the next sample from the probe that satisfies ok.
func nextSample(samples <-chan probeResult, ok func(Sample) bool) (Sample, error) {
	for p := range samples {
		if p.err != nil {
			return p.Sample, p.err
		}
		if ok(p.Sample) {
			return p.Sample, nil
		}
	}
	return Sample{}, errors.New("the probe stopped")
}

// awaitPhases returns the samples that ended the compaction phase (the
// first to see the switch to the new file; its Switched is when it
// happened) and the warmup phase: for the incremental modes when the warmup
// finished; for PreSwitch at the switch (it fetched the new file before);
// for the others when reads had brought 95% of the new file's blocks into
// the cache, or MaxWarmup passed.
func awaitPhases(samples <-chan probeResult, mode region.WarmupMode, cfg Config, t0 time.Time, done <-chan error, step Progress) (sw, end Sample, err error) {
	compacted := false
	for {
		var s Sample
		select {
		case err := <-done:
			if err != nil {
				return sw, end, err
			}
			compacted = true
			done = nil
			continue
		case p := <-samples:
			if p.err != nil {
				return sw, end, p.err
			}
			s = p.Sample
		}
		if sw.At.IsZero() {
			if s.Switched.After(t0) {
				sw = s
				step("warmup", 0.6)
			}
			continue
		}
		incremental := mode == region.WarmupIncremental || mode == region.WarmupThrottledIncremental
		if !compacted {
			continue
		}
		if mode == region.WarmupPreSwitch {
			// PreSwitch fetched the new file before it switched: its
			// warmup phase is empty by construction (n/a), its cost is
			// in the compaction phase.
			return sw, sw, nil
		}
		if incremental || s.At.Sub(sw.Switched) > time.Duration(cfg.MaxWarmup) || s.Cached >= 0.95 {
			return sw, s, nil
		}
	}
}

func keyOf(i int) []byte { return []byte(fmt.Sprintf("user%08d", i)) }

func load(ctx context.Context, r target, cfg Config) error {
	v := make([]byte, cfg.ValueSize)
	for f := 0; f < cfg.Files; f++ {
		for i := f; i < cfg.Keys; i += cfg.Files {
			_, _ = crand.Read(v)
			if err := r.Put(keyOf(i), v); err != nil {
				return err
			}
		}
		if err := r.Flush(ctx); err != nil {
			return err
		}
	}
	return nil
}

// prewarm reads every key in parallel ranges so that the baseline is the
// steady state of a warm cache, as in the paper.
func prewarm(r target, cfg Config) error {
	const parts = 32
	var wg sync.WaitGroup
	errs := make(chan error, parts)
	for p := 0; p < parts; p++ {
		wg.Add(1)
		go func(p int) {
			defer wg.Done()
			lo, hi := cfg.Keys*p/parts, cfg.Keys*(p+1)/parts
			rows, err := r.Scan(keyOf(lo), keyOf(hi), 0)
			if err == nil && rows != hi-lo {
				err = fmt.Errorf("prewarm read %d keys of [%d,%d)", rows, lo, hi)
			}
			errs <- err
		}(p)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// readLoop issues reads at a fixed rate (open loop), so the store is not
// saturated and a phase's latency shows its cache behaviour, not a queue.
func readLoop(r target, cfg Config, rec *recorder, seed uint64, stop <-chan struct{}) error {
	rng := rand.New(rand.NewPCG(cfg.Seed, seed))
	z := engine.NewZipf(rng, uint64(cfg.Keys), cfg.Theta)
	lim := rate.NewLimiter(rate.Limit(float64(cfg.ReadsPerSec)/float64(cfg.Readers)), 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { <-stop; cancel() }()
	for {
		if err := lim.Wait(ctx); err != nil {
			return nil
		}
		k := keyOf(int(z.Next()))
		scan := rng.Float64() < cfg.ScanFraction
		t := time.Now()
		var err error
		if scan {
			_, err = r.Scan(k, nil, cfg.ScanLength)
		} else {
			err = r.Get(k)
		}
		if err != nil {
			return err
		}
		rec.add(t, time.Since(t), scan)
	}
}

func updateLoop(r target, cfg Config, stop <-chan struct{}) error {
	if cfg.UpdatesPerSec <= 0 {
		<-stop
		return nil
	}
	lim := rate.NewLimiter(rate.Limit(cfg.UpdatesPerSec), 1)
	rng := rand.New(rand.NewPCG(cfg.Seed, 99))
	v := make([]byte, cfg.ValueSize)
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-stop; cancel() }()
	for {
		if err := lim.Wait(ctx); err != nil {
			return nil
		}
		_, _ = crand.Read(v)
		if err := r.Put(keyOf(rng.IntN(cfg.Keys)), v); err != nil {
			return err
		}
	}
}

// openLocal opens the region in this process, its compactions offloaded to
// compactor ("" runs them here).
func openLocal(ctx context.Context, cfg Config, dir string, mode region.WarmupMode, bucket *blob.Bucket, bucketURL, compactor string) (target, func(), error) {
	cache := blockcache.New(cfg.CacheBytes)
	var exec compaction.Executor = compaction.Local{Bucket: bucket}
	if mode == region.WarmupWriteThrough {
		exec = region.WriteThroughExecutor{Bucket: bucket, Cache: cache}
	}
	var closers []func()
	stop := func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	}
	if compactor != "" {
		off, err := offload.New(offload.Options{
			Mode: offload.Required, Workers: offload.Static{compactor}, BucketURL: bucketURL,
			Local: compaction.Local{Bucket: bucket}, KeepOutput: contract.WarmupMode(mode.String()).TransfersOutput(),
			Logger: slog.New(slog.DiscardHandler), Registerer: prometheus.NewRegistry(),
		})
		if err != nil {
			return nil, nil, err
		}
		closers = append(closers, func() { off.Close() })
		exec = off
	}
	r, err := region.Open(ctx, region.Options{
		Name: "phases", Bucket: bucket, WALDir: filepath.Join(dir, "wal"), WALMode: wal.ModeAsync,
		MemstoreBytes: memstoreBytes, BlockCache: cache,
		SST:                   sstable.WriterOptions{BlockSize: cfg.BlockSize, Compression: sstable.S2Compression},
		DisableAutoCompaction: true, Executor: exec, Warmup: mode, WarmupRateBytes: cfg.WarmupRate,
		Retention: compaction.Retention{MaxVersions: 1},
	})
	if err != nil {
		stop()
		return nil, nil, err
	}
	closers = append(closers, func() { r.Close() })
	return localTarget{r: r, cache: cache}, stop, nil
}

// memstoreBytes holds the whole run's updates, so no flush competes with
// the compaction under test.
const memstoreBytes = 512 << 20

// startStoreProcess writes the store's engine.yaml for mode and starts it.
func startStoreProcess(ctx context.Context, cfg Config, dir string, mode region.WarmupMode, bucketURL, compactor string, control bool,
	start func(context.Context, string, StoreArgs) (string, string, int, func(), error)) (target, int, func(), error) {
	offloadMode := "Required"
	if compactor == "" {
		offloadMode = "Disabled"
	}
	// minFiles above the run's file count: the only compaction is the
	// major one the bench asks for.
	yaml := fmt.Sprintf("memstore: {bytes: %d}\nblockCacheBytes: %d\ncompaction: {minFiles: %d, maxFiles: %d, ratio: 1.2, maxBytes: %d}\n"+
		"offload: %s\nwarmup: {mode: %s, rateBytesPerSecond: %d}\nsyncMode: async\n",
		memstoreBytes, cfg.CacheBytes, cfg.Files+100, cfg.Files+100, int64(1)<<40, offloadMode, mode, cfg.WarmupRate)
	config := filepath.Join(dir, "engine.yaml")
	if err := os.WriteFile(config, []byte(yaml), 0o644); err != nil {
		return nil, 0, nil, err
	}
	grpcAddr, metricsAddr, pid, stop, err := start(ctx, "store-"+mode.String(), StoreArgs{
		BucketURL: bucketURL, WALDir: filepath.Join(dir, "wal"), Config: config, Compactor: compactor, Control: control})
	if err != nil {
		return nil, 0, nil, err
	}
	t, err := newGRPCTarget(grpcAddr, metricsAddr)
	if err != nil {
		stop()
		return nil, 0, nil, err
	}
	return t, pid, func() { _ = t.Close(); stop() }, nil
}
