package phases

import (
	"encoding/json"
	"fmt"
	"image/color"
	"os"
	"path/filepath"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"

	"github.com/bellows-kv/bellows/bench/report"
)

// ReadJSON loads a phases.json written by Write.
func ReadJSON(path string) (Report, error) {
	var rep Report
	b, err := os.ReadFile(path)
	if err != nil {
		return rep, err
	}
	err = json.Unmarshal(b, &rep)
	return rep, err
}

// Name is the default name of a report: phases.json, phases.md and
// phases.png.
const Name = "phases"

// Write writes phases.json, phases.md and phases.png into dir.
func Write(dir string, rep Report) error { return WriteNamed(dir, Name, rep) }

// WriteNamed writes name.json, name.md and name.png into dir.
func WriteNamed(dir, name string, rep Report) error {
	if err := report.Write(dir, name, rep, Markdown(rep)); err != nil {
		return err
	}
	return plotPNG(filepath.Join(dir, name+".png"), rep)
}

// Markdown is the table of the paper's Figure 7: per mode, the change of
// mean and p99 get and scan latency against the pre-compaction baseline in
// each phase, and each phase's length. An empty phase is n/a.
func Markdown(rep Report) string {
	c := rep.Config
	var b strings.Builder
	b.WriteString("# Compaction and warmup phases (paper Figure 7)\n\n")
	command := c.Command
	if command == "" {
		command = "bellows-bench phases"
	}
	b.WriteString(report.Header(command, c.Provenance))
	if c.Goal != "" {
		fmt.Fprintf(&b, "**Goal (stated before the run):** %s\n\n", c.Goal)
	}
	data := c.DataBytes
	if data == 0 {
		data = int64(c.Keys) * int64(c.ValueSize)
	}
	regime := "the cache holds the data but not the old and the new files together (old + new ≈ 2 × data > cache ≥ data), " +
		"the paper's regime (Figure 7: 4 GB of data in a 6 GB cache)"
	switch {
	case c.CacheBytes >= 2*data:
		regime = "the cache holds the old and the new files together: nothing is evicted, outside the paper's regime"
	case c.CacheBytes < data:
		regime = "the cache does not hold the data: the baseline misses, outside the paper's regime"
	}
	link := c.WorkerLinkModel
	if link == "" {
		link = linkModel(time.Duration(c.LinkLatency), c.TransferRate)
	}
	fmt.Fprintf(&b, "**Regime:** %s of data (%d keys × %d B) in %d files (blocks of %d KiB), block cache %s (%.2f × data): %s.\n\n",
		mib(data), c.Keys, c.ValueSize, c.Files, c.BlockSize>>10, mib(c.CacheBytes), float64(c.CacheBytes)/float64(max(data, 1)), regime)
	fmt.Fprintf(&b, "**Cost models:** bucket reads cost %s (the bucket's read model); the worker link (compactor to store) costs %s "+
		"(compactor --link-latency and --transfer-rate), so a fetch from a worker is not free. Throttled warmup at %.1f MB/s.\n\n",
		c.BucketModel, link, float64(c.WarmupRate)/1e6)
	fmt.Fprintf(&b, "%d readers issuing %d reads/s (%.0f%% scans of %d keys, %.0f%% gets, Zipf θ=%.2f) and %d updates/s during the run. "+
		"A major compaction starts after a %v baseline. Store: %s. CPU pinning: %s.\n\n",
		c.Readers, c.ReadsPerSec, c.ScanFraction*100, c.ScanLength, (1-c.ScanFraction)*100, c.Theta,
		c.UpdatesPerSec, durationString(c.Baseline), storeString(c.Store), c.Pinning)
	if len(c.StoreFlags) > 0 {
		fmt.Fprintf(&b, "Store settings beyond engine.yaml: `%s`.\n\n", strings.Join(c.StoreFlags, " "))
	}
	b.WriteString("Every setting the run used is the JSON's `config`; `--from-json` renders this report again from it.\n\n")
	b.WriteString("| mode | baseline get ms (mean / p99) | baseline scan ms (mean / p99) | compaction: get Δ | get p99 Δ | scan Δ | scan p99 Δ | compaction s | warmup: get Δ | get p99 Δ | scan Δ | scan p99 Δ | warmup s |\n")
	b.WriteString("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, m := range rep.Modes {
		fmt.Fprintf(&b, "| %s | %.3f / %.3f | %.3f / %.3f | %s | %s | %s | %s | %.1f | %s | %s | %s | %s | %.1f |\n",
			m.Mode, m.Baseline.GetMeanMs, m.Baseline.GetP99Ms, m.Baseline.ScanMeanMs, m.Baseline.ScanP99Ms,
			pctString(m.Compaction.GetDegradationPct), pctString(m.Compaction.GetP99DegradationPct),
			pctString(m.Compaction.ScanDegradationPct), pctString(m.Compaction.ScanP99DegradationPct), m.Compaction.DurationS,
			pctString(m.Warmup.GetDegradationPct), pctString(m.Warmup.GetP99DegradationPct),
			pctString(m.Warmup.ScanDegradationPct), pctString(m.Warmup.ScanP99DegradationPct), m.Warmup.DurationS)
	}
	if c.Repeats > 1 {
		fmt.Fprintf(&b, "\nEach figure is the median of %d runs per mode (modes interleaved%s; an n/a run is left out). Every run's Δ, compaction / warmup:\n\n", c.Repeats, orderString(c))
		b.WriteString("| mode | runs: compaction get Δ | runs: warmup get Δ | runs: compaction get p99 Δ | runs: warmup get p99 Δ | runs: compaction scan Δ | runs: warmup scan Δ | runs: compaction scan p99 Δ | runs: warmup scan p99 Δ |\n|---|---|---|---|---|---|---|---|---|\n")
		for _, m := range rep.Modes {
			col := func(f func(RunResult) *float64) string {
				var parts []string
				for _, r := range m.Runs {
					parts = append(parts, pctString(f(r)))
				}
				return strings.Join(parts, ", ")
			}
			fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", m.Mode,
				col(func(r RunResult) *float64 { return r.Compaction.GetDegradationPct }), col(func(r RunResult) *float64 { return r.Warmup.GetDegradationPct }),
				col(func(r RunResult) *float64 { return r.Compaction.GetP99DegradationPct }), col(func(r RunResult) *float64 { return r.Warmup.GetP99DegradationPct }),
				col(func(r RunResult) *float64 { return r.Compaction.ScanDegradationPct }), col(func(r RunResult) *float64 { return r.Warmup.ScanDegradationPct }),
				col(func(r RunResult) *float64 { return r.Compaction.ScanP99DegradationPct }), col(func(r RunResult) *float64 { return r.Warmup.ScanP99DegradationPct }))
		}
	}
	b.WriteString(markdownResolution(rep))
	b.WriteString("\nΔ is the change of mean (or p99) latency against the baseline's. The compaction phase runs from the compaction's start to the switch to the new file; " +
		"the warmup phase from the switch until the incremental warmup finished or, for None, WriteThrough, Offload and RemoteCache, until 95% of the new file's blocks were cached. " +
		"PreSwitch fetches the new file before it switches, so its warmup phase is empty by construction and its cost (fetching, and evicting the old file's blocks) is in its compaction phase. " +
		"n/a: the phase is empty (no operation of that kind began in it).\n")
	return b.String()
}

