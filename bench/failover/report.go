package failover

import (
	"encoding/json"
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"

	"github.com/bellows-kv/bellows/bench/report"
	"github.com/bellows-kv/bellows/internal/contract"
)

// Name is the report's file name, without extension.
const Name = "failover"

// Report is failover.json.
type Report struct {
	Command string `json:"command"`
	report.Provenance
	Settings Settings      `json:"settings"`
	Summary  []ModeSummary `json:"summary"`
	Runs     []RunResult   `json:"runs"`
	// Findings are what the runs' numbers and the stores' logs show,
	// written after the run (bellows-bench failover --render).
	Findings []string `json:"findings,omitempty"`
}

// Settings are the run's configuration, as the report states it.
type Settings struct {
	Runs             int      `json:"runs_per_mode"`
	Modes            []string `json:"modes"`
	Stores           int      `json:"stores"`
	Regions          int      `json:"regions"`
	WritersPerRegion int      `json:"writers_per_region"`
	Rate             int      `json:"writes_per_s"`
	ValueBytes       int      `json:"value_bytes"`
	WarmupS          float64  `json:"warmup_s"`
	SteadyS          float64  `json:"steady_s"`
	AfterS           float64  `json:"after_s"`
	ReadLatencyMs    float64  `json:"read_latency_ms"`
	BandwidthMBps    float64  `json:"bandwidth_mb_per_s"`
	WriteLatencyMs   float64  `json:"write_latency_ms"`
	BalanceInterval  string   `json:"balance_interval"`
	ArchiveInterval  string   `json:"wal_archive_interval"`
	WriteTimeoutS    float64  `json:"write_timeout_s"`
}

