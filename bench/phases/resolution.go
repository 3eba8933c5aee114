package phases

import (
	"fmt"
	"math"
	"strings"
)

// adjusted is a phase's change with the control store's change in the same
// seconds divided out: (1+Δ)/(1+Δcontrol) − 1. Without a control, the
// change itself.
func adjusted(p Phase, f func(Phase) *float64, fc func(*ControlPhase) *float64) *float64 {
	v := f(p)
	if v == nil || p.Control == nil {
		return v
	}
	c := fc(p.Control)
	if c == nil {
		return nil
	}
	a := ((1+*v/100)/(1+*c/100) - 1) * 100
	return &a
}

// Figures the goal bounds, each with its control's counterpart.
var (
	meanGet = func(p Phase) *float64 {
		return adjusted(p, func(p Phase) *float64 { return p.GetDegradationPct }, func(c *ControlPhase) *float64 { return c.GetDegradationPct })
	}
	meanScan = func(p Phase) *float64 {
		return adjusted(p, func(p Phase) *float64 { return p.ScanDegradationPct }, func(c *ControlPhase) *float64 { return c.ScanDegradationPct })
	}
	p99Get = func(p Phase) *float64 {
		return adjusted(p, func(p Phase) *float64 { return p.GetP99DegradationPct }, func(c *ControlPhase) *float64 { return c.GetP99DegradationPct })
	}
)

// hasControl says whether the runs read a control store.
func hasControl(rep Report) bool {
	for _, m := range rep.Modes {
		if runsOf(m)[0].Compaction.Control != nil {
			return true
		}
	}
	return false
}

// runsOf are a mode's runs: its Runs when it repeated, itself otherwise.
func runsOf(m ModeResult) []RunResult {
	if len(m.Runs) > 0 {
		return m.Runs
	}
	return []RunResult{{Baseline: m.Baseline, Compaction: m.Compaction, Warmup: m.Warmup}}
}

// values are a figure of every run that has it.
func values(rs []RunResult, f func(RunResult) *float64) []float64 {
	var out []float64
	for _, r := range rs {
		if v := f(r); v != nil {
			out = append(out, *v)
		}
	}
	return out
}

// serverDelta is the change in percent of the store's own latency in a
// phase against its baseline's, as the store timed both.
func serverDelta(base, phase *Inside, f func(*Inside) *float64) *float64 {
	if base == nil || phase == nil || f(base) == nil || f(phase) == nil || *f(base) == 0 {
		return nil
	}
	v := (*f(phase) / *f(base) - 1) * 100
	return &v
}

func ivString(xs []float64) string {
	if len(xs) == 0 {
		return "n/a"
	}
	iv := bootstrapMean(xs)
	if iv.N == 1 {
		return fmt.Sprintf("%+.1f%%", iv.Mean)
	}
	return fmt.Sprintf("%+.1f%% [%+.1f, %+.1f]", iv.Mean, iv.Lo, iv.Hi)
}

type phaseFigure func(RunResult) Phase

var (
	compactionPhase phaseFigure = func(r RunResult) Phase { return r.Compaction }
	warmupPhase     phaseFigure = func(r RunResult) Phase { return r.Warmup }
)

// Goals are the per-phase bounds on ThrottledIncremental (the upper
// end of the 95% interval must be within them) and the least None's warmup
// must show.
const (
	GoalGetMeanPct      = 5
	GoalScanMeanPct     = 10
	GoalGetP99Pct       = 10
	GoalNoneWarmupPct   = 50
	GoalResolutionPct   = 2
	resolutionControl   = "ThrottledIncremental"
	resolutionAAControl = resolutionControl + AASuffix
)

