//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	kvapi "github.com/bellows-kv/bellows/api/v1alpha1"
	"github.com/bellows-kv/bellows/internal/contract"
	kvpb "github.com/bellows-kv/bellows/proto/bellows/kv/v1"
)

// outageGoal is the goal for the longest time a region answers no
// probe while it moves, on top of the time its flush takes.
const outageGoal = 2 * time.Second

// moveRecorder keeps what a client saw while regions moved: every failed
// attempt by code, and per region the longest stretch without a successful
// probe.
type moveRecorder struct {
	mu        sync.Mutex
	failures  map[codes.Code]int
	examples  map[codes.Code]string
	lastOK    map[string]time.Time
	longest   map[string]time.Duration
	longestAt map[string]time.Time
}

func newMoveRecorder() *moveRecorder {
	return &moveRecorder{failures: map[codes.Code]int{}, examples: map[codes.Code]string{},
		lastOK: map[string]time.Time{}, longest: map[string]time.Duration{}, longestAt: map[string]time.Time{}}
}

func (m *moveRecorder) fail(what string, err error) {
	c := status.Code(err)
	m.mu.Lock()
	defer m.mu.Unlock()
	m.failures[c]++
	if _, ok := m.examples[c]; !ok {
		m.examples[c] = fmt.Sprintf("%s: %v", what, err)
	}
}

// checkCodes logs the failed attempts by code and fails t for any code
// other than the two a move causes and a client retries, UNAVAILABLE and
// DEADLINE_EXCEEDED.
func (m *moveRecorder) checkCodes(t *testing.T) {
	t.Helper()
	m.mu.Lock()
	var seen []string
	bad := 0
	for c, n := range m.failures {
		seen = append(seen, fmt.Sprintf("%s=%d (e.g. %s)", c, n, m.examples[c]))
		if c != codes.Unavailable && c != codes.DeadlineExceeded {
			bad += n
		}
	}
	m.mu.Unlock()
	sort.Strings(seen)
	t.Logf("failed attempts by code: %s", strings.Join(seen, "; "))
	if bad > 0 {
		t.Errorf("%d attempts failed with a code a client cannot retry: %s", bad, strings.Join(seen, "; "))
	}
}

func (m *moveRecorder) ok(region string, at time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if last, ok := m.lastOK[region]; ok {
		if gap := at.Sub(last); gap > m.longest[region] {
			m.longest[region], m.longestAt[region] = gap, at
		}
	}
	m.lastOK[region] = at
}

