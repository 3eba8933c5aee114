package autoscaler

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"
)

// paper is the example of §6.3: c = 20 MB/s, w = 8 MB/s, m = 6 GB, b = 4 GB,
// T = 1/hour, R = 10 ⇒ C = 2 (decimal units: D = 4000/20 + 4000/8 = 700 s,
// l = 1, h = 3600/700 = 5.14, ⌊h/T⌋ = 5, C = ⌈10/5⌉ = 2).
func paper() Inputs {
	return Inputs{
		CompactionRate: 20e6, TransferRate: 8e6, CacheBytes: 6e9, CompactionSize: 4e9,
		CompactionsPerRegion: 1, Interval: time.Hour, Regions: 10,
	}
}

func TestComputePaperExample(t *testing.T) {
	r, err := Compute(paper())
	if err != nil {
		t.Fatal(err)
	}
	if r.D != 700 || r.L != 1 || math.Abs(r.H-3600.0/700) > 1e-12 || r.RegionsPerWorker == nil || *r.RegionsPerWorker != 5 || r.Workers != 2 || r.Total != 2 {
		t.Fatalf("paper example: got %+v (regionsPerWorker %v), want D=700 l=1 h=5.14 regionsPerWorker=5 workers=2", r, deref(r.RegionsPerWorker))
	}
}

func deref(p *int64) any {
	if p == nil {
		return nil
	}
	return *p
}

func TestComputeTable(t *testing.T) {
	with := func(f func(*Inputs)) Inputs { in := paper(); f(&in); return in }
	tests := []struct {
		name       string
		in         Inputs
		workers    int64 // Total
		rpw        any   // regionsPerWorker (nil = unbounded)
		infeasible string
		inputErr   string
	}{
		{name: "paper example", in: paper(), workers: 2, rpw: int64(5)},
		{name: "twice the regions", in: with(func(i *Inputs) { i.Regions = 20 }), workers: 4, rpw: int64(5)},
		{name: "11 regions round up", in: with(func(i *Inputs) { i.Regions = 11 }), workers: 3, rpw: int64(5)},
		{name: "bigger cache runs two at once", in: with(func(i *Inputs) { i.CacheBytes = 8e9 }), workers: 1, rpw: int64(10)},
		{name: "exact h/T boundary floors to the integer", in: with(func(i *Inputs) {
			// D = 1000/10 + 1000/10 = 200 s, l = 1, h = 3600/200 = 18, T = 6 ⇒ ⌊3⌋ exactly
			i.CompactionRate, i.TransferRate, i.CompactionSize, i.CacheBytes, i.CompactionsPerRegion = 10e6, 10e6, 1e9, 1e9, 6
		}), workers: 4, rpw: int64(3)},
		{name: "zero demand needs no workers", in: with(func(i *Inputs) { i.CompactionsPerRegion = 0 }), workers: 0, rpw: nil},
		{name: "zero demand without a measured b", in: with(func(i *Inputs) { i.CompactionsPerRegion, i.CompactionSize = 0, 0 }), workers: 0, rpw: nil},
		{name: "no regions", in: with(func(i *Inputs) { i.Regions = 0 }), workers: 0, rpw: nil},
		{name: "zero demand needs no measurements", in: Inputs{Interval: time.Hour, Regions: 10}, workers: 0, rpw: nil},
		{name: "backlog adds workers", in: with(func(i *Inputs) { i.Backlog = 6 }), workers: 2 + 2, rpw: int64(5)},
		{name: "backlog alone", in: with(func(i *Inputs) { i.CompactionsPerRegion, i.Backlog = 0, 3 }), workers: 1, rpw: nil},
		// Debt of 12 GB: 3 compactions of D = 700 s, one at a time per
		// worker, paid within 10 min: ⌈2100/600⌉ = 4 more workers.
		{name: "a charged debt adds the workers that pay it within the wait bound", in: with(func(i *Inputs) { i.DebtBytes, i.MaxWait = 12e9, 10*time.Minute }), workers: 2 + 4, rpw: int64(5)},
		{name: "the queued compactions are part of the debt, not added to it", in: with(func(i *Inputs) { i.Backlog, i.DebtBytes, i.MaxWait = 6, 12e9, 10*time.Minute }), workers: 2 + 4, rpw: int64(5)},
		{name: "a backlog beyond the debt still counts", in: with(func(i *Inputs) { i.Backlog, i.DebtBytes, i.MaxWait = 6, 1e9, time.Hour }), workers: 2 + 2, rpw: int64(5)},
		{name: "debt alone", in: with(func(i *Inputs) { i.CompactionsPerRegion, i.DebtBytes, i.MaxWait = 0, 4e9, 700*time.Second }), workers: 1, rpw: nil},
		{name: "debt without a wait bound", in: with(func(i *Inputs) { i.DebtBytes = 1 }), inputErr: "max wait"},
		{name: "negative debt", in: with(func(i *Inputs) { i.DebtBytes, i.MaxWait = -1, time.Minute }), inputErr: "compaction debt"},
		{name: "b larger than m", in: with(func(i *Inputs) { i.CompactionSize = 7e9 }), infeasible: ReasonCompactionLargerThanCache},
		{name: "worker slower than one region", in: with(func(i *Inputs) { i.CompactionsPerRegion = 6 }), infeasible: ReasonWorkerTooSlow},
		{name: "zero compaction rate", in: with(func(i *Inputs) { i.CompactionRate = 0 }), inputErr: "compaction rate c"},
		{name: "negative transfer rate", in: with(func(i *Inputs) { i.TransferRate = -1 }), inputErr: "transfer rate w"},
		{name: "NaN size", in: with(func(i *Inputs) { i.CompactionSize = math.NaN() }), inputErr: "compaction size b"},
		{name: "zero interval", in: with(func(i *Inputs) { i.Interval = 0 }), inputErr: "interval t"},
		{name: "demand without b", in: with(func(i *Inputs) { i.CompactionSize = 0 }), inputErr: "compaction size b"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r, err := Compute(tc.in)
			switch {
			case tc.infeasible != "":
				ie, ok := IsInfeasible(err)
				if !ok || ie.Reason != tc.infeasible {
					t.Fatalf("want infeasible %s, got %v", tc.infeasible, err)
				}
				if ie.Message == "" {
					t.Fatal("infeasible without a message")
				}
				return
			case tc.inputErr != "":
				var ie *InputError
				if !errors.As(err, &ie) || ie.Input != tc.inputErr {
					t.Fatalf("want input error on %q, got %v", tc.inputErr, err)
				}
				return
			case err != nil:
				t.Fatal(err)
			}
			if r.Total != tc.workers {
				t.Errorf("workers: got %d, want %d (%+v)", r.Total, tc.workers, r)
			}
			if got := deref(r.RegionsPerWorker); got != tc.rpw {
				t.Errorf("regionsPerWorker: got %v, want %v", got, tc.rpw)
			}
		})
	}
}