// SettingsOf is what a report says of cfg.
func SettingsOf(cfg Config) Settings {
	return Settings{Runs: cfg.Runs, Modes: cfg.Modes, Stores: cfg.Stores, Regions: cfg.Regions,
		WritersPerRegion: cfg.WritersPerRegion, Rate: cfg.Rate, ValueBytes: cfg.ValueBytes,
		WarmupS: cfg.Warmup.Seconds(), SteadyS: cfg.Steady.Seconds(), AfterS: cfg.After.Seconds(),
		ReadLatencyMs: ms(cfg.Model.Latency), BandwidthMBps: cfg.Model.Bandwidth / 1e6, WriteLatencyMs: ms(cfg.Model.WriteLatency),
		BalanceInterval: cfg.BalanceInterval.String(), ArchiveInterval: cfg.ArchiveInterval.String(), WriteTimeoutS: cfg.WriteTimeout.Seconds()}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// Spread is a figure's median over the runs and its range.
type Spread struct {
	Median float64 `json:"median"`
	Min    float64 `json:"min"`
	Max    float64 `json:"max"`
}

func spreadOf(v []float64) Spread {
	if len(v) == 0 {
		return Spread{}
	}
	return Spread{Median: report.Median(v), Min: slices.Min(v), Max: slices.Max(v)}
}

// ModeSummary is one mode's figures over its runs.
type ModeSummary struct {
	Mode string `json:"mode"`
	Runs int    `json:"runs"`
	// FailedOver are the regions the killed stores held, over every run;
	// NeverBack those with no acknowledged write after the kill.
	FailedOver int `json:"failed_over_regions"`
	NeverBack  int `json:"never_back"`
	// First write after the kill, over every failed-over region of every
	// run (ms): median, p90 and the worst; RunMedian and RunWorst, each
	// run's median and worst, over the runs.
	FailoverMedianMs float64 `json:"failover_median_ms"`
	FailoverP90Ms    float64 `json:"failover_p90_ms"`
	FailoverWorstMs  float64 `json:"failover_worst_ms"`
	RunMedian        Spread  `json:"run_median_ms"`
	RunWorst         Spread  `json:"run_worst_ms"`
	// OpenMedianMs, OpenWorstMs: the kill to the new owner's log of the
	// region open, over every region (-1: none seen).
	OpenMedianMs float64 `json:"open_median_ms"`
	OpenWorstMs  float64 `json:"open_worst_ms"`
	// Fenced and Map: the kill to the victim's lease fenced and to the
	// failover's map epoch, over the runs.
	Fenced Spread `json:"fenced_ms"`
	Map    Spread `json:"map_ms"`
	// Replayed: records replayed per region, over every region.
	Replayed Spread `json:"replayed_records"`
	// Write latency before the kill (SteadyP50, SteadyP99) and after the
	// failover (AfterP50, AfterP99), each run's, over the runs (ms).
	SteadyP50 Spread `json:"steady_p50_ms"`
	SteadyP99 Spread `json:"steady_p99_ms"`
	AfterP50  Spread `json:"after_p50_ms"`
	AfterP99  Spread `json:"after_p99_ms"`
	// Acked and Lost writes, over every run; LostRuns the runs that lost
	// any; LostOldestMs the oldest lost write's age at the kill, the
	// largest over the runs (the RPO as a time span).
	Acked        int     `json:"acked"`
	Failed       int     `json:"failed"`
	Lost         int     `json:"lost"`
	LostPerRun   []int   `json:"lost_per_run"`
	LostRuns     int     `json:"runs_losing_writes"`
	LostOldestMs float64 `json:"lost_oldest_before_kill_ms"`
}

// Summarize computes each mode's summary from runs, in modes' order.
func Summarize(runs []RunResult, modes []string) []ModeSummary {
	var out []ModeSummary
	for _, mode := range modes {
		s := ModeSummary{Mode: mode, OpenMedianMs: -1, OpenWorstMs: -1}
		var first, open, replayed, runMed, runWorst, fenced, mapped, p50, p99, ap50, ap99 []float64
		for _, r := range runs {
			if r.Mode != mode {
				continue
			}
			s.Runs++
			var rf []float64
			for _, g := range r.Regions {
				s.FailedOver++
				if g.FirstWriteMs < 0 {
					s.NeverBack++
					continue
				}
				rf = append(rf, g.FirstWriteMs)
				if g.OpenMs >= 0 {
					open = append(open, g.OpenMs)
				}
				replayed = append(replayed, float64(g.Replayed))
			}
			first = append(first, rf...)
			if len(rf) > 0 {
				runMed = append(runMed, report.Median(rf))
				runWorst = append(runWorst, slices.Max(rf))
			}
			if r.FencedMs >= 0 {
				fenced = append(fenced, r.FencedMs)
			}
			if r.MapMs >= 0 {
				mapped = append(mapped, r.MapMs)
			}
			p50, p99 = append(p50, r.Steady.P50), append(p99, r.Steady.P99)
			if r.After != nil {
				ap50, ap99 = append(ap50, r.After.P50), append(ap99, r.After.P99)
			}
			s.Acked += r.Acked
			s.Failed += r.Failed
			s.Lost += r.Lost
			s.LostPerRun = append(s.LostPerRun, r.Lost)
			if r.Lost > 0 {
				s.LostRuns++
				s.LostOldestMs = max(s.LostOldestMs, r.LostOldestMs)
			}
		}
		if len(first) > 0 {
			s.FailoverMedianMs, s.FailoverP90Ms, s.FailoverWorstMs = report.Median(first), nearestRank(first, 0.9), slices.Max(first)
		}
		if len(open) > 0 {
			s.OpenMedianMs, s.OpenWorstMs = report.Median(open), slices.Max(open)
		}
		s.RunMedian, s.RunWorst = spreadOf(runMed), spreadOf(runWorst)
		s.Fenced, s.Map, s.Replayed = spreadOf(fenced), spreadOf(mapped), spreadOf(replayed)
		s.SteadyP50, s.SteadyP99, s.AfterP50, s.AfterP99 = spreadOf(p50), spreadOf(p99), spreadOf(ap50), spreadOf(ap99)
		out = append(out, s)
	}
	return out
}

func nearestRank(v []float64, q float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	i := int(math.Ceil(q*float64(len(s)))) - 1
	return s[min(max(i, 0), len(s)-1)]
}

// Find is mode's summary.
func (rep Report) Find(mode string) (ModeSummary, bool) {
	for _, s := range rep.Summary {
		if s.Mode == mode {
			return s, true
		}
	}
	return ModeSummary{}, false
}

// ReadJSON loads a failover.json written by Write.
func ReadJSON(path string) (Report, error) {
	var rep Report
	b, err := os.ReadFile(path)
	if err != nil {
		return rep, err
	}
	err = json.Unmarshal(b, &rep)
	return rep, err
}

// Write writes failover.json, failover.md and failover.png into dir.
func Write(dir string, rep Report) error {
	if err := report.Write(dir, Name, rep, Markdown(rep)); err != nil {
		return err
	}
	return plotPNG(filepath.Join(dir, Name+".png"), rep)
}

func verdict(met bool) string {
	if met {
		return "met"
	}
	return "missed"
}

func secs(msv float64) string { return fmt.Sprintf("%.2f s", msv/1000) }

// Verdict is one goal, judged.
type Verdict struct {
	Goal     string
	Met      bool
	Judged   bool
	Measured string
}

// Verdicts judges the goals on the default mode (Bucket).
func Verdicts(rep Report) []Verdict {
	b, ok := rep.Find(contract.DurabilityBucket)
	med := Verdict{Goal: fmt.Sprintf("the time from the kill of a store to the first successful write to each of its regions ≤ %v median", GoalFailoverMedian)}
	worst := Verdict{Goal: fmt.Sprintf("… and ≤ %v worst", GoalFailoverWorst)}
	lost := Verdict{Goal: "0 acknowledged writes lost in the default mode (Bucket)"}
	if !ok || b.FailedOver == 0 {
		for _, v := range []*Verdict{&med, &worst, &lost} {
			v.Measured = "not judged: the Bucket mode was not run"
		}
		return []Verdict{med, worst, lost}
	}
	back := b.FailedOver - b.NeverBack
	med.Judged, med.Met = true, b.NeverBack == 0 && b.FailoverMedianMs <= ms(GoalFailoverMedian)
	med.Measured = fmt.Sprintf("%s over the %d regions of %d runs (per-run medians %s–%s)", secs(b.FailoverMedianMs), back, b.Runs, secs(b.RunMedian.Min), secs(b.RunMedian.Max))
	worst.Judged, worst.Met = true, b.NeverBack == 0 && b.FailoverWorstMs <= ms(GoalFailoverWorst)
	worst.Measured = fmt.Sprintf("%s (p90 %s; per-run worst %s–%s)", secs(b.FailoverWorstMs), secs(b.FailoverP90Ms), secs(b.RunWorst.Min), secs(b.RunWorst.Max))
	if b.NeverBack > 0 {
		worst.Measured += fmt.Sprintf("; %d of %d regions took no write before the writes stopped", b.NeverBack, b.FailedOver)
		med.Measured += fmt.Sprintf("; %d regions never came back", b.NeverBack)
	}
	lost.Judged, lost.Met = true, b.Lost == GoalLostBucket
	lost.Measured = fmt.Sprintf("%d lost of %d acknowledged (per run: %s)", b.Lost, b.Acked, ints(b.LostPerRun))
	return []Verdict{med, worst, lost}
}

func ints(v []int) string {
	var s []string
	for _, x := range v {
		s = append(s, fmt.Sprint(x))
	}
	return strings.Join(s, ", ")
}

func spreadMs(s Spread, unit string) string {
	if unit == "s" {
		return fmt.Sprintf("%.2f s (%.2f–%.2f)", s.Median/1000, s.Min/1000, s.Max/1000)
	}
	return fmt.Sprintf("%.1f ms (%.1f–%.1f)", s.Median, s.Min, s.Max)
}

// Markdown is failover.md.
func Markdown(rep Report) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# Failover: a store lost with its volume\n\n")
	b.WriteString(report.Header(rep.Command, rep.Provenance))
	fmt.Fprintf(&b, "Goals, stated before the run as issue #51 states them (judged on the default mode, Bucket):\n\n")
	for _, v := range Verdicts(rep) {
		state := "**not judged**"
		if v.Judged {
			state = "**" + verdict(v.Met) + "**"
		}
		fmt.Fprintf(&b, "- %s: %s, %s;\n", v.Goal, state, v.Measured)
	}
	writeRPOGoals(&b, rep)
	writeRegime(&b, rep.Settings)
	writeModes(&b, rep)
	writeRuns(&b, rep)
	fmt.Fprintf(&b, "\nRegions are named by their number (`region-N`).\n\n")
	fmt.Fprintf(&b, "![write latency and acknowledged writes around the kill](%s.png)\n\n", Name)
	fmt.Fprintf(&b, "The picture, by %s bins around the kill at 0: above, each run's slowest write (thin) and the median write "+
		"(thick: the median over the runs of each bin's median) by the write's start; a write started into one of the lost store's "+
		"regions just before or after the kill waits out the failover, and its writer starts no other meanwhile. Below, the writes "+
		"acknowledged per second in the killed store's regions (each run) and in the other regions (the runs' median): "+
		"the gap is the failover.\n", BinWidth)
	if len(rep.Findings) > 0 {
		fmt.Fprintf(&b, "\n## Findings\n\n")
		for _, f := range rep.Findings {
			fmt.Fprintf(&b, "- %s\n", f)
		}
	}
	return b.String()
}

