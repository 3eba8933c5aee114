package controllers

import (
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	kvapi "github.com/bellows-kv/bellows/api/v1alpha1"
	"github.com/bellows-kv/bellows/autoscaler"
)

// poolSim is a discrete-time model, one second per step, of a compaction
// pool serving the regions of many stores, driven by the real autoscaler
// step (Decide, replicasAfter). A region behaves as region.Region does:
// flushed bytes become owed; it requests a compaction of b bytes when it
// owes b, runs one at a time, and queues at most one more request (counted
// when it arises); a request waits in the stores' queue until a worker
// slot is free (l = ⌊m/b⌋ per ready worker) and then takes D seconds.
// Each region also reports its debt and oldest wait as the store does.
type poolSim struct {
	b, c, w, m float64
	d          float64 // D = b/c + b/w, seconds
	l          int     // slots per worker
	startDelay float64 // seconds from a scale-up to a ready worker

	regions []simRegion
	perRate float64 // bytes flushed per region per second now
	now     float64
	queue   []int // waiting regions in the order they were wanted
	running int
	ready   int
	starts  []float64 // when the workers being started become ready

	requested  float64 // requests counted, all stores
	lastReqAt  float64
	lastReqCnt float64
}

type simRegion struct {
	owed             float64 // bytes flushed and not yet compacted, the running compaction's included
	waiting, running bool
	since            float64 // waiting: when the compaction was wanted
	endsAt           float64
	queued           bool
	queuedAt         float64
}

// newPoolSim starts each region owing backlog bytes more than its phase;
// the requests the backlog made were counted before the first scrape.
func newPoolSim(regions, workers int, backlog, b, c, w, m float64) *poolSim {
	s := &poolSim{b: b, c: c, w: w, m: m, d: b/c + b/w, l: int(m / b), startDelay: 30, ready: workers,
		regions: make([]simRegion, regions)}
	for i := range s.regions {
		r := &s.regions[i]
		// Phases spread evenly: regions do not request in lockstep.
		r.owed = backlog + b*float64(i)/float64(regions)
		if r.owed >= b {
			s.requested++
			s.want(i, 0)
		}
		if r.owed >= 2*b {
			s.requested++
			r.queued = true
		}
	}
	s.lastReqCnt = s.requested
	return s
}

func (s *poolSim) want(i int, since float64) {
	r := &s.regions[i]
	r.waiting, r.since = true, since
	s.queue = append(s.queue, i)
}

// step advances one second.
func (s *poolSim) step() {
	s.now++
	for len(s.starts) > 0 && s.starts[0] <= s.now {
		s.starts = s.starts[1:]
		s.ready++
	}
	for i := range s.regions {
		r := &s.regions[i]
		r.owed += s.perRate
		if r.running && r.endsAt <= s.now {
			r.running = false
			r.owed -= s.b
			s.running--
			if r.queued {
				r.queued = false
				s.want(i, r.queuedAt)
			}
		}
		busy := r.waiting || r.running
		switch {
		case !busy && r.owed >= s.b:
			s.requested++
			s.want(i, s.now)
		case busy && !r.queued && r.owed-s.b >= s.b:
			s.requested++
			r.queued, r.queuedAt = true, s.now
		}
	}
	for len(s.queue) > 0 && s.running < s.ready*s.l {
		i := s.queue[0]
		s.queue = s.queue[1:]
		r := &s.regions[i]
		r.waiting, r.running, r.endsAt = false, true, s.now+s.d
		s.running++
	}
}

// scaleTo applies a replica count: new workers start after startDelay;
// removed ones are those still starting, then idle capacity (a removed
// worker drains its running jobs, so running work is never cut).
func (s *poolSim) scaleTo(n int) {
	for s.ready+len(s.starts) < n {
		s.starts = append(s.starts, s.now+s.startDelay)
	}
	for s.ready+len(s.starts) > n && len(s.starts) > 0 {
		s.starts = s.starts[:len(s.starts)-1]
	}
	if s.ready > n {
		s.ready = n
	}
}

// observe is what the scraper would read now: the requested rate since
// the previous observation and the stores' debt and oldest wait.
func (s *poolSim) observe() autoscaler.Observation {
	obs := autoscaler.Observation{CompactionRate: s.c, TransferRate: s.w, CompactionSize: s.b}
	if dt := s.now - s.lastReqAt; dt > 0 {
		obs.RequestRate, obs.DemandMeasured = (s.requested-s.lastReqCnt)/dt, true
	}
	s.lastReqAt, s.lastReqCnt = s.now, s.requested
	var oldest float64
	for i := range s.regions {
		r := &s.regions[i]
		debt := r.owed
		if r.running {
			debt -= s.b // executing: being paid
		}
		if debt >= s.b {
			obs.DebtBytes += debt
		}
		if r.queued {
			obs.Queued++
			oldest = max(oldest, s.now-r.queuedAt)
		}
		if r.waiting {
			obs.Queued++
			oldest = max(oldest, s.now-r.since)
		}
	}
	obs.OldestWait = time.Duration(oldest * float64(time.Second))
	return obs
}