func TestInfeasibleMessageNamesTheInputs(t *testing.T) {
	in := paper()
	in.CompactionSize = 7e9
	_, err := Compute(in)
	if err == nil || !strings.Contains(err.Error(), "7 GB") || !strings.Contains(err.Error(), "6 GB") {
		t.Fatalf("message should name b and m: %v", err)
	}
}

func TestClamp(t *testing.T) {
	for _, tc := range []struct {
		n      int64
		lo, hi int32
		want   int32
	}{{0, 1, 10, 1}, {5, 1, 10, 5}, {50, 1, 10, 10}, {math.MaxInt64, 0, 1000, 1000}, {0, 0, 3, 0}} {
		if got := Clamp(tc.n, tc.lo, tc.hi); got != tc.want {
			t.Errorf("Clamp(%d, %d, %d) = %d, want %d", tc.n, tc.lo, tc.hi, got, tc.want)
		}
	}
}

func TestStabilize(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	w := Windows{Up: 60 * time.Second, Down: 300 * time.Second}
	type step struct {
		at          int
		recommended int32
		want        int32
	}
	tests := []struct {
		name    string
		w       Windows
		current int32
		steps   []step
	}{
		{
			name: "no windows follow the recommendation", w: Windows{}, current: 3,
			steps: []step{{0, 5, 5}, {10, 2, 2}, {20, 7, 7}},
		},
		{
			name: "scale-down waits for the down-window", w: w, current: 5,
			steps: []step{{0, 5, 5}, {30, 2, 5}, {200, 2, 5}, {299, 2, 5}, {300, 2, 2}},
		},
		{
			name: "a brief dip does not scale down", w: w, current: 5,
			steps: []step{{0, 5, 5}, {100, 1, 5}, {200, 5, 5}, {400, 5, 5}},
		},
		{
			name: "scale-up waits for the up-window", w: w, current: 2,
			steps: []step{{0, 2, 2}, {10, 6, 2}, {59, 6, 2}, {60, 6, 6}},
		},
		{
			name: "a brief spike does not scale up", w: w, current: 2,
			steps: []step{{0, 2, 2}, {10, 9, 2}, {20, 2, 2}, {90, 2, 2}},
		},
		{
			name: "scale up to the lowest in the up-window", w: Windows{Up: 60 * time.Second}, current: 1,
			steps: []step{{0, 1, 1}, {30, 4, 1}, {60, 8, 4}, {90, 8, 8}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var hist []Sample
			cur := tc.current
			for _, s := range tc.steps {
				var got int32
				got, hist = Stabilize(at(s.at), cur, s.recommended, hist, tc.w)
				if got != s.want {
					t.Fatalf("t=%ds recommended %d (current %d): got %d, want %d", s.at, s.recommended, cur, got, s.want)
				}
				cur = got
			}
			if keep := max(tc.w.Up, tc.w.Down); keep > 0 {
				last := at(tc.steps[len(tc.steps)-1].at)
				for _, s := range hist {
					if last.Sub(s.Time) >= keep && !s.Time.Equal(last) {
						t.Errorf("history keeps an expired sample %v", s)
					}
				}
			}
		})
	}
}

func TestParseUnits(t *testing.T) {
	for _, tc := range []struct {
		f    func(string) (float64, error)
		in   string
		want float64
	}{
		{ParseBytes, "6GB", 6e9},
		{ParseBytes, "6GiB", 6 << 30},
		{ParseBytes, "4 GB", 4e9},
		{ParseBytes, "1024", 1024},
		{ParseByteRate, "20MB/s", 20e6},
		{ParseByteRate, "8 MB/s", 8e6},
		{ParseByteRate, "60MB/min", 1e6},
		{ParseFrequency, "1/h", 1.0 / 3600},
		{ParseFrequency, "2/30m", 2.0 / 1800},
		{ParseFrequency, "0/h", 0},
	} {
		got, err := tc.f(tc.in)
		if err != nil || math.Abs(got-tc.want) > 1e-12*math.Max(1, tc.want) {
			t.Errorf("parse %q = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
	for _, tc := range []struct {
		f  func(string) (float64, error)
		in string
	}{{ParseBytes, ""}, {ParseBytes, "lots"}, {ParseByteRate, "20MB"}, {ParseByteRate, "20MB/fortnight"}, {ParseFrequency, "x/h"}, {ParseFrequency, "-1/h"}} {
		if _, err := tc.f(tc.in); err == nil {
			t.Errorf("parse %q: want an error", tc.in)
		}
	}
}