// writeRPOGoals writes the goals the issue reports without a bound: the
// modes' write latency and RPO.
func writeRPOGoals(b *strings.Builder, rep Report) {
	st := rep.Settings
	bk, okB := rep.Find(contract.DurabilityBucket)
	lc, okL := rep.Find(contract.DurabilityLocal)
	fmt.Fprintf(b, "- write p50 and p99 of the default mode against the local-fsync mode (Local): reported, no bound")
	if okB && okL {
		fmt.Fprintf(b, ": p50 %.1f ms against %.1f ms (%.1f×), p99 %.1f ms against %.1f ms (%.1f×), medians of the runs",
			bk.SteadyP50.Median, lc.SteadyP50.Median, ratio(bk.SteadyP50.Median, lc.SteadyP50.Median),
			bk.SteadyP99.Median, lc.SteadyP99.Median, ratio(bk.SteadyP99.Median, lc.SteadyP99.Median))
	}
	fmt.Fprintf(b, ";\n- the RPO of each mode: reported; Bucket's stated RPO is 0, Local's the archive interval (%s)", st.ArchiveInterval)
	var rpo []string
	for _, s := range rep.Summary {
		r := fmt.Sprintf("%s %d acknowledged writes lost in %d of %d runs", s.Mode, s.Lost, s.LostRuns, s.Runs)
		if s.Lost > 0 {
			r += fmt.Sprintf(" (the oldest acknowledged %s before the kill)", secs(s.LostOldestMs))
		}
		rpo = append(rpo, r)
	}
	if len(rpo) > 0 {
		fmt.Fprintf(b, ": %s", strings.Join(rpo, "; "))
	}
	fmt.Fprintf(b, ".\n\n")

}

