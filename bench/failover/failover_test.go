package failover

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bellows-kv/bellows/bench/report"
	"github.com/bellows-kv/bellows/internal/contract"
	"github.com/bellows-kv/bellows/storage-engine/server"
)

// A writer's keys fall in the region --regions cuts for them, and a value
// is the same for its key every time and differs between keys.
func TestRegionKeysFallInTheirRegion(t *testing.T) {
	for _, n := range []int{3, 12, 16, 128} {
		spans, err := server.SplitEvenly(n)
		if err != nil {
			t.Fatal(err)
		}
		for r := range n {
			k := RegionKey(r, n, 7, 42)
			sp := spans[r]
			if bytes.Compare(k, sp.Start) < 0 || (len(sp.End) > 0 && bytes.Compare(k, sp.End) >= 0) {
				t.Fatalf("%d regions: key %q of region %d is outside [%q, %q)", n, k, r, sp.Start, sp.End)
			}
		}
	}
	a, b := RegionKey(1, 12, 0, 1), RegionKey(1, 12, 0, 2)
	if !bytes.Equal(valueOf(a, 64), valueOf(a, 64)) || bytes.Equal(valueOf(a, 64), valueOf(b, 64)) || len(valueOf(a, 64)) != 64 {
		t.Fatal("valueOf is not a function of the key, or not its size")
	}
}

func TestTimelineBinsByStartAroundTheKill(t *testing.T) {
	killed := 10 * time.Second
	all := []write{
		{start: 4 * time.Second, end: 4*time.Second + time.Millisecond, ok: true},                                   // warm-up: left out
		{start: killed - 100*time.Millisecond, end: killed - 90*time.Millisecond, ok: true, region: "region-001"},   // bin -1
		{start: killed + 10*time.Millisecond, end: killed + 3*time.Second, ok: true, region: "region-000"},          // bin 0, acked in 12
		{start: killed + 20*time.Millisecond, end: killed + 30*time.Millisecond, ok: true, region: "region-001"},    // bin 0
		{start: killed + 300*time.Millisecond, end: killed + 310*time.Millisecond, ok: false, region: "region-001"}, // bin 1, not acked
		{start: killed + BinWidth*4 + time.Millisecond, end: killed + BinWidth*4 + 2*time.Millisecond},              // bin 4
	}
	bins := timeline(all, killed, 5*time.Second, []string{"region-000"})
	byStart := map[float64]Bin{}
	for _, b := range bins {
		byStart[b.StartS] = b
	}
	if len(bins) != 5 {
		t.Fatalf("bins %+v", bins)
	}
	if b := byStart[0]; b.Count != 2 || b.Max < 2990 || b.AckedOther != 1 || b.AckedHeld != 0 {
		t.Fatalf("bin 0: %+v", b)
	}
	if b := byStart[-BinWidth.Seconds()]; b.Count != 1 || b.AckedOther != 1 {
		t.Fatalf("bin -1: %+v", b)
	}
	if b := byStart[3]; b.Count != 0 || b.AckedHeld != 1 {
		t.Fatalf("bin 12: %+v", b)
	}
	if b := byStart[1]; b.Count != 1 || b.AckedHeld+b.AckedOther != 0 {
		t.Fatalf("bin 4: %+v", b)
	}
}

