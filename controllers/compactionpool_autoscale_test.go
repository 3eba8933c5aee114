package controllers

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kvapi "github.com/bellows-kv/bellows/api/v1alpha1"
	"github.com/bellows-kv/bellows/autoscaler"
)

// TestDecide runs the pure autoscaler step over a sequence of observations
// with explicit timestamps, carrying status from one evaluation to the next
// as the controller does.
func TestDecide(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	pool := &kvapi.CompactionPool{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "w"}}
	pool.Spec.MinReplicas, pool.Spec.MaxReplicas = 1, 6
	pool.Spec.CacheBytes = resource.MustParse("6G")
	pool.Spec.Autoscaling.ScaleDownStabilizationWindow = &metav1.Duration{Duration: 5 * time.Minute}
	pool.Spec.Autoscaling.ScaleUpStabilizationWindow = &metav1.Duration{}
	pool.SetDefaults()

	paper := autoscaler.Observation{CompactionRate: 20e6, TransferRate: 8e6, CompactionSize: 4e9, RequestRate: 10.0 / 3600, DemandMeasured: true}
	steps := []struct {
		at       time.Duration
		obs      autoscaler.Observation
		regions  int32
		active   bool
		reason   string
		desired  int32 // when active
		replicas int32 // spec.replicas after applying
	}{
		{0, paper, 10, true, kvapi.ReasonModelRecommendation, 2, 2},
		// Unmeasured c, w, b and demand: the last inputs carry over.
		{time.Minute, autoscaler.Observation{}, 10, true, kvapi.ReasonModelRecommendation, 2, 2},
		// Demand drops to zero: the down-window holds 2 for 5 minutes.
		{2 * time.Minute, autoscaler.Observation{DemandMeasured: true}, 10, true, kvapi.ReasonModelRecommendation, 2, 2},
		{6*time.Minute + time.Second, autoscaler.Observation{DemandMeasured: true}, 10, true, kvapi.ReasonModelRecommendation, 1, 1},
		// T = 4: one region per worker, 10 workers, clamped to 6.
		{7 * time.Minute, autoscaler.Observation{RequestRate: 40.0 / 3600, DemandMeasured: true}, 10, true, kvapi.ReasonModelRecommendation, 6, 6},
		// b > m: infeasible, no recommendation.
		{8 * time.Minute, autoscaler.Observation{CompactionSize: 7e9, RequestRate: 10.0 / 3600, DemandMeasured: true}, 10, false, kvapi.ReasonModelInfeasible, 0, 6},
	}
	for i, s := range steps {
		d := Decide(pool, s.obs, s.regions, t0.Add(s.at))
		if d.Active != s.active || d.Reason != s.reason {
			t.Fatalf("step %d: active %v reason %s (%s), want %v %s", i, d.Active, d.Reason, d.Message, s.active, s.reason)
		}
		if d.Active && *d.Desired != s.desired {
			t.Fatalf("step %d: desired %d, want %d (%s)", i, *d.Desired, s.desired, d.Message)
		}
		pool.Status.Autoscaler = &d.Status
		if d.Active {
			pool.Spec.Replicas = d.Desired
		}
		if *pool.Spec.Replicas != s.replicas {
			t.Fatalf("step %d: replicas %d, want %d", i, *pool.Spec.Replicas, s.replicas)
		}
	}

	// First evaluation with no demand measurement and no history: no guess.
	fresh := &kvapi.CompactionPool{}
	fresh.SetDefaults()
	if d := Decide(fresh, autoscaler.Observation{CompactionRate: 1}, 4, t0); d.Active || d.Reason != kvapi.ReasonMetricsUnavailable {
		t.Fatalf("want MetricsUnavailable, got %+v", d)
	}
}
