package phases

import (
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
