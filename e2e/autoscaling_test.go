//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kvapi "github.com/bellows-kv/bellows/api/v1alpha1"
	"github.com/bellows-kv/bellows/internal/contract"
)

// autoscalingScenario: the capacity model (autoscaler/, paper §6.3) sizes the
// pool from c and w measured by the workers, b and the demand T measured by
// the stores (compactions requested per interval), m from the spec and R
// from the cluster. Demand is raised the realistic way: a client keeps
// writing and asks for a major compaction of one region every 2 s (r = 0.5
// compactions/s over R = 4 regions), each of about 300 kB of incompressible
// data, with the workers' transfer rate w throttled to 20 kB/s (D ≈ b/w is
// seconds). Once the model has measured c, w, b and T, the test sets the
// pool's cache m so that one worker covers ⌊h/T⌋ = 2 regions
// (h = t/D·⌊m/b⌋): the model then needs ⌈R/2⌉ = 2 workers, and the operator
// writes them through /scale. When the client stops, the measured demand drops to 0 and, after
// the 15 s scale-down window, the pool shrinks to minReplicas = 1 (workers
// drain in preStop). Every compaction the client asked for must succeed and
// every acknowledged write read back.
func autoscalingScenario(t *testing.T, e *env, kv *kvClient, l *ledger) {
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	e.patchPool(t, ctx, `{"spec":{"cacheBytes":"1Mi","transferRateBytesPerSecond":20000,"minReplicas":1,"maxReplicas":3,"autoscaling":{"mode":"Model","syncPeriod":"5s","scaleUpStabilizationWindow":"0s","scaleDownStabilizationWindow":"15s"}}}`)
	// idle: the model brings the pool down to minReplicas
	e.awaitPool(t, "the idle pool at minReplicas", func(p *kvapi.CompactionPool) bool { return ptr.Deref(p.Spec.Replicas, 0) == 1 })
	e.awaitWorkers(t, 1)

	d := startDemand(t, ctx, kv, l, "s")
	grown := e.sizeCacheUntilGrown(t, "the model to grow the pool to 2 or more workers", nil)
	t.Logf("grown to %d workers", ptr.Deref(grown.Spec.Replicas, 0))
	if a := grown.Status.Autoscaler; a != nil {
		t.Logf("model inputs %+v, outputs %+v", a.Inputs, a.Outputs)
	}
	// The demand keeps running until the workers are up, and the measured T
	// and w drift with it, so the model may grow the pool further meanwhile:
	// wait for every worker of the grown pool, however many, to be Ready.
	e.awaitWorkersWhere(t, "every worker of the grown pool (2 or more) Ready", func(spec int32) bool { return spec >= 2 })
	// The operator restarts while a compaction is between a store and a
	// worker, and it must finish (failed stays 0). The merge itself takes
	// tens of milliseconds, too short to be seen by polling; the job's
	// output, which the worker keeps until the store has warmed from it (at
	// w = 20 kB/s, tens of seconds), is not: a worker's cache holds a job's
	// reservation or its output.
	eventually(t, time.Minute, "a compaction between a store and a worker", func(ctx context.Context) (bool, string, error) {
		s, err := e.scrapeAll(t, ctx, contract.ComponentCompactor, poolName)
		if err != nil {
			return false, "", err
		}
		n, used := s.sum("bellows_compactor_inflight_jobs"), s.sum("bellows_compactor_cache_used_bytes")
		return n > 0 || used > 0, fmt.Sprintf("%v jobs running, %v bytes of jobs and outputs held", n, used), nil
	})
	e.restartOperator(t, ctx, "while a worker runs a compaction")
	// And again in the middle of the scale-down: the pool's size has come
	// down, and the Deployment still runs (drains) the removed workers. The
	// grown size is read while the demand still runs: once it stops, the
	// scale-down can begin (and end) within one stabilization window (15 s),
	// sooner than the compactions in flight return, so the demand's
	// goroutines are awaited only after the restart (they keep compacting
	// through it).
	grownTo := ptr.Deref(e.awaitPool(t, "the grown pool", func(*kvapi.CompactionPool) bool { return true }).Spec.Replicas, 0)
	d.stopIssuing()
	e.awaitPool(t, fmt.Sprintf("the scale-down from %d to begin", grownTo), func(p *kvapi.CompactionPool) bool {
		return ptr.Deref(p.Spec.Replicas, 0) < grownTo || grownTo <= 1
	})
	e.restartOperator(t, ctx, "in the middle of the scale-down")
	d.wait()
	shrunk := e.awaitPool(t, "the pool to shrink back without demand", func(p *kvapi.CompactionPool) bool { return ptr.Deref(p.Spec.Replicas, 0) == 1 })
	t.Logf("shrunk: %s", meta.FindStatusCondition(shrunk.Status.Conditions, kvapi.ConditionScalingActive).Message)
	e.awaitWorkers(t, 1)
	d.check(t)
	verifyLedger(t, ctx, kv, l)
}

// demand raises compaction demand the realistic way: a client keeps
// writing and asks for a major compaction of one region every 2 s, each of
// about 300 kB of incompressible data (written first, with prefix).
type demand struct {
	stop              chan struct{}
	wg                sync.WaitGroup
	requested, failed atomic.Int64
	firstErr          atomic.Value
}