// markdownResolution is what lets a reader judge the figures: the mean of
// every run with its 95% bootstrap interval, client-observed and inside the
// store; the mechanism's counts per 1,000 reads; CPU per process; the A/A
// pair's difference (the run's resolution) and the goal's verdict.
func markdownResolution(rep Report) string {
	var b strings.Builder
	b.WriteString("\n## Means over runs, with 95% bootstrap intervals\n\n")
	b.WriteString("Client-observed Δ against each run's own baseline: mean of the runs [95% percentile-bootstrap interval of that mean].\n\n")
	b.WriteString("| mode | runs | compaction: get Δ | get p99 Δ | scan Δ | warmup: get Δ | get p99 Δ | scan Δ |\n|---|---:|---|---|---|---|---|---|\n")
	for _, m := range rep.Modes {
		rs := runsOf(m)
		fmt.Fprintf(&b, "| %s | %d |", m.Mode, len(rs))
		for _, ph := range []phaseFigure{compactionPhase, warmupPhase} {
			fmt.Fprintf(&b, " %s | %s | %s |",
				ivString(values(rs, func(r RunResult) *float64 { return ph(r).GetDegradationPct })),
				ivString(values(rs, func(r RunResult) *float64 { return ph(r).GetP99DegradationPct })),
				ivString(values(rs, func(r RunResult) *float64 { return ph(r).ScanDegradationPct })))
		}
		b.WriteString("\n")
	}
	if hasControl(rep) {
		where := "on the store's CPU (so it also slows when the store's own work takes that CPU, and the division takes that cost out with the drift)"
		if rep.Config.ControlCPU != 0 {
			where = fmt.Sprintf("on CPU %d, not the store's (the store's own work does not move it, nor does the store's CPU's drift)", rep.Config.ControlCPU)
		}
		fmt.Fprintf(&b, "\n**Against the control store** (the machine's drift divided out): the same Δ, each run's divided by the control store's "+
			"change in the same seconds, (1+Δ)/(1+Δcontrol) − 1. The control is a second store process %s, with a small dataset "+
			"of its own in cache, read throughout (%d reads/s) and never compacted. The verdict and the A/A resolution below use these.\n\n",
			where, rep.Config.ControlReadsPerSec)
		b.WriteString("| mode | compaction: get Δ | get p99 Δ | scan Δ | warmup: get Δ | get p99 Δ | scan Δ | control's own get Δ: compaction / warmup |\n|---|---|---|---|---|---|---|---|\n")
		for _, m := range rep.Modes {
			rs := runsOf(m)
			fmt.Fprintf(&b, "| %s |", m.Mode)
			for _, ph := range []phaseFigure{compactionPhase, warmupPhase} {
				fmt.Fprintf(&b, " %s | %s | %s |", ivString(values(rs, func(r RunResult) *float64 { return meanGet(ph(r)) })),
					ivString(values(rs, func(r RunResult) *float64 { return p99Get(ph(r)) })),
					ivString(values(rs, func(r RunResult) *float64 { return meanScan(ph(r)) })))
			}
			ctl := func(ph phaseFigure) string {
				return ivString(values(rs, func(r RunResult) *float64 {
					if c := ph(r).Control; c != nil {
						return c.GetDegradationPct
					}
					return nil
				}))
			}
			fmt.Fprintf(&b, " %s / %s |\n", ctl(compactionPhase), ctl(warmupPhase))
		}
	}
	if hasServer(rep) {
		b.WriteString("\n**Inside the store.** The same Δ from the store's own request latency (its `bellows_kv_request_duration_seconds`, " +
			"native buckets 9% apart, so a p99 is that bucket's upper bound): what the store did, without the network or the client's scheduling.\n\n")
		b.WriteString("| mode | baseline get ms (mean / p99) | compaction: get Δ | get p99 Δ | scan Δ | warmup: get Δ | get p99 Δ | scan Δ |\n|---|---:|---|---|---|---|---|---|\n")
		for _, m := range rep.Modes {
			rs := runsOf(m)
			base := func(f func(*Inside) *float64) float64 {
				return median(values(rs, func(r RunResult) *float64 { return insideField(r.Baseline.Inside, f) }))
			}
			fmt.Fprintf(&b, "| %s | %.3f / %.3f |", m.Mode, base(func(in *Inside) *float64 { return in.GetMeanMs }),
				base(func(in *Inside) *float64 { return in.GetP99Ms }))
			for _, ph := range []phaseFigure{compactionPhase, warmupPhase} {
				d := func(f func(*Inside) *float64) string {
					return ivString(values(rs, func(r RunResult) *float64 { return serverDelta(r.Baseline.Inside, ph(r).Inside, f) }))
				}
				fmt.Fprintf(&b, " %s | %s | %s |", d(func(in *Inside) *float64 { return in.GetMeanMs }),
					d(func(in *Inside) *float64 { return in.GetP99Ms }), d(func(in *Inside) *float64 { return in.ScanMeanMs }))
			}
			b.WriteString("\n")
		}
	}
	if hasInside(rep) {
		b.WriteString("\n**The mechanism, per 1,000 reads** (median of the runs): block cache misses / blocks read from the bucket / " +
			"blocks read from a worker's memory. These counts do not depend on the machine's speed.\n\n")
		b.WriteString("| mode | baseline | compaction | warmup |\n|---|---|---|---|\n")
		for _, m := range rep.Modes {
			rs := runsOf(m)
			cell := func(in func(RunResult) *Inside) string {
				f := func(g func(*Inside) float64) float64 {
					var v []float64
					for _, r := range rs {
						if x := in(r); x != nil {
							v = append(v, g(x))
						}
					}
					return median(v)
				}
				if in(rs[0]) == nil {
					return "n/a"
				}
				return fmt.Sprintf("%.1f / %.1f / %.1f", f(func(x *Inside) float64 { return x.MissesPerKRead }),
					f(func(x *Inside) float64 { return x.BucketReadsPerKRead }), f(func(x *Inside) float64 { return x.WorkerReadsPerKRead }))
			}
			fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", m.Mode, cell(func(r RunResult) *Inside { return r.Baseline.Inside }),
				cell(func(r RunResult) *Inside { return r.Compaction.Inside }), cell(func(r RunResult) *Inside { return r.Warmup.Inside }))
		}
		b.WriteString("\n**CPU by process** (cores busy, median of the runs; `/proc/<pid>/stat`): store / worker / workload (this bench: the readers, the writer and the recording).\n\n")
		b.WriteString("| mode | baseline | compaction | warmup |\n|---|---|---|---|\n")
		for _, m := range rep.Modes {
			rs := runsOf(m)
			cell := func(in func(RunResult) *Inside) string {
				if in(rs[0]) == nil {
					return "n/a"
				}
				var parts []string
				for _, p := range []string{"store", "worker", "workload"} {
					var v []float64
					for _, r := range rs {
						if x := in(r); x != nil {
							if c, ok := x.CPU[p]; ok {
								v = append(v, c)
							}
						}
					}
					if len(v) == 0 {
						parts = append(parts, "–")
					} else {
						parts = append(parts, fmt.Sprintf("%.2f", median(v)))
					}
				}
				return strings.Join(parts, " / ")
			}
			fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", m.Mode, cell(func(r RunResult) *Inside { return r.Baseline.Inside }),
				cell(func(r RunResult) *Inside { return r.Compaction.Inside }), cell(func(r RunResult) *Inside { return r.Warmup.Inside }))
		}
	}
	b.WriteString(markdownVerdict(rep))
	return b.String()
}

