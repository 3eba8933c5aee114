package phases

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
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
	if got := pct(3, 1); got != 200 {
		t.Fatalf("pct(3,1) = %v, want +200%%", got)
	}
	ts, gets, _ := r.series()
	if len(ts) != 11 || gets[0] != 1 || gets[10] != 3 {
		t.Fatalf("series %v %v", ts, gets)
	}
}

func TestMarkdownIsFigure7Shaped(t *testing.T) {
	cfg := Default()
	rep := Report{Config: cfg, Modes: []ModeResult{{Mode: "ThrottledIncremental", Baseline: Baseline{GetMeanMs: 0.1},
		Compaction: Phase{GetDegradationPct: 4, DurationS: 3}, Warmup: Phase{GetDegradationPct: -2, DurationS: 5}}}}
	md := Markdown(rep)
	for _, want := range []string{"| ThrottledIncremental | 0.100 |", "+4%", "-2%", "compaction: get Δ", "warmup s"} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q:\n%s", want, md)
		}
	}
	if err := (Config{Modes: []string{"Sideways"}, Keys: 1, ValueSize: 1, Files: 1, Readers: 1, ReadsPerSec: 1, WarmupRate: 1, Window: 1, Baseline: 1}).validate(); err == nil {
		t.Fatal("an unknown mode was accepted")
	}
}

func TestStoreTargetReadsWarmupStateFromMetrics(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprint(w, `# TYPE bellows_warmup_switched_timestamp_seconds gauge
bellows_warmup_switched_timestamp_seconds{region="region-000"} 1.7e9
bellows_warmup_switched_timestamp_seconds{region="region-001"} 5
# TYPE bellows_region_cached_ratio gauge
bellows_region_cached_ratio{region="region-000"} 0.25
# TYPE bellows_warmup_bytes_total counter
bellows_warmup_bytes_total{source="bucket"} 7
bellows_warmup_bytes_total{source="compactor"} 11
`)
	}))
	defer srv.Close()
	tg, err := newGRPCTarget("127.0.0.1:1", strings.TrimPrefix(srv.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer tg.Close()
	if sw, err := tg.Switched(); err != nil || !sw.Equal(time.Unix(1_700_000_000, 0)) {
		t.Fatalf("Switched = %v, %v", sw, err)
	}
	if f, err := tg.CachedFraction(); err != nil || f != 0.25 {
		t.Fatalf("CachedFraction = %v, %v", f, err)
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
		return ModeResult{Mode: "Incremental", Baseline: Baseline{GetMeanMs: get}, Compaction: Phase{GetDegradationPct: get}, Warmup: Phase{DurationS: get}}
	}
	m := medianOf([]ModeResult{run(9), run(1), run(4)})
	if m.Baseline.GetMeanMs != 4 || m.Compaction.GetDegradationPct != 4 || m.Warmup.DurationS != 4 || len(m.Runs) != 3 {
		t.Fatalf("median of 9,1,4: %+v", m)
	}
	cfg := Default()
	cfg.Repeats = 3
	md := Markdown(Report{Config: cfg, Modes: []ModeResult{m}})
	if !strings.Contains(md, "median of 3 runs") || !strings.Contains(md, "+9%, +1%, +4%") {
		t.Fatalf("markdown does not show the runs:\n%s", md)
	}
}