func startDemand(t *testing.T, ctx context.Context, kv *kvClient, l *ledger, prefix string) *demand {
	t.Helper()
	writeRandom(t, ctx, kv, l, prefix, 300, 4000) // ~300 kB per region
	regions := flushAll(t, ctx, kv)
	d := &demand{stop: make(chan struct{})}
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		tick := time.NewTicker(2 * time.Second)
		defer tick.Stop()
		busy := make([]atomic.Bool, len(regions))
		for i := 0; ; i++ {
			select {
			case <-d.stop:
				return
			case <-tick.C:
			}
			idx := i % len(regions)
			if !busy[idx].CompareAndSwap(false, true) {
				continue
			}
			d.wg.Add(1)
			go func(r route, i int) {
				defer d.wg.Done()
				defer busy[idx].Store(false)
				// a little new data, flushed, then the major compaction
				key, val := keyFor(fmt.Sprintf("%s%d", prefix, i), i), []byte(fmt.Sprintf("demand-%d", i))
				if _, err := kv.Put(ctx, key, val); err == nil {
					l.ack(key, val)
				}
				d.requested.Add(1)
				if _, err := compact(ctx, kv, r); err != nil {
					d.failed.Add(1)
					d.firstErr.CompareAndSwap(nil, fmt.Sprintf("compact %s: %v", r.region, err))
				}
			}(regions[idx], i)
		}
	}()
	return d
}

// stopIssuing stops asking for compactions; those in flight go on.
func (d *demand) stopIssuing() { close(d.stop) }

// wait waits for the compactions in flight.
func (d *demand) wait() { d.wg.Wait() }

// check: every compaction asked for succeeded.
func (d *demand) check(t *testing.T) {
	t.Helper()
	t.Logf("%d compactions requested, %d failed", d.requested.Load(), d.failed.Load())
	if d.failed.Load() > 0 {
		t.Errorf("%d compactions failed, first: %v", d.failed.Load(), d.firstErr.Load())
	}
}

// sizeCacheUntilGrown sizes the pool's cache m to the measured load until
// the pool's spec.replicas is 2 or more (written by the operator in Model
// mode, by an HPA in External mode); each poll also runs check, if set.
// Once the model has measured c, w, b and T, it chooses m so that
// l = ⌊m/b⌋ makes one worker handle h/T ≈ 2 regions (h = t/D·l,
// D = b/c + b/w): the model then needs ⌈R/2⌉ = 2 workers. The measurements
// drift while the demand runs (T is a rate over a growing window, w a
// measured rate), so m follows them until the pool has grown: the test
// plays the operator who sizes the pool's memory.
func (e *env) sizeCacheUntilGrown(t *testing.T, what string, check func(*kvapi.CompactionPool) error) kvapi.CompactionPool {
	t.Helper()
	sizeFor := func(in kvapi.ModelInputs) (m int64, ok bool, what string) {
		b, c, w, T := num(in.CompactionSizeBytes), num(in.CompactionRateBytesPerSecond), num(in.TransferRateBytesPerSecond), num(in.CompactionsPerRegion)
		if b <= 0 || c <= 0 || w <= 0 || T <= 0 || in.IntervalSeconds <= 0 {
			return 0, false, fmt.Sprintf("not measured yet: %+v", in)
		}
		D := b/c + b/w
		lw := math.Max(1, math.Floor(2*T*D/float64(in.IntervalSeconds)))
		m = int64(lw*b) + int64(b/20)
		return m, true, fmt.Sprintf("b=%.0f B, c=%.0f B/s, w=%.0f B/s, T=%.1f per region per %ds: D=%.1fs; m=%d gives l=%.0f", b, c, w, T, in.IntervalSeconds, D, m, lw)
	}
	var grown kvapi.CompactionPool
	var sized int64
	eventually(t, 4*time.Minute, what, func(ctx context.Context) (bool, string, error) {
		if err := e.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: poolName}, &grown); err != nil {
			return false, "", err
		}
		if check != nil {
			if err := check(&grown); err != nil {
				t.Fatal(err)
			}
		}
		if ptr.Deref(grown.Spec.Replicas, 0) >= 2 {
			return true, "", nil
		}
		if grown.Status.Autoscaler == nil {
			return false, "no evaluation yet", nil
		}
		m, ok, what := sizeFor(grown.Status.Autoscaler.Inputs)
		if ok && (sized == 0 || math.Abs(float64(m-sized)) > 0.1*float64(sized)) {
			t.Logf("measured %s", what)
			e.patchPool(t, ctx, fmt.Sprintf(`{"spec":{"cacheBytes":"%d"}}`, m))
			sized = m
		}
		return false, fmt.Sprintf("replicas %d; %s", ptr.Deref(grown.Spec.Replicas, 0), what), nil
	})
	return grown
}

// awaitPool waits for cond on the CompactionPool, with ScalingActive true.
func (e *env) awaitPool(t *testing.T, what string, cond func(*kvapi.CompactionPool) bool) *kvapi.CompactionPool {
	t.Helper()
	var pool kvapi.CompactionPool
	eventually(t, 3*time.Minute, what, func(ctx context.Context) (bool, string, error) {
		if err := e.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: poolName}, &pool); err != nil {
			return false, "", err
		}
		sa := meta.FindStatusCondition(pool.Status.Conditions, kvapi.ConditionScalingActive)
		st := fmt.Sprintf("replicas %d", ptr.Deref(pool.Spec.Replicas, 0))
		if sa != nil {
			st += fmt.Sprintf("; ScalingActive=%s %s: %s", sa.Status, sa.Reason, sa.Message)
		}
		if a := pool.Status.Autoscaler; a != nil {
			st += fmt.Sprintf("; inputs %+v", a.Inputs)
		}
		return cond(&pool) && sa != nil && sa.Status == metav1.ConditionTrue, st, nil
	})
	return &pool
}

func num(s string) float64 {
	f, _ := strconv.ParseFloat(s, 64)
	return f
}