// writeRegime says how the runs were made.
func writeRegime(b *strings.Builder, st Settings) {
	fmt.Fprintf(b, "Regime: %d `bellows store` processes (`--region-owner=i/%d --peers=...`), `--regions=%d` cut by first byte, "+
		"`--split-bytes=0 --merge-bytes=0`, `--balance-interval=%s`, `--wal-archive-interval=%s`, offload disabled, liveness at its defaults "+
		"(renewal every 750 ms, term 3 s, max clock offset 250 ms, failover check every 250 ms); "+
		"one fresh file bucket per run behind a cost model of %s per read + %.0f MB/s and %s per write (+ the same bandwidth): ",
		st.Stores, st.Stores, st.Regions, st.BalanceInterval, st.ArchiveInterval, fmtMs(st.ReadLatencyMs), st.BandwidthMBps, fmtMs(st.WriteLatencyMs))
	fmt.Fprintf(b, "an object store of the low-latency class in the stores' own availability zone: S3 Express One Zone answers in "+
		"about 5 ms, and a PUT is modelled at twice a GET; S3 Standard and GCS (15–40 ms p50, docs/failover.md §1) would cost 2–4× more per request "+
		"and are not modelled here. Every GET (ranged reads, whole objects: manifests, the WAL stream's parts a takeover replays) and every PUT "+
		"(a group commit's part, liveness renewals, manifests, map epochs) pays; listings, existence checks and deletes do not. ")
	fmt.Fprintf(b, "A Go client (package `client`, default options: retry backoff from 20 ms to 1 s) writes %d writes/s in all from %d goroutines per region "+
		"(%d B values, a new key per write, each goroutine paced and never catching up in a burst), records every acknowledged write and each write's latency; "+
		"after %.0f s of warm-up and %.0f s of steady writes (the latency window) one store is SIGKILLed and its WAL directory deleted "+
		"(its node and volume lost), the writes go on for %.0f s, then every acknowledged write is read back through the client. "+
		"Round i kills store i mod %d in both modes; the modes' runs are interleaved (%s), %d each.\n\n",
		st.Rate, st.WritersPerRegion, st.ValueBytes, st.WarmupS, st.SteadyS, st.AfterS, st.Stores, strings.Join(st.Modes, ", "), st.Runs)
	fmt.Fprintf(b, "A region's failover time is from the SIGKILL to the first write in that region acknowledged after the killed process exited; "+
		"*open* is from the SIGKILL to the new owner's log line `took over region from a dead store`, the rest is the client's retry backoff and table refresh.\n\n")

}

