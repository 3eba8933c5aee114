package contract

import (
	"strings"
	"testing"
	"time"
)

func TestDefaultEngineConfigIsValid(t *testing.T) {
	if err := DefaultEngineConfig().Validate(); err != nil {
		t.Fatal(err)
	}
	var zero EngineConfig
	zero.EnsureDefaults()
	if zero != DefaultEngineConfig() {
		t.Fatalf("EnsureDefaults on an empty file: %+v, want %+v", zero, DefaultEngineConfig())
	}
}

// The SIGTERM paths must fit inside the grace periods the operator sets, or
// the kubelet kills a store before it released its regions (and the next
// owner waits) or a worker before its jobs finished.
func TestShutdownFitsTheGracePeriods(t *testing.T) {
	if got := DefaultReleaseTimeout + GracefulStopTimeout; got >= StoreGracePeriod {
		t.Errorf("store: release %v + graceful stop %v = %v, not inside the grace period %v",
			DefaultReleaseTimeout, GracefulStopTimeout, got, StoreGracePeriod)
	}
	if WorkerGracePeriod(DefaultDrainTimeout) <= DefaultDrainTimeout+GracefulStopTimeout-1 {
		t.Errorf("worker: grace period %v leaves no room for the gRPC stop after a %v drain",
			WorkerGracePeriod(DefaultDrainTimeout), DefaultDrainTimeout)
	}
}

func TestValidateNamesEveryProblem(t *testing.T) {
	c := DefaultEngineConfig()
	c.Memstore.Policy = "Accordion"
	c.Warmup.Mode = WarmupThrottledIncremental
	c.Compaction.MaxFiles = 2
	c.SyncMode = "fsync"
	c.Memstore.MaxWALBytes = c.Memstore.Bytes - 1
	c.Memstore.ActiveFraction = 1.5
	c.Memstore.PipelineSegments = -1
	c.Memstore.RedundancyThreshold = 1
	c.Retention.MaxVersions = -2
	c.Retention.GCTTL = Duration{500 * time.Millisecond}
	c.Memstore.MaxWALAge = Duration{time.Second}
	c.Memstore.MaxStoreWALBytes = 1 << 20
	err := c.Validate()
	if err == nil {
		t.Fatal("want errors")
	}
	for _, want := range []string{
		`engine.yaml memstore.policy: "Accordion" is not one of [None Basic Eager Adaptive]`,
		`engine.yaml syncMode: "fsync" is not one of [sync async]`,
		"engine.yaml compaction.maxFiles: 2 is below minFiles 3",
		"engine.yaml warmup.rateBytesPerSecond: mode ThrottledIncremental needs a positive rate",
		"engine.yaml memstore.maxWALBytes: 134217727 is below memstore.bytes 134217728: every memstore would be flushed before it fills",
		"engine.yaml memstore.activeFraction: 1.5 is not in (0, 1], e.g. 0.02",
		"engine.yaml memstore.pipelineSegments: -1 is below 1, e.g. 5",
		"engine.yaml memstore.redundancyThreshold: 1 is not in (0, 1), e.g. 0.5",
		"engine.yaml retention.maxVersions: -2 is negative (0: no count bound; retention.gcTTL decides)",
		"engine.yaml retention.gcTTL: 500ms is below the minimum 1s: reads a clock offset old would be refused; e.g. 10m, or 0 to keep every version",
		"engine.yaml memstore.maxWALAge: 1s is below the minimum 10s: a region would flush a file every few writes; e.g. 1h0m0s",
		"engine.yaml memstore.maxStoreWALBytes: 1048576 is below memstore.bytes 134217728: the store would flush every memstore before it fills",
	} {
		if !strings.Contains(err.Error()+"\n", want+"\n") {
			t.Errorf("error lacks the line %q:\n%v", want, err)
		}
	}
}

func TestEngineConfigRoundTrip(t *testing.T) {
	in := DefaultEngineConfig()
	in.Warmup = Warmup{Mode: WarmupThrottledIncremental, RateBytesPerSecond: 8_000_000}
	data, err := MarshalEngineConfig(in)
	if err != nil {
		t.Fatal(err)
	}
	out, err := UnmarshalEngineConfig(data)
	if err != nil {
		t.Fatal(err)
	}
	if out != in {
		t.Fatalf("round trip: got %+v, want %+v\n%s", out, in, data)
	}
	c, err := UnmarshalEngineConfig([]byte("memstore: {maxWALAge: 30m}\n"))
	if err != nil || c.Memstore.MaxWALAge.Duration != 30*time.Minute {
		t.Fatalf("maxWALAge: 30m read as %v, %v", c.Memstore.MaxWALAge, err)
	}
	if _, err := UnmarshalEngineConfig([]byte("memstore: {maxWALAge: 30}\n")); err == nil || !strings.Contains(err.Error(), `30 is not a duration: write a string with a unit`) {
		t.Fatalf("want an error that says maxWALAge is not a duration, got %v", err)
	}
	if _, err := UnmarshalEngineConfig([]byte("memstore: {policy: None}\nbogus: 1\n")); err == nil || !strings.Contains(err.Error(), `unknown field "bogus"`) {
		t.Fatalf("want an error naming the unknown key, got %v", err)
	}
}

// The liveness lease's arithmetic (docs/failover.md §3): a store serves
// until its expiry minus the clock offset, so a renewal three intervals
// after the last success (two failed in between) must still land inside
// that window; and a stopped store is fenced within the 3.5 s the design
// promises (term + offset + one check interval).
func TestLivenessRenewalsFitTheTerm(t *testing.T) {
	if serving := DefaultLivenessTerm - DefaultMaxClockOffset; 3*DefaultLivenessRenewInterval >= serving {
		t.Errorf("three renew intervals (%v) do not fit the serving window term − offset = %v",
			3*DefaultLivenessRenewInterval, serving)
	}
	if got := DefaultLivenessTerm + DefaultMaxClockOffset + DefaultFailoverCheckInterval; got > 3500*time.Millisecond {
		t.Errorf("a stopped store is fenced after up to %v, over docs/failover.md's 3.5 s", got)
	}
}