// upperVerdict judges a bound on a figure by its interval: met when the
// whole interval is within it, missed when the whole interval is past it,
// and otherwise not met and unresolved: the run cannot tell.
func upperVerdict(iv interval, bound float64) string {
	switch {
	case iv.Hi <= bound:
		return "**met**"
	case iv.Lo > bound:
		return "**missed**"
	}
	return "**not met, unresolved** (the interval spans the bound)"
}

func insideField(in *Inside, f func(*Inside) *float64) *float64 {
	if in == nil {
		return nil
	}
	return f(in)
}

func hasInside(rep Report) bool {
	for _, m := range rep.Modes {
		if runsOf(m)[0].Baseline.Inside != nil {
			return true
		}
	}
	return false
}

func hasServer(rep Report) bool {
	for _, m := range rep.Modes {
		if in := runsOf(m)[0].Baseline.Inside; in != nil && in.GetMeanMs != nil {
			return true
		}
	}
	return false
}

func modeNamed(rep Report, name string) (ModeResult, bool) {
	for _, m := range rep.Modes {
		if m.Mode == name {
			return m, true
		}
	}
	return ModeResult{}, false
}

// Resolution is the A/A pair's difference in one figure: per run pair, the
// second run's Δ less the first's; the mean with its interval. An effect is
// resolved when it exceeds Bound, the interval's larger end in magnitude.
type Resolution struct {
	Phase, Figure string
	interval
	Bound float64
}