// writeModes is the table of each mode's figures over its runs.
func writeModes(b *strings.Builder, rep Report) {
	st := rep.Settings
	fmt.Fprintf(b, "## Per mode\n\n")
	fmt.Fprintf(b, "| | ")
	for _, s := range rep.Summary {
		fmt.Fprintf(b, "%s | ", s.Mode)
	}
	fmt.Fprintf(b, "\n|---|")
	for range rep.Summary {
		fmt.Fprintf(b, "---|")
	}
	fmt.Fprintf(b, "\n")
	row := func(name string, f func(ModeSummary) string) {
		fmt.Fprintf(b, "| %s | ", name)
		for _, s := range rep.Summary {
			fmt.Fprintf(b, "%s | ", f(s))
		}
		fmt.Fprintf(b, "\n")
	}
	row("regions failed over (runs)", func(s ModeSummary) string {
		r := fmt.Sprintf("%d (%d)", s.FailedOver, s.Runs)
		if s.NeverBack > 0 {
			r += fmt.Sprintf(", **%d never written again**", s.NeverBack)
		}
		return r
	})
	row("failover: median, p90, worst", func(s ModeSummary) string {
		return fmt.Sprintf("%s, %s, %s", secs(s.FailoverMedianMs), secs(s.FailoverP90Ms), secs(s.FailoverWorstMs))
	})
	row("each run's median failover: median (range)", func(s ModeSummary) string { return spreadMs(s.RunMedian, "s") })
	row("each run's worst failover: median (range)", func(s ModeSummary) string { return spreadMs(s.RunWorst, "s") })
	row("kill → lease fenced: median (range)", func(s ModeSummary) string { return spreadMs(s.Fenced, "s") })
	row("kill → map epoch moving its regions", func(s ModeSummary) string { return spreadMs(s.Map, "s") })
	row("kill → region open on its new owner: median, worst", func(s ModeSummary) string {
		if s.OpenMedianMs < 0 {
			return "not logged"
		}
		return fmt.Sprintf("%s, %s", secs(s.OpenMedianMs), secs(s.OpenWorstMs))
	})
	row("WAL records replayed per region: median (range)", func(s ModeSummary) string {
		return fmt.Sprintf("%.0f (%.0f–%.0f)", s.Replayed.Median, s.Replayed.Min, s.Replayed.Max)
	})
	row("write p50 before the kill: median of runs (range)", func(s ModeSummary) string { return spreadMs(s.SteadyP50, "ms") })
	row("write p99 before the kill", func(s ModeSummary) string { return spreadMs(s.SteadyP99, "ms") })
	row("write p50 after the failover (2 stores)", func(s ModeSummary) string { return spreadMs(s.AfterP50, "ms") })
	row("write p99 after the failover", func(s ModeSummary) string { return spreadMs(s.AfterP99, "ms") })
	row("writes acknowledged, failed", func(s ModeSummary) string { return fmt.Sprintf("%d, %d", s.Acked, s.Failed) })
	row("acknowledged writes lost (per run)", func(s ModeSummary) string { return fmt.Sprintf("%d (%s)", s.Lost, ints(s.LostPerRun)) })
	row("oldest lost write, before the kill", func(s ModeSummary) string {
		if s.Lost == 0 {
			return "—"
		}
		return secs(s.LostOldestMs)
	})
	fmt.Fprintf(b, "\nThe latency window is the %.0f s before the kill; *after the failover* is from one second after the last region's first write to the end.\n\n", st.SteadyS)

}

