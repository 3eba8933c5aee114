package v1alpha1

import (
	"strings"
	"testing"
	"time"
)

func TestDurationParse(t *testing.T) {
	for in, want := range map[Duration]time.Duration{"90m": 90 * time.Minute, "1h30m": 90 * time.Minute, "0s": 0, "1.5s": 1500 * time.Millisecond} {
		if got, err := in.Parse(); err != nil || got != want {
			t.Errorf("%q: %v, %v; want %v", in, got, err, want)
		}
	}
	for in, msg := range map[Duration]string{
		"ten minutes": `"ten minutes" is not a duration; write a number with a unit (h, m, s), e.g. 10m or 1h30m`,
		"1d":          `"1d" is not a duration; use hours, e.g. 24h for a day`,
		"":            "is empty",
	} {
		if _, err := in.Parse(); err == nil || err.Error() != msg {
			t.Errorf("%q: error %v, want %s", in, err, msg)
		}
	}
}

// TestPoolDurations: the spec step's check names every bad field with its
// value, and holds the same lower bounds as the CRD's rules.
func TestPoolDurations(t *testing.T) {
	p := &CompactionPool{}
	p.SetDefaults()
	d, err := p.Spec.Durations()
	if err != nil {
		t.Fatal(err)
	}
	want := PoolDurations{DrainTimeout: DefaultDrainTimeout, Interval: DefaultAutoscalingInterval, SyncPeriod: DefaultAutoscalingSync,
		ScaleUpWindow: DefaultScaleUpWindow, ScaleDownWindow: DefaultScaleDownWindow, MaxWait: DefaultMaxCompactionWait}
	if d != want {
		t.Errorf("defaults parse to %+v, want %+v", d, want)
	}

	p.Spec.DrainTimeout = "ten minutes"
	p.Spec.Autoscaling.SyncPeriod = "0s"
	p.Spec.Autoscaling.ScaleDownStabilizationWindow = "-1m"
	p.Spec.Autoscaling.Interval = "1s"
	p.Spec.Autoscaling.MaxCompactionWait = "500ms"
	_, err = p.Spec.Durations()
	for _, msg := range []string{
		"spec.autoscaling.maxCompactionWait: 500ms is below the minimum 1s",
		`spec.drainTimeout: "ten minutes" is not a duration`,
		"spec.autoscaling.syncPeriod: 0s is below the minimum 1s",
		"spec.autoscaling.scaleDownStabilizationWindow: -1m is below the minimum 0s",
	} {
		if err == nil || !strings.Contains(err.Error(), msg) {
			t.Errorf("error %v does not say %q", err, msg)
		}
	}
	if strings.Contains(err.Error(), "interval") {
		t.Errorf("interval 1s is the minimum, and valid: %v", err)
	}
	if got := p.Spec.DrainTimeoutOrDefault(); got != DefaultDrainTimeout {
		t.Errorf("DrainTimeoutOrDefault of a bad value: %v, want the default", got)
	}
}

// TestMaxClockOffset: the spec step's check holds the CRD's bounds (0 and
// LargestMaxClockOffset included), and the builders' fallback is the
// contract's default.
func TestMaxClockOffset(t *testing.T) {
	c := &KVCluster{}
	c.SetDefaults()
	if d, err := c.Spec.MaxClockOffset(); err != nil || d != DefaultMaxClockOffset {
		t.Errorf("the default parses to %v, %v; want %v", d, err, DefaultMaxClockOffset)
	}
	for in, want := range map[Duration]time.Duration{"0": 0, "0s": 0, "0.25s": 250 * time.Millisecond, "10s": LargestMaxClockOffset} {
		c.Spec.Clock.MaxOffset = in
		if d, err := c.Spec.MaxClockOffset(); err != nil || d != want {
			t.Errorf("%q: %v, %v; want %v", in, d, err, want)
		}
	}
	for in, msg := range map[Duration]string{
		"-1ms":    "spec.clock.maxOffset: -1ms is negative",
		"10001ms": "spec.clock.maxOffset: 10001ms is above the maximum 10s",
		"soon":    `spec.clock.maxOffset: "soon" is not a duration`,
	} {
		c.Spec.Clock.MaxOffset = in
		if _, err := c.Spec.MaxClockOffset(); err == nil || !strings.HasPrefix(err.Error(), msg) {
			t.Errorf("%q: error %v, want %s…", in, err, msg)
		}
		if got := c.Spec.MaxClockOffsetOrDefault(); got != DefaultMaxClockOffset {
			t.Errorf("MaxClockOffsetOrDefault of %q: %v, want the default", in, got)
		}
	}
}