// Resolutions compares the control mode with its A/A copy, run by run, in
// mean get and scan Δ of both phases; none without an A/A pair.
func Resolutions(rep Report) []Resolution {
	a, okA := modeNamed(rep, resolutionControl)
	b, okB := modeNamed(rep, resolutionAAControl)
	if !okA || !okB {
		return nil
	}
	ra, rb := runsOf(a), runsOf(b)
	var out []Resolution
	for _, ph := range []struct {
		name string
		of   phaseFigure
	}{{"compaction", compactionPhase}, {"warmup", warmupPhase}} {
		for _, fig := range []struct {
			name string
			f    func(Phase) *float64
		}{{"mean get", meanGet}, {"mean scan", meanScan}, {"p99 get", p99Get}} {
			var d []float64
			for i := range min(len(ra), len(rb)) {
				x, y := fig.f(ph.of(ra[i])), fig.f(ph.of(rb[i]))
				if x != nil && y != nil {
					d = append(d, *y-*x)
				}
			}
			if len(d) == 0 {
				continue
			}
			iv := bootstrapMean(d)
			out = append(out, Resolution{Phase: ph.name, Figure: fig.name, interval: iv, Bound: math.Max(math.Abs(iv.Lo), math.Abs(iv.Hi))})
		}
	}
	return out
}

// markdownVerdict states the resolution and the goal, met or missed, from
// the intervals' upper ends.
func markdownVerdict(rep Report) string {
	var b strings.Builder
	if res := Resolutions(rep); len(res) > 0 {
		fmt.Fprintf(&b, "\n## Resolution: the A/A pair\n\n%s ran twice in every repetition, interleaved with the others. "+
			"Per repetition, the second's Δ less the first's; mean [95%% interval]. The resolution is the interval's larger end: a difference "+
			"between modes smaller than it is not told from noise. Target: ≤ %d%% on mean get.\n\n", resolutionControl, GoalResolutionPct)
		b.WriteString("| phase | figure | A/A difference | resolution |\n|---|---|---|---:|\n")
		for _, r := range res {
			fmt.Fprintf(&b, "| %s | %s | %+.1f [%+.1f, %+.1f] pp | %.1f pp |\n", r.Phase, r.Figure, r.Mean, r.Lo, r.Hi, r.Bound)
		}
	}
	ti, ok := modeNamed(rep, resolutionControl)
	if !ok {
		return b.String()
	}
	b.WriteString("\n## Verdict\n\n")
	rs := runsOf(ti)
	check := func(what string, xs []float64, bound float64) {
		if len(xs) == 0 {
			fmt.Fprintf(&b, "- %s: n/a (no run had the phase)\n", what)
			return
		}
		iv := bootstrapMean(xs)
		fmt.Fprintf(&b, "- %s ≤ %.0f%%: %s (mean %+.1f%%, interval [%+.1f, %+.1f], %d runs)\n", what, bound, upperVerdict(iv, bound), iv.Mean, iv.Lo, iv.Hi, iv.N)
	}
	for _, ph := range []struct {
		name string
		of   phaseFigure
	}{{"compaction", compactionPhase}, {"warmup", warmupPhase}} {
		check(resolutionControl+" "+ph.name+" mean get Δ", values(rs, func(r RunResult) *float64 { return meanGet(ph.of(r)) }), GoalGetMeanPct)
		check(resolutionControl+" "+ph.name+" mean scan Δ", values(rs, func(r RunResult) *float64 { return meanScan(ph.of(r)) }), GoalScanMeanPct)
		check(resolutionControl+" "+ph.name+" p99 get Δ", values(rs, func(r RunResult) *float64 { return p99Get(ph.of(r)) }), GoalGetP99Pct)
	}
	if none, ok := modeNamed(rep, "None"); ok {
		xs := values(runsOf(none), func(r RunResult) *float64 { return meanGet(r.Warmup) })
		if len(xs) > 0 {
			iv := bootstrapMean(xs)
			verdict := "**met**"
			if iv.Lo < GoalNoneWarmupPct {
				verdict = "**missed**"
			}
			fmt.Fprintf(&b, "- None's warmup mean get Δ ≥ %d%% (the paper's problem visible): %s (mean %+.1f%%, interval [%+.1f, %+.1f])\n",
				GoalNoneWarmupPct, verdict, iv.Mean, iv.Lo, iv.Hi)
		}
	}
	if res := Resolutions(rep); len(res) > 0 {
		worst := 0.0
		for _, r := range res {
			if r.Figure == "mean get" {
				worst = math.Max(worst, r.Bound)
			}
		}
		verdict := "**met**"
		if worst > GoalResolutionPct {
			verdict = "**missed**"
		}
		fmt.Fprintf(&b, "- resolution on mean get ≤ %d%%: %s (%.1f pp, the worse phase)\n", GoalResolutionPct, verdict, worst)
	}
	return b.String()
}