// writeRuns is the table of every run.
func writeRuns(b *strings.Builder, rep Report) {
	fmt.Fprintf(b, "## Runs\n\n")
	fmt.Fprintf(b, "| round | mode | killed | fenced, map s | first write per region s (open s) | p50 / p99 ms before | acked | lost (acknowledged before the kill) |\n")
	fmt.Fprintf(b, "|---:|---|---|---|---|---|---:|---|\n")
	for _, r := range rep.Runs {
		var regs []string
		for _, g := range r.Regions {
			fw := "never"
			if g.FirstWriteMs >= 0 {
				fw = fmt.Sprintf("%.2f", g.FirstWriteMs/1000)
			}
			op := "?"
			if g.OpenMs >= 0 {
				op = fmt.Sprintf("%.2f", g.OpenMs/1000)
			}
			regs = append(regs, fmt.Sprintf("%s %s (%s)", strings.TrimPrefix(g.Region, "region-"), fw, op))
		}
		lost := fmt.Sprint(r.Lost)
		if r.Lost > 0 {
			// A write acknowledged while the SIGKILL was being
			// delivered reads as a hair after the kill: 0.00.
			lost += fmt.Sprintf(" (%.2f–%.2f s)", max(r.LostNewestMs, 0)/1000, r.LostOldestMs/1000)
		}
		fmt.Fprintf(b, "| %d | %s | store-%d | %.2f, %.2f | %s | %.1f / %.1f | %d | %s |\n", r.Round, r.Mode, r.Victim,
			r.FencedMs/1000, r.MapMs/1000, strings.Join(regs, "; "), r.Steady.P50, r.Steady.P99, r.Acked, lost)
	}
}

func fmtMs(v float64) string { return (time.Duration(v * float64(time.Millisecond))).String() }

func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

var modeColors = []color.Color{color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff}, color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff}}