// simSample is one evaluation of the simulated autoscaler.
type simSample struct {
	at           float64 // seconds
	desired      int32
	debtReplicas int32
	wait         time.Duration
	debt         float64
}

func (s simSample) minute() string { return fmt.Sprintf("%.1f min", s.at/60) }

// The simulated regime: 1,000 regions over 20 stores (their readings are
// summed, debt, and maxed, wait, as the scraper does, so the split does not
// change either); b = 1 GB, c = 100 MB/s, w = 50 MB/s (D = 30 s), m = 2 GB
// (l = 2), t = 1 h, sync 30 s, a 5-minute scale-down window, workers ready
// 30 s after a scale-up. simLow is the per-region write rate that requests
// T = 12 compactions per region per hour: C = ⌈1000/⌊240/12⌋⌉ = 50 workers;
// three times it, T = 36, needs C = ⌈1000/⌊240/36⌋⌉ = 167.
const (
	simRegions = 1000
	simSync    = 30
	simLow     = 12e9 / 3600.0
	simLowC    = 50
	simHighC   = 167
)

// runPoolSim runs the pool, from the given workers and per-region backlog
// (bytes owed at the start), for end seconds under the per-region write rate
// rate(second), with the given maxCompactionWait, and returns every
// evaluation.
func runPoolSim(t *testing.T, end float64, workers int32, backlog float64, rate func(float64) float64, maxWait kvapi.Duration) []simSample {
	t.Helper()
	pool := decidePool(kvapi.AutoscalingModel)
	pool.Spec.MinReplicas, pool.Spec.MaxReplicas = 1, 200
	pool.Spec.CacheBytes = resource.MustParse("2G")
	pool.Spec.Autoscaling.MaxCompactionWait = maxWait
	pool.Spec.Replicas = ptr.To(workers)
	dur := durationsOf(t, pool)
	sim := newPoolSim(simRegions, int(workers), backlog, 1e9, 100e6, 50e6, 2e9)
	var samples []simSample
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for sim.now < end {
		sim.perRate = rate(sim.now)
		sim.step()
		if int(sim.now)%simSync != 0 {
			continue
		}
		obs := sim.observe()
		d := Decide(pool, dur, obs, simRegions, true, t0.Add(time.Duration(sim.now)*time.Second))
		if !d.Active {
			t.Fatalf("at %v: %s: %s", time.Duration(sim.now)*time.Second, d.Reason, d.Message)
		}
		pool.Status.Autoscaler = &d.Status
		pool.Spec.Replicas = ptr.To(replicasAfter(pool, d))
		sim.scaleTo(int(*pool.Spec.Replicas))
		samples = append(samples, simSample{sim.now, *d.Desired, d.Status.Outputs.DebtReplicas, obs.OldestWait, obs.DebtBytes})
	}
	return samples
}

// checkMonotone fails when, within [from, to), the recommendation rises
// after it fell: one move up at a rise in demand and one down as it is
// met are tracking; more is oscillation.
func checkMonotone(t *testing.T, samples []simSample, from, to float64) {
	t.Helper()
	var prev int32
	fell := false
	for _, s := range samples {
		if s.at < from || s.at >= to {
			continue
		}
		if prev != 0 && s.desired > prev && fell {
			t.Errorf("%s: desired rose to %d after falling: the pool oscillates", s.minute(), s.desired)
		}
		if prev != 0 && s.desired < prev {
			fell = true
		}
		prev = s.desired
	}
}

// The regime's formula, checked once: the simulations' goals quote it.
func TestThePoolSimulationsRegime(t *testing.T) {
	for rate, want := range map[float64]int64{simLow: simLowC, 3 * simLow: simHighC} {
		r, err := autoscaler.Compute(autoscaler.Inputs{CompactionRate: 100e6, TransferRate: 50e6, CacheBytes: 2e9, CompactionSize: 1e9,
			CompactionsPerRegion: rate * 3600 / 1e9, Interval: time.Hour, Regions: simRegions})
		if err != nil || r.Total != want {
			t.Fatalf("at %s per region per second the formula gives %d (%v), want %d", autoscaler.FormatBytes(rate), r.Total, err, want)
		}
	}
}