// 12. Regions move between stores in about a second: the KVCluster scales
// 3 → 2 → 3 under a write load through the client Service, with offloaded
// major compactions running back to back, and a probe of every region every
// 250 ms. Every acknowledged write reads back and no attempt fails with a
// code other than UNAVAILABLE or DEADLINE_EXCEEDED (asserted); the longest
// outage of any region is reported against the goal of 2 s plus the
// region's flush time.
func (e *env) regionMoves(t *testing.T, kv *kvClient, l *ledger) {
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()
	kvc := &kvapi.KVCluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: clusterName}}
	scale := func(n int32) {
		t.Helper()
		if err := e.c.Patch(ctx, kvc, client.RawPatch("application/merge-patch+json", []byte(fmt.Sprintf(`{"spec":{"replicas":%d}}`, n)))); err != nil {
			t.Fatal(err)
		}
		eventually(t, 5*time.Minute, fmt.Sprintf("%d storage pods Ready and the KVCluster Ready", n), func(ctx context.Context) (bool, string, error) {
			if err := e.c.Get(ctx, client.ObjectKeyFromObject(kvc), kvc); err != nil {
				return false, "", err
			}
			ready := 0
			for _, p := range e.pods(t, contract.ComponentStore, clusterName) {
				if podReady(&p) && p.DeletionTimestamp == nil {
					ready++
				}
			}
			r := meta.FindStatusCondition(kvc.Status.Conditions, kvapi.ConditionReady)
			return int32(ready) == n && kvc.Status.ReadyReplicas == n && r != nil && r.Status == metav1.ConditionTrue && r.ObservedGeneration == kvc.Generation,
				fmt.Sprintf("%d pods Ready, status %d ready, %s", ready, kvc.Status.ReadyReplicas, condString(r)), nil
		})
	}
	scale(3) // the samples run 2 stores

	var svc corev1.Service
	if err := e.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: clusterName}, &svc); err != nil {
		t.Fatal(err)
	}
	conn, err := kv.conn(ctx, fmt.Sprintf("%s:%d", svc.Spec.ClusterIP, contract.StoreGRPCPort))
	if err != nil {
		t.Fatal(err)
	}
	svcKV := kvpb.NewKVClient(conn)
	// Every region served by exactly one store: while a region is handed to
	// a new store, both list it (the new one as waiting to claim it).
	var routes []route
	eventually(t, time.Minute, "each of the 4 regions listed by one store", func(ctx context.Context) (bool, string, error) {
		r, err := kv.Regions(ctx)
		if err != nil {
			return false, "", err
		}
		names := map[string]bool{}
		for _, x := range r {
			names[x.region] = true
		}
		routes = r
		return len(r) == 4 && len(names) == 4, fmt.Sprintf("%d routes for %d regions", len(r), len(names)), nil
	})

	// The flush time a region's move may add: a flush of each region under
	// the same load, measured now.
	var flushBound time.Duration
	for _, r := range routes {
		start := time.Now()
		if err := kv.Admin(ctx, r, func(ctx context.Context, a kvpb.AdminClient) error {
			_, err := a.Flush(ctx, &kvpb.FlushRequest{Region: r.region})
			return err
		}); err != nil {
			t.Fatalf("flush %s: %v", r.region, err)
		}
		flushBound = max(flushBound, time.Since(start))
	}

	rec := newMoveRecorder()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var writes, compactions atomic.Int64
	// Writers: one attempt at a time through the client Service (which
	// forwards to the owner), retried by the test; a write is acknowledged
	// only by a successful answer.
	for w := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				key := keyFor(fmt.Sprintf("move%d", w), i)
				val := []byte(fmt.Sprintf("move-%d-%d", w, i))
				for {
					select {
					case <-stop:
						return
					default:
					}
					actx, acancel := context.WithTimeout(ctx, 2*time.Second)
					_, err := svcKV.Put(actx, &kvpb.PutRequest{Key: key, Value: val})
					acancel()
					if err == nil {
						l.ack(key, val)
						writes.Add(1)
						break
					}
					rec.fail("put", err)
					time.Sleep(50 * time.Millisecond) // pacing between attempts, not synchronization
				}
			}
		}()
	}
	// Probes: a get of a key of every region through the client Service
	// every 250 ms.
	for _, r := range routes {
		key := append(append([]byte(nil), r.start...), "\x00probe"...)
		wg.Add(1)
		go func() {
			defer wg.Done()
			tick := time.NewTicker(250 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case <-stop:
					return
				case <-tick.C:
				}
				actx, acancel := context.WithTimeout(ctx, time.Second)
				_, err := svcKV.Get(actx, &kvpb.GetRequest{Key: key})
				acancel()
				if err != nil {
					rec.fail("probe "+r.region, err)
					continue
				}
				rec.ok(r.region, time.Now())
			}
		}()
	}
	// Back-to-back offloaded major compactions, region after region.
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			r := routes[i%len(routes)]
			cctx, ccancel := context.WithTimeout(ctx, time.Minute)
			if _, err := compact(cctx, kv, r); err == nil {
				compactions.Add(1)
			}
			ccancel()
		}
	}()

	eventually(t, time.Minute, "the workload and the probes to get going", func(context.Context) (bool, string, error) {
		rec.mu.Lock()
		probed := len(rec.lastOK)
		rec.mu.Unlock()
		return writes.Load() >= 20 && probed == len(routes), fmt.Sprintf("%d writes, %d/%d regions probed", writes.Load(), probed, len(routes)), nil
	})
	began := time.Now()
	scale(2)
	scale(3)
	target := writes.Load() + 20
	eventually(t, time.Minute, "writes after the moves", func(context.Context) (bool, string, error) {
		return writes.Load() >= target, fmt.Sprintf("%d writes", writes.Load()), nil
	})
	close(stop)
	wg.Wait()

	rec.mu.Lock()
	var worst time.Duration
	var lines []string
	for _, r := range routes {
		d := rec.longest[r.region]
		worst = max(worst, d)
		lines = append(lines, fmt.Sprintf("%s %v (ending %v after the first scale)", r.region, d.Round(10*time.Millisecond), rec.longestAt[r.region].Sub(began).Round(time.Second)))
	}
	rec.mu.Unlock()
	t.Logf("3 → 2 → 3 stores: %d acknowledged writes, %d offloaded compactions; flush time %v", writes.Load(), compactions.Load(), flushBound.Round(10*time.Millisecond))
	t.Logf("longest outage per region: %s", strings.Join(lines, "; "))
	rec.checkCodes(t)
	// The outage is a timing: reported against its goal, not asserted
	// (timings belong in benchmarks; the machines are shared and noisy).
	// What keeps it short: the stores read the replica count from their
	// StatefulSet (--replicas-from) and are re-assigned live, so a replica
	// change restarts no store and only the regions whose owner changes move,
	// each by release and claim.
	verdict := "goal met"
	if worst > outageGoal+flushBound {
		verdict = "GOAL MISSED"
	}
	t.Logf("%s: longest outage of any region %v; goal %v plus its flush (%v)", verdict, worst.Round(10*time.Millisecond), outageGoal, flushBound.Round(10*time.Millisecond))
	verifyLedger(t, ctx, kv, l)
}