// plotPNG draws two panels per mode, by time from the kill: write latency
// by start time (each run's slowest write per bin, thin; the median over
// the runs of each bin's median write, thick; log scale), and writes
// acknowledged per second by end time in the killed store's regions (each
// run, thin) and in the others (the runs' median, gray).
func plotPNG(path string, rep Report) error {
	var top, bottom []*plot.Plot
	for mi, s := range rep.Summary {
		col := modeColors[mi%len(modeColors)]
		lp, err := latencyPanel(rep, s, col)
		if err != nil {
			return err
		}
		ap, err := acksPanel(rep, s, col)
		if err != nil {
			return err
		}
		top, bottom = append(top, lp), append(bottom, ap)
	}
	if len(top) == 0 {
		return nil
	}
	plots := [][]*plot.Plot{top, bottom}
	const w, h = 15 * vg.Inch, 10 * vg.Inch
	img := vgimg.New(w, h)
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: 2, Cols: len(top), PadTop: vg.Points(8), PadX: vg.Points(18), PadY: vg.Points(18),
		PadLeft: vg.Points(6), PadRight: vg.Points(10), PadBottom: vg.Points(6)}
	canvases := plot.Align(plots, tiles, dc)
	for j := range plots {
		for i := range plots[j] {
			plots[j][i].Draw(canvases[j][i])
		}
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	png := vgimg.PngCanvas{Canvas: img}
	if _, err := png.WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// line adds pts to p as a line of col and width, returning it.
func line(p *plot.Plot, pts plotter.XYs, col color.Color, width float64) (*plotter.Line, error) {
	l, err := plotter.NewLine(pts)
	if err != nil {
		return nil, err
	}
	l.Color, l.Width = col, vg.Points(width)
	p.Add(l)
	return l, nil
}

// medianLine is the median over the runs of each bin's f.
func medianLine(runs []RunResult, mode string, f func(Bin) (float64, bool)) plotter.XYs {
	byX := map[float64][]float64{}
	for _, r := range runs {
		if r.Mode != mode {
			continue
		}
		for _, bn := range r.Timeline {
			if v, ok := f(bn); ok {
				byX[bn.StartS+BinWidth.Seconds()/2] = append(byX[bn.StartS+BinWidth.Seconds()/2], v)
			}
		}
	}
	var xs []float64
	for x := range byX {
		xs = append(xs, x)
	}
	slices.Sort(xs)
	var out plotter.XYs
	for _, x := range xs {
		out = append(out, plotter.XY{X: x, Y: report.Median(byX[x])})
	}
	return out
}

func latencyPanel(rep Report, s ModeSummary, col color.Color) (*plot.Plot, error) {
	p := plot.New()
	p.X.Min, p.X.Max = -rep.Settings.SteadyS, rep.Settings.AfterS
	p.Title.Text = fmt.Sprintf("%s: write latency by start time (%d runs)", s.Mode, s.Runs)
	p.X.Label.Text = "seconds from the SIGKILL"
	p.Y.Label.Text = "ms (log scale)"
	p.Y.Scale = plot.LogScale{}
	p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	p.Legend.Top = true
	p.Add(plotter.NewGrid())
	lo, hi := math.Inf(1), 0.0
	var thin *plotter.Line
	for _, r := range rep.Runs {
		if r.Mode != s.Mode {
			continue
		}
		var pts plotter.XYs
		for _, bn := range r.Timeline {
			if bn.Count > 0 && bn.Max > 0 {
				pts = append(pts, plotter.XY{X: bn.StartS + BinWidth.Seconds()/2, Y: bn.Max})
				lo, hi = min(lo, bn.P50), max(hi, bn.Max)
			}
		}
		if len(pts) > 0 {
			l, err := line(p, pts, col, 0.6)
			if err != nil {
				return nil, err
			}
			thin = l
		}
	}
	if med := medianLine(rep.Runs, s.Mode, func(b Bin) (float64, bool) { return b.P50, b.Count > 0 && b.P50 > 0 }); len(med) > 0 {
		l, err := line(p, med, color.Black, 2)
		if err != nil {
			return nil, err
		}
		p.Legend.Add("median write", l)
		p.Legend.Add("slowest write, per run", thin)
	}
	if hi <= 0 {
		p.Y.Min, p.Y.Max = 1, 1000 // a log scale needs a positive range
		return p, nil
	}
	p.Y.Min, p.Y.Max = max(lo/2, 0.1), hi*2
	kill, err := line(p, plotter.XYs{{X: 0, Y: p.Y.Min}, {X: 0, Y: p.Y.Max}}, color.Gray{Y: 0x80}, 1)
	if err != nil {
		return nil, err
	}
	kill.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
	return p, nil
}

func acksPanel(rep Report, s ModeSummary, col color.Color) (*plot.Plot, error) {
	p := plot.New()
	p.X.Min, p.X.Max = -rep.Settings.SteadyS, rep.Settings.AfterS
	p.Title.Text = fmt.Sprintf("%s: writes acknowledged per second, by region", s.Mode)
	p.X.Label.Text = "seconds from the SIGKILL"
	p.Y.Label.Text = "writes/s"
	p.Y.Min = 0
	p.Legend.Top = true
	p.Add(plotter.NewGrid())
	perS := 1 / BinWidth.Seconds()
	hi := 0.0
	var thin *plotter.Line
	for _, r := range rep.Runs {
		if r.Mode != s.Mode {
			continue
		}
		var pts plotter.XYs
		// The first and last bins are cut by the window's ends.
		for _, bn := range trimEnds(r.Timeline) {
			pts = append(pts, plotter.XY{X: bn.StartS + BinWidth.Seconds()/2, Y: float64(bn.AckedHeld) * perS})
			hi = max(hi, float64(bn.AckedHeld)*perS, float64(bn.AckedOther)*perS)
		}
		if len(pts) > 0 {
			l, err := line(p, pts, col, 0.6)
			if err != nil {
				return nil, err
			}
			thin = l
		}
	}
	var trimmed []RunResult
	for _, r := range rep.Runs {
		r.Timeline = trimEnds(r.Timeline)
		trimmed = append(trimmed, r)
	}
	if other := medianLine(trimmed, s.Mode, func(b Bin) (float64, bool) { return float64(b.AckedOther) * perS, true }); len(other) > 0 {
		l, err := line(p, other, color.Gray{Y: 0x60}, 1.5)
		if err != nil {
			return nil, err
		}
		p.Legend.Add("the other regions (median of the runs)", l)
		p.Legend.Add("the killed store's regions, per run", thin)
	}
	p.Y.Max = max(hi*1.3, 1)
	p.Y.Tick.Marker = wholeTicks{}
	kill, err := line(p, plotter.XYs{{X: 0, Y: 0}, {X: 0, Y: p.Y.Max}}, color.Gray{Y: 0x80}, 1)
	if err != nil {
		return nil, err
	}
	kill.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
	return p, nil
}

// trimEnds is bins without the first and the last.
func trimEnds(bins []Bin) []Bin {
	if len(bins) < 3 {
		return nil
	}
	return bins[1 : len(bins)-1]
}

// wholeTicks are gonum's default ticks labelled without decimals.
type wholeTicks struct{}

func (wholeTicks) Ticks(lo, hi float64) []plot.Tick {
	ts := plot.DefaultTicks{}.Ticks(lo, hi)
	for i := range ts {
		if ts[i].Label != "" {
			ts[i].Label = fmt.Sprintf("%.0f", ts[i].Value)
		}
	}
	return ts
}