// pctString is a degradation as the table shows it: n/a for an empty phase.
func pctString(p *float64) string {
	if p == nil {
		return "n/a"
	}
	return fmt.Sprintf("%+.0f%%", *p)
}

func mib(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }

func durationString(d Duration) string { b, _ := d.MarshalJSON(); return strings.Trim(string(b), `"`) }

var palette = []color.RGBA{
	{0xd6, 0x27, 0x28, 0xff}, {0xff, 0x7f, 0x0e, 0xff}, {0x94, 0x67, 0xbd, 0xff},
	{0x8c, 0x56, 0x4b, 0xff}, {0x1f, 0x77, 0xb4, 0xff}, {0x2c, 0xa0, 0x2c, 0xff},
}

// plotPNG draws mean get latency over time since each mode's compaction
// started, one line per mode; each mode's compaction and warmup phases are
// shaded as bands under the lines (light: compaction, dark: warmup).
func plotPNG(path string, rep Report) error {
	p := plot.New()
	p.Title.Text = "Get latency through compaction and warmup (bands: light = compaction phase, dark = warmup phase)"
	p.X.Label.Text = "seconds since the major compaction started"
	p.Y.Label.Text = "mean get latency (ms, log scale)"
	p.Y.Scale = plot.LogScale{}
	p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	p.Legend.Top = true
	lo, hi := 1e9, 0.0
	for _, m := range rep.Modes {
		for _, v := range m.Series.GetMs {
			if v > 0 {
				lo, hi = min(lo, v), max(hi, v)
			}
		}
	}
	if hi == 0 {
		lo, hi = 0.001, 1
	}
	for i, m := range rep.Modes {
		col := palette[i%len(palette)]
		pts := plotter.XYs{}
		for j, t := range m.Series.TimeS {
			if v := m.Series.GetMs[j]; v > 0 {
				pts = append(pts, plotter.XY{X: t - m.CompactionAtS, Y: v})
			}
		}
		line, err := plotter.NewLine(pts)
		if err != nil {
			return err
		}
		line.Color = col
		line.Width = vg.Points(1.2)
		p.Add(line)
		p.Legend.Add(m.Mode, line)
		// Phase bands: a strip per mode below the lowest latency.
		y1 := lo / 1.6 / pow(1.45, float64(i))
		y0 := y1 / 1.3
		for k, span := range [][2]float64{{0, m.SwitchAtS - m.CompactionAtS}, {m.SwitchAtS - m.CompactionAtS, m.WarmupEndAtS - m.CompactionAtS}} {
			if span[1] <= span[0] {
				continue
			}
			fill := col
			if k == 0 { // compaction phase: lighter
				fill = color.RGBA{R: uint8((int(col.R) + 2*255) / 3), G: uint8((int(col.G) + 2*255) / 3), B: uint8((int(col.B) + 2*255) / 3), A: 0xff}
			}
			poly, err := plotter.NewPolygon(plotter.XYs{{X: span[0], Y: y0}, {X: span[1], Y: y0}, {X: span[1], Y: y1}, {X: span[0], Y: y1}})
			if err != nil {
				return err
			}
			poly.Color, poly.LineStyle.Width = fill, 0
			p.Add(poly)
		}
	}
	p.Y.Min = lo / 1.6 / pow(1.45, float64(len(rep.Modes))) / 1.1
	p.Y.Max = hi * 1.5
	return p.Save(10*vg.Inch, 5*vg.Inch, path)
}

func pow(b, e float64) float64 {
	r := 1.0
	for i := 0; i < int(e); i++ {
		r *= b
	}
	return r
}

func storeString(s string) string {
	if s == "" {
		return "in-process region, no RPC" // runs before the store process existed
	}
	return s
}

// orderString says in what order a repetition ran the modes.
func orderString(c Config) string {
	order := ", in the listed order"
	if c.ShuffleModes {
		order = ", each repetition in an order of its own drawn from the seed (the JSON's `order`)"
	}
	if c.WritebackBeforeBaseline {
		order += ", every run writing the page cache back before its baseline"
	}
	return order
}