// The autoscaler at scale under a step: the write rate steps to three
// times its level for an hour and back. Goals, as the issue states them:
// desired replicas track demand within one sync period; no oscillation;
// the oldest wait bounded; the steady state equal to the formula.
func TestThePoolTracksAStepInDemandAtScale(t *testing.T) {
	const stepUp, stepDn, end = 60 * 60, 120 * 60, 180 * 60
	samples := runPoolSim(t, end, simLowC, 0, func(now float64) float64 {
		if now >= stepUp && now < stepDn {
			return 3 * simLow
		}
		return simLow
	}, "1m")
	var peakWait time.Duration
	for i, s := range samples {
		if i%20 == 0 {
			t.Logf("%s: desired %d (debt replicas %d), oldest wait %v, debt %s", s.minute(), s.desired, s.debtReplicas, s.wait, autoscaler.FormatBytes(s.debt))
		}
		peakWait = max(peakWait, s.wait)
		// The steady state, before the step and once the step-down's
		// scale-down window has passed: the formula, exactly.
		if ((s.at >= 20*60 && s.at < stepUp) || s.at >= stepDn+6*60) && (s.desired != simLowC || s.debtReplicas != 0) {
			t.Errorf("%s (steady): desired %d with %d for debt, want the formula's %d and none", s.minute(), s.desired, s.debtReplicas, simLowC)
		}
		// Tracking: the first evaluation whose sync period lies wholly
		// after the step up asks for at least the new formula.
		if s.at >= stepUp+simSync && s.at < stepDn && s.desired < simHighC {
			t.Errorf("%s (after the step up): desired %d, want at least the formula's %d", s.minute(), s.desired, simHighC)
		}
	}
	if peakWait > time.Minute {
		t.Errorf("the oldest wait peaked at %v, above maxCompactionWait 1m", peakWait)
	}
	checkMonotone(t, samples, 0, stepUp)
	checkMonotone(t, samples, stepUp+simSync, stepDn)
	checkMonotone(t, samples, stepDn, end)
	t.Logf("oldest wait: peak %v", peakWait)
}

// The autoscaler at scale with the load the queue cannot see: the pool
// starts at 10 workers under a demand that needs the formula's 50, with 3
// GB owed per region (a pool brought back after an outage, or a
// maxReplicas just raised, the backlog's requests counted before the
// first scrape). Every region has a compaction waiting and one queued, and queues
// no more, so each evaluation's requested rate is what the pool completes
// and the steady term answers "10 is enough" for ever. The debt term sees
// the waiting work. Goals: once the oldest wait passes maxCompactionWait
// (1m) the next evaluation asks for more workers; the pool reaches the
// formula and stays there, without oscillating; from then on the oldest
// wait is under the bound. And without the debt term (a maxCompactionWait
// of 1000h never charges it) the same run stays stuck near 10 workers
// with a wait past 10 minutes: the term is what sizes the pool.
func TestAnUndersizedPoolSeesTheWorkTheQueueHides(t *testing.T) {
	const end, backlog = 60 * 60, 3e9
	constant := func(float64) float64 { return simLow }
	with := runPoolSim(t, end, 10, backlog, constant, "1m")
	reached := -1.0
	for i, s := range with {
		if i%6 == 0 {
			t.Logf("with the debt term, %s: desired %d (debt replicas %d), oldest wait %v, debt %s", s.minute(), s.desired, s.debtReplicas, s.wait, autoscaler.FormatBytes(s.debt))
		}
		if i > 0 && with[i-1].wait > time.Minute && with[i-1].desired < simLowC && s.desired <= with[i-1].desired {
			t.Errorf("%s: the oldest wait was %v at the previous evaluation, yet desired %d did not rise from %d", s.minute(), with[i-1].wait, s.desired, with[i-1].desired)
		}
		if reached < 0 && s.desired >= simLowC {
			reached = s.at
		}
	}
	if reached < 0 {
		t.Fatalf("the pool never reached the formula's %d workers", simLowC)
	}
	t.Logf("with the debt term: the formula's %d workers asked for at %.1f min", simLowC, reached/60)
	var settled time.Duration
	for _, s := range with {
		if s.at >= reached+10*60 {
			settled = max(settled, s.wait)
			if s.desired != simLowC || s.debtReplicas != 0 {
				t.Errorf("%s (settled): desired %d with %d for debt, want the formula's %d and none", s.minute(), s.desired, s.debtReplicas, simLowC)
			}
		}
	}
	if settled > time.Minute {
		t.Errorf("from 10 minutes after the pool reached the formula, the oldest wait reached %v, above maxCompactionWait 1m", settled)
	}
	checkMonotone(t, with, reached, end)

	without := runPoolSim(t, end, 10, backlog, constant, "1000h")
	last := without[len(without)-1]
	t.Logf("without the debt term, at the end: desired %d, oldest wait %v, debt %s", last.desired, last.wait, autoscaler.FormatBytes(last.debt))
	if last.desired >= simLowC/2 || last.wait < 10*time.Minute {
		t.Errorf("without the debt term the run ends at %d workers with an oldest wait of %v: the simulation is not in the regime the term is for", last.desired, last.wait)
	}
}