// sample is two rounds of both modes: Bucket loses nothing and fails over
// within the goals; Local loses writes.
func sample() Report {
	cfg := Default()
	cfg.Runs = 2
	runs := []RunResult{
		{Round: 0, Mode: contract.DurabilityBucket, Victim: 0, FencedMs: 3100, MapMs: 3150, Acked: 1000,
			Regions: []RegionFailover{{Region: "region-0", FirstWriteMs: 3500, OpenMs: 3300, Replayed: 10}, {Region: "region-3", FirstWriteMs: 4100, OpenMs: 3400}},
			Steady:  Latency{Count: 500, P50: 14, P99: 30}, After: &Latency{Count: 400, P50: 15, P99: 35},
			Timeline: []Bin{{StartS: -0.25, Count: 10, P50: 14, Max: 20}, {StartS: 0, Count: 10, P50: 15, Max: 4000}, {StartS: 0.25, Count: 10, P50: 14, Max: 3800}}},
		{Round: 0, Mode: contract.DurabilityLocal, Victim: 0, FencedMs: 3000, MapMs: 3050, Acked: 1200, Lost: 20, LostOldestMs: 4200, LostNewestMs: 10,
			Regions: []RegionFailover{{Region: "region-0", FirstWriteMs: 3600, OpenMs: 3200}, {Region: "region-3", FirstWriteMs: 3900, OpenMs: 3300}},
			Steady:  Latency{Count: 600, P50: 2, P99: 9}},
		{Round: 1, Mode: contract.DurabilityBucket, Victim: 1, FencedMs: 3200, MapMs: 3250, Acked: 1000,
			Regions: []RegionFailover{{Region: "region-1", FirstWriteMs: 5200, OpenMs: 3900}, {Region: "region-4", FirstWriteMs: 3700, OpenMs: 3500}},
			Steady:  Latency{Count: 500, P50: 16, P99: 40}},
		{Round: 1, Mode: contract.DurabilityLocal, Victim: 1, FencedMs: 3000, MapMs: 3050, Acked: 1200,
			Regions: []RegionFailover{{Region: "region-1", FirstWriteMs: 3800, OpenMs: 3100}, {Region: "region-4", FirstWriteMs: -1, OpenMs: -1}},
			Steady:  Latency{Count: 600, P50: 3, P99: 11}},
	}
	return Report{Command: "bellows-bench failover", Provenance: report.Provenance{Date: "2026-11-28", Commit: "abc"},
		Settings: SettingsOf(cfg), Summary: Summarize(runs, cfg.Modes), Runs: runs}
}

func TestSummaryAndVerdicts(t *testing.T) {
	rep := sample()
	b, ok := rep.Find(contract.DurabilityBucket)
	if !ok || b.Runs != 2 || b.FailedOver != 4 || b.NeverBack != 0 || b.Lost != 0 {
		t.Fatalf("Bucket summary %+v", b)
	}
	// 3500, 3700, 4100, 5200: the upper middle.
	if b.FailoverMedianMs != 4100 || b.FailoverWorstMs != 5200 || b.FailoverP90Ms != 5200 {
		t.Fatalf("Bucket failover %v %v %v", b.FailoverMedianMs, b.FailoverP90Ms, b.FailoverWorstMs)
	}
	if b.SteadyP50.Median != 16 || b.SteadyP50.Min != 14 || b.AfterP50.Median != 15 {
		t.Fatalf("Bucket latency %+v %+v", b.SteadyP50, b.AfterP50)
	}
	l, _ := rep.Find(contract.DurabilityLocal)
	if l.NeverBack != 1 || l.Lost != 20 || l.LostRuns != 1 || l.LostOldestMs != 4200 {
		t.Fatalf("Local summary %+v", l)
	}
	v := Verdicts(rep)
	if len(v) != 3 || !v[0].Met || !v[1].Met || !v[2].Met {
		t.Fatalf("verdicts %+v", v)
	}
	rep.Runs[2].Regions[0].FirstWriteMs = 11000
	rep.Runs[2].Lost = 1
	rep.Summary = Summarize(rep.Runs, rep.Settings.Modes)
	v = Verdicts(rep)
	if !v[0].Met || v[1].Met || v[2].Met {
		t.Fatalf("verdicts after a slow region and a lost write %+v", v)
	}
}

// The report opens with its command and provenance, then the goals with
// their verdicts before any result; it renders from its JSON alone.
func TestMarkdownStatesTheGoalsFirst(t *testing.T) {
	rep := sample()
	md := Markdown(rep)
	for _, want := range []string{
		"**Command:** `bellows-bench failover`; measured on 2026-11-28 at abc.",
		"≤ 5s median: **met**",
		"≤ 10s worst: **met**",
		"0 acknowledged writes lost in the default mode (Bucket): **met**",
		"p50 16.0 ms against 3.0 ms",
		"Local 20 acknowledged writes lost in 1 of 2 runs",
		"5ms per read + 100 MB/s and 10ms per write",
		"**1 never written again**",
		"| 1 | Local | store-1 |",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("the report lacks %q:\n%s", want, md)
		}
	}
	if g, r := strings.Index(md, "Goals, stated before the run"), strings.Index(md, "## Per mode"); g < 0 || g > r {
		t.Error("the goals do not come before the results")
	}
	dir := t.TempDir()
	if err := Write(dir, rep); err != nil {
		t.Fatal(err)
	}
	back, err := ReadJSON(filepath.Join(dir, Name+".json"))
	if err != nil {
		t.Fatal(err)
	}
	if Markdown(back) != md {
		t.Error("the report does not render the same from its JSON")
	}
	if st, err := os.Stat(filepath.Join(dir, Name+".png")); err != nil || st.Size() == 0 {
		t.Fatalf("no picture: %v", err)
	}
}
