package controllers

import (
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	kvapi "github.com/bellows-kv/bellows/api/v1alpha1"
	"github.com/bellows-kv/bellows/autoscaler"
)

// m is one mode's expectation in TestDecide.
func m(desired, replicas int32) struct{ desired, replicas int32 } {
	return struct{ desired, replicas int32 }{desired, replicas}
}

func decidePool(mode kvapi.AutoscalingMode) *kvapi.CompactionPool {
	pool := &kvapi.CompactionPool{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "w"}}
	pool.Spec.MinReplicas, pool.Spec.MaxReplicas = 1, 6
	pool.Spec.CacheBytes = resource.MustParse("6G")
	pool.Spec.Autoscaling.Mode = mode
	pool.Spec.Autoscaling.ScaleDownStabilizationWindow = "5m"
	pool.Spec.Autoscaling.ScaleUpStabilizationWindow = "0s"
	pool.SetDefaults()
	return pool
}

// durationsOf is what the spec step gives Decide for a defaulted pool.
func durationsOf(t *testing.T, pool *kvapi.CompactionPool) kvapi.PoolDurations {
	t.Helper()
	d, err := pool.Spec.Durations()
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// TestDecide runs the pure autoscaler step over a sequence of observations
// with explicit timestamps, carrying status and spec.replicas from one
// evaluation to the next as the controller does: status from Decide,
// spec.replicas from replicasAfter, the function the controller uses to
// decide what it writes through /scale. The same sequence runs in Model
// mode, where spec.replicas follows the recommendation, and in External
// mode, where the recommendation is only published and spec.replicas is
// never written.
func TestDecide(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	paper := autoscaler.Observation{CompactionRate: 20e6, TransferRate: 8e6, CompactionSize: 4e9, RequestRate: 10.0 / 3600, DemandMeasured: true}
	steps := []struct {
		at      time.Duration
		obs     autoscaler.Observation
		regions int32
		active  bool
		reason  string
		// Per mode, the recommendation (when active) and spec.replicas after
		// applying it. Stabilization starts from spec.replicas, which
		// External mode leaves at 1, so its recommendations differ.
		model, external struct{ desired, replicas int32 }
	}{
		{0, paper, 10, true, kvapi.ReasonModelRecommendation, m(2, 2), m(2, 1)},
		// Unmeasured c, w, b and demand: the last inputs carry over.
		{time.Minute, autoscaler.Observation{}, 10, true, kvapi.ReasonModelRecommendation, m(2, 2), m(2, 1)},
		// Demand drops to zero: the down-window holds 2 workers for 5
		// minutes (External: spec.replicas is 1 already, and stays).
		{2 * time.Minute, autoscaler.Observation{DemandMeasured: true}, 10, true, kvapi.ReasonModelRecommendation, m(2, 2), m(1, 1)},
		{6*time.Minute + time.Second, autoscaler.Observation{DemandMeasured: true}, 10, true, kvapi.ReasonModelRecommendation, m(1, 1), m(1, 1)},
		// T = 4: one region per worker, 10 workers, clamped to maxReplicas 6.
		{7 * time.Minute, autoscaler.Observation{RequestRate: 40.0 / 3600, DemandMeasured: true}, 10, true, kvapi.ReasonModelRecommendation, m(6, 6), m(6, 1)},
		// b > m: infeasible, no recommendation: the size stays.
		{8 * time.Minute, autoscaler.Observation{CompactionSize: 7e9, RequestRate: 10.0 / 3600, DemandMeasured: true}, 10, false, kvapi.ReasonModelInfeasible, m(0, 6), m(0, 1)},
		// No demand: down to minReplicas once the down-window has passed.
		{14 * time.Minute, autoscaler.Observation{DemandMeasured: true}, 10, true, kvapi.ReasonModelRecommendation, m(1, 1), m(1, 1)},
	}
	for _, mode := range []kvapi.AutoscalingMode{kvapi.AutoscalingModel, kvapi.AutoscalingExternal} {
		pool := decidePool(mode)
		for i, s := range steps {
			d := Decide(pool, durationsOf(t, pool), s.obs, s.regions, true, t0.Add(s.at))
			if d.Active != s.active || d.Reason != s.reason {
				t.Fatalf("%s step %d: active %v reason %s (%s), want %v %s", mode, i, d.Active, d.Reason, d.Message, s.active, s.reason)
			}
			want := s.model
			if mode == kvapi.AutoscalingExternal {
				want = s.external
			}
			if d.Active && *d.Desired != want.desired {
				t.Fatalf("%s step %d: desired %d, want %d (%s)", mode, i, *d.Desired, want.desired, d.Message)
			}
			if !d.Active && d.Desired != nil {
				t.Fatalf("%s step %d: no recommendation, yet desired %d", mode, i, *d.Desired)
			}
			pool.Status.Autoscaler = &d.Status
			pool.Spec.Replicas = ptr.To(replicasAfter(pool, d))
			if got := *pool.Spec.Replicas; got != want.replicas {
				t.Fatalf("%s step %d: spec.replicas %d after applying the decision, want %d", mode, i, got, want.replicas)
			}
		}
	}

	// First evaluation with no demand measurement and no history: no guess.
	fresh := &kvapi.CompactionPool{}
	fresh.SetDefaults()
	if d := Decide(fresh, durationsOf(t, fresh), autoscaler.Observation{CompactionRate: 1}, 4, true, t0); d.Active || d.Reason != kvapi.ReasonMetricsUnavailable || d.Desired != nil {
		t.Fatalf("want MetricsUnavailable, got %+v", d)
	}
}

// TestReplicasAfter: only Model mode with a recommendation writes
// spec.replicas; a user's or an HPA's size is left alone otherwise.
func TestReplicasAfter(t *testing.T) {
	rec := Decision{Active: true, Desired: ptr.To(int32(4))}
	none := Decision{Reason: kvapi.ReasonModelInfeasible}
	for _, tc := range []struct {
		mode kvapi.AutoscalingMode
		d    Decision
		want int32
	}{
		{kvapi.AutoscalingModel, rec, 4},
		{kvapi.AutoscalingModel, none, 3},
		{kvapi.AutoscalingExternal, rec, 3},
		{kvapi.AutoscalingExternal, none, 3},
		{kvapi.AutoscalingDisabled, rec, 3},
	} {
		pool := decidePool(tc.mode)
		pool.Spec.Replicas = ptr.To(int32(3))
		if got := replicasAfter(pool, tc.d); got != tc.want {
			t.Errorf("%s, active %v: spec.replicas %d, want %d", tc.mode, tc.d.Active, got, tc.want)
		}
	}
}

// TestDecideUnreadableInputs: a last input in status that is not a number
// is an error (no recommendation, named in the message), not a 0; the
// evaluation records the fallback, so the next one is back to normal.
func TestDecideUnreadableInputs(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	paper := autoscaler.Observation{CompactionRate: 20e6, TransferRate: 8e6, CompactionSize: 4e9, RequestRate: 10.0 / 3600, DemandMeasured: true}
	for _, tc := range []struct {
		field string
		edit  func(*kvapi.ModelInputs)
	}{
		{"compactionRateBytesPerSecond", func(in *kvapi.ModelInputs) { in.CompactionRateBytesPerSecond = "fast" }},
		{"transferRateBytesPerSecond", func(in *kvapi.ModelInputs) { in.TransferRateBytesPerSecond = "NaN" }},
		{"compactionSizeBytes", func(in *kvapi.ModelInputs) { in.CompactionSizeBytes = "+Inf" }},
		{"compactionsPerRegion", func(in *kvapi.ModelInputs) { in.CompactionsPerRegion = "1,5" }},
	} {
		pool := decidePool(kvapi.AutoscalingModel)
		d := Decide(pool, durationsOf(t, pool), paper, 10, true, t0)
		if !d.Active {
			t.Fatalf("first evaluation: %s", d.Message)
		}
		pool.Status.Autoscaler = &d.Status
		tc.edit(&pool.Status.Autoscaler.Inputs)
		d = Decide(pool, durationsOf(t, pool), autoscaler.Observation{}, 10, true, t0.Add(time.Minute))
		if d.Active || d.Desired != nil || d.Reason != kvapi.ReasonMetricsUnavailable || !strings.Contains(d.Message, "status.autoscaler.inputs."+tc.field) {
			t.Errorf("%s unreadable: active %v reason %s message %q", tc.field, d.Active, d.Reason, d.Message)
		}
		pool.Status.Autoscaler = &d.Status
		if d := Decide(pool, durationsOf(t, pool), paper, 10, true, t0.Add(2*time.Minute)); !d.Active {
			t.Errorf("%s: the evaluation after the unreadable one: %s %s", tc.field, d.Reason, d.Message)
		}
	}
}

func TestParseRecorded(t *testing.T) {
	for s, want := range map[string]float64{"": 0, "0": 0, "2e+07": 2e7, "1.5": 1.5} {
		if got, err := parseRecorded("f", s); err != nil || got != want {
			t.Errorf("parseRecorded(%q) = %v, %v; want %v", s, got, err, want)
		}
	}
	for _, s := range []string{"x", "NaN", "Inf", "-Inf", "1e999"} {
		if got, err := parseRecorded("f", s); err == nil {
			t.Errorf("parseRecorded(%q) = %v, want an error", s, got)
		}
	}
}

// The compaction debt is charged only while compactions wait too long to
// start, with a band: from a wait above maxCompactionWait until it falls
// below half of it. A healthy pool's debt leaves the paper's steady answer
// exact; an overloaded one gets the workers that pay its debt within the
// bound; a wait hovering near the bound does not add and remove workers at
// alternate evaluations.
func TestDecideChargesTheDebtOnlyWhileCompactionsWaitTooLong(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	pool := decidePool(kvapi.AutoscalingModel)
	pool.Spec.MaxReplicas = 20
	pool.Spec.Autoscaling.MaxCompactionWait = "10m"
	// The paper's steady state needs 2 workers; a debt of 12 GB is three
	// compactions of D = 700 s, paid within 10 minutes by 4 more.
	paper := func(debt float64, wait time.Duration) autoscaler.Observation {
		return autoscaler.Observation{CompactionRate: 20e6, TransferRate: 8e6, CompactionSize: 4e9,
			RequestRate: 10.0 / 3600, DemandMeasured: true, DebtBytes: debt, OldestWait: wait}
	}
	steps := []struct {
		at      time.Duration
		obs     autoscaler.Observation
		charged float64
		desired int32
	}{
		{0, paper(12e9, 5*time.Minute), 0, 2},                      // a debt, but no wait past the bound
		{time.Minute, paper(12e9, 9*time.Minute), 0, 2},            // within the band, never charged: not yet
		{2 * time.Minute, paper(12e9, 11*time.Minute), 12e9, 6},    // past the bound: charged
		{3 * time.Minute, paper(16e9, 6*time.Minute), 16e9, 2 + 5}, // within the band, charged before: still (4 × 700 s / 600 s)
		{4 * time.Minute, paper(4e9, 4*time.Minute), 0, 7},         // below half: released; the down-window holds
		{10 * time.Minute, paper(0, 0), 0, 2},                      // paid: the steady answer
	}
	for i, s := range steps {
		d := Decide(pool, durationsOf(t, pool), s.obs, 10, true, t0.Add(s.at))
		if !d.Active {
			t.Fatalf("step %d: %s: %s", i, d.Reason, d.Message)
		}
		if d.Inputs.DebtBytes != s.charged || *d.Desired != s.desired {
			t.Fatalf("step %d (debt %s, oldest wait %v): charged %g, desired %d; want %g and %d (%s)",
				i, autoscaler.FormatBytes(s.obs.DebtBytes), s.obs.OldestWait, d.Inputs.DebtBytes, *d.Desired, s.charged, s.desired, d.Message)
		}
		if got := d.Status.Inputs.ChargedDebtBytes; got != fmtFloat(s.charged) {
			t.Fatalf("step %d: status records a charged debt of %q, want %q", i, got, fmtFloat(s.charged))
		}
		pool.Status.Autoscaler = &d.Status
		pool.Spec.Replicas = ptr.To(replicasAfter(pool, d))
	}
	if o := pool.Status.Autoscaler.Outputs; o.ModelReplicas != 2 || o.DebtReplicas != 0 {
		t.Fatalf("after the debt is paid: outputs %+v, want the steady 2 workers and no debt replicas", o)
	}
}
