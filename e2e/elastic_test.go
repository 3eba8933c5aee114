//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kvapi "github.com/bellows-kv/bellows/api/v1alpha1"
	"github.com/bellows-kv/bellows/internal/contract"
	kvpb "github.com/bellows-kv/bellows/proto/bellows/kv/v1"
)

const (
	elasticName = "elastic"
	// elasticSplit is the elastic cluster's split size, and its balance
	// floor: a store is out of balance only by more than
	// max(15% of the mean, this).
	elasticSplit = 2 << 20
	// elasticLoad is what the load writes: incompressible values, so the
	// stores' bytes are about this, some 12 to 24 regions.
	elasticLoad = 24 << 20
)

// storeSpread is what the stores of a cluster serve, read from every
// store's Regions: bytes and regions per pod, open regions only.
type storeSpread struct {
	bytes   map[string]int64
	regions map[string]int
	// waiting are the regions a store is assigned but has not opened,
	// with why.
	waiting []string
}

func spreadOf(routes []route, pods []string) storeSpread {
	s := storeSpread{bytes: map[string]int64{}, regions: map[string]int{}}
	for _, p := range pods {
		s.bytes[p], s.regions[p] = 0, 0
	}
	for _, r := range routes {
		if r.waiting != "" {
			s.waiting = append(s.waiting, fmt.Sprintf("%s at %s (%s)", r.region, r.pod, r.waiting))
			continue
		}
		s.bytes[r.pod] += r.bytes
		s.regions[r.pod]++
	}
	return s
}

// balanced: every store holds a region and is within the balancer's
// promise of the mean, max(15%, elasticSplit).
func (s storeSpread) balanced() bool {
	var total int64
	for _, b := range s.bytes {
		total += b
	}
	mean := float64(total) / float64(len(s.bytes))
	for p, b := range s.bytes {
		if s.regions[p] == 0 || math.Abs(float64(b)-mean) > max(contract.DefaultBalanceTolerance*mean, elasticSplit) {
			return false
		}
	}
	return len(s.waiting) == 0
}

func (s storeSpread) String() string {
	var parts []string
	for p, b := range s.bytes {
		parts = append(parts, fmt.Sprintf("%s %d regions %.1f MiB", p, s.regions[p], float64(b)/(1<<20)))
	}
	sort.Strings(parts)
	if len(s.waiting) > 0 {
		parts = append(parts, "not open yet: "+strings.Join(s.waiting, ", "))
	}
	return strings.Join(parts, "; ")
}

// 13. Elastic regions (#26): a KVCluster that starts with one region on 3
// stores, loaded through its client Service, splits as it grows and the
// balancer spreads its regions over the 3 stores; scaled to 5, regions move
// onto the new stores; scaled back to 3, the operator drains the leaving
// stores first (its Drained event), and their regions go to the others. Writers run through the client Service the whole time: every
// acknowledged write reads back, and no attempt fails with a code other
// than UNAVAILABLE or DEADLINE_EXCEEDED (the retryable codes of a move).
func (e *env) elasticRegions(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	var demo kvapi.KVCluster
	if err := e.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: clusterName}, &demo); err != nil {
		t.Fatal(err)
	}
	ec := &kvapi.KVCluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: elasticName}, Spec: *demo.Spec.DeepCopy()}
	ec.Spec.Replicas = 3
	ec.Spec.CompactionPoolRef = nil
	ec.Spec.Engine.Offload = "Disabled"
	ec.Spec.Regions = kvapi.RegionsSpec{
		SplitBytes:      ptr.To(resource.MustParse(fmt.Sprint(elasticSplit))),
		BalanceMinBytes: ptr.To(resource.MustParse(fmt.Sprint(elasticSplit))),
	}
	ec.Spec.Bucket.URL = otherBucket(t, demo.Spec.Bucket.URL, "bellows-e2e-elastic")
	if err := e.c.Create(ctx, ec); err != nil {
		t.Fatal(err)
	}
	defer e.deleteCluster(t, elasticName)
	e.waitClusterReady(t, elasticName, 5*time.Minute)
	kv := newKVClient(e.c, ns, elasticName)
	defer kv.Close()
	l := newLedger()
	routes, err := kv.Regions(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(routes) != 1 {
		t.Fatalf("a new KVCluster without count or splitKeys serves %d regions, want 1: %v", len(routes), routes)
	}

	var svc corev1.Service
	if err := e.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: elasticName}, &svc); err != nil {
		t.Fatal(err)
	}
	conn, err := kv.conn(ctx, fmt.Sprintf("%s:%d", svc.Spec.ClusterIP, contract.StoreGRPCPort))
	if err != nil {
		t.Fatal(err)
	}
	svcKV := kvpb.NewKVClient(conn)
	rec := newMoveRecorder()
	// put writes one key through the client Service until acknowledged.
	put := func(key, val []byte) bool {
		for ctx.Err() == nil {
			actx, acancel := context.WithTimeout(ctx, 5*time.Second)
			_, err := svcKV.Put(actx, &kvpb.PutRequest{Key: key, Value: val})
			acancel()
			if err == nil {
				l.ack(key, val)
				return true
			}
			rec.fail("put", err)
			time.Sleep(50 * time.Millisecond) // pacing between attempts, not synchronization
		}
		return false
	}

	// The load: keys as a user writes them (user<writer>-<n>, in order), so
	// without splits they would all land in the one region.
	const writers, valueBytes = 3, 4 << 10
	var loaded atomic.Int64
	var wg sync.WaitGroup
	began := time.Now()
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rnd := rand.New(rand.NewPCG(uint64(w), 1))
			val := make([]byte, valueBytes)
			for i := 0; loaded.Load() < elasticLoad; i++ {
				for j := range val {
					val[j] = byte(rnd.Uint32())
				}
				if !put(fmt.Appendf(nil, "user%d-%08d", w, i), val) {
					return
				}
				loaded.Add(valueBytes)
			}
		}()
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		t.Fatalf("the load did not finish: %v", err)
	}
	t.Logf("loaded %d MiB through the client Service in %v", loaded.Load()>>20, time.Since(began).Round(time.Second))

	// Then a trickle of small writes through the scaling, whose attempts
	// are recorded.
	stop := make(chan struct{})
	var trickled atomic.Int64
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			// Keys of every writer's range, so every region is written.
			if put(fmt.Appendf(nil, "user%d-%08d-t", i%writers, (i*7919)%(elasticLoad/valueBytes/writers)), fmt.Appendf(nil, "trickle-%d", i)) {
				trickled.Add(1)
			}
		}
	}()
	defer func() {
		select {
		case <-stop:
		default:
			close(stop)
		}
		wg.Wait()
	}()

	pods := func(n int) []string {
		var out []string
		for i := range n {
			out = append(out, fmt.Sprintf("%s-%d", elasticName, i))
		}
		return out
	}
	var spread storeSpread
	settled := func(n int, what string, extra func(storeSpread) bool) {
		t.Helper()
		start := time.Now()
		eventually(t, 4*time.Minute, what, func(ctx context.Context) (bool, string, error) {
			routes, err := kv.Regions(ctx)
			if err != nil {
				return false, "", err
			}
			spread = spreadOf(routes, pods(n))
			for _, r := range routes {
				if _, ours := spread.bytes[r.pod]; !ours {
					return false, fmt.Sprintf("%s still serves %s; %s", r.pod, r.region, spread), nil
				}
			}
			return spread.balanced() && (extra == nil || extra(spread)), spread.String(), nil
		})
		t.Logf("%s after %v: %s", what, time.Since(start).Round(time.Second), spread)
	}
	regionCount := func(s storeSpread) int {
		n := 0
		for _, c := range s.regions {
			n += c
		}
		return n
	}
	settled(3, "the one region split and spread over 3 stores", func(s storeSpread) bool { return regionCount(s) >= 8 })

	scale := func(n int32) {
		t.Helper()
		if err := e.c.Patch(ctx, ec, client.RawPatch("application/merge-patch+json", fmt.Appendf(nil, `{"spec":{"replicas":%d}}`, n))); err != nil {
			t.Fatal(err)
		}
		eventually(t, 5*time.Minute, fmt.Sprintf("%d storage pods of %s Ready", n, elasticName), func(ctx context.Context) (bool, string, error) {
			ready := 0
			for _, p := range e.pods(t, contract.ComponentStore, elasticName) {
				if podReady(&p) {
					ready++
				}
			}
			return ready == int(n), fmt.Sprintf("%d pods Ready", ready), nil
		})
		e.waitClusterReady(t, elasticName, 5*time.Minute)
	}
	scale(5)
	settled(5, "regions moved onto the 2 new stores", nil)
	drainBegan := time.Now()
	scale(3)
	// The operator drained the leaving stores before it removed them:
	// its Drained event says so (a timed-out drain says DrainTimedOut).
	eventually(t, time.Minute, "the operator's Drained event for the 5 → 3 scale-down", func(ctx context.Context) (bool, string, error) {
		var evs eventsv1.EventList
		if err := e.c.List(ctx, &evs, client.InNamespace(ns)); err != nil {
			return false, "", err
		}
		var seen []string
		for _, ev := range evs.Items {
			if ev.Regarding.UID != ec.UID {
				continue
			}
			switch ev.Reason {
			case kvapi.ReasonDrained:
				t.Logf("drained in %v: %s", time.Since(drainBegan).Round(time.Second), ev.Note)
				return true, "", nil
			case kvapi.ReasonDrainTimedOut:
				t.Fatalf("the drain timed out: %s", ev.Note)
			}
			seen = append(seen, ev.Reason)
		}
		return false, fmt.Sprintf("events of %s: %v", elasticName, seen), nil
	})
	settled(3, "the 2 leaving stores' regions on the 3 that stay", nil)

	target := trickled.Load() + 20
	eventually(t, time.Minute, "writes after the scaling", func(context.Context) (bool, string, error) {
		return trickled.Load() >= target, fmt.Sprintf("%d writes", trickled.Load()), nil
	})
	close(stop)
	wg.Wait()
	verifyLedger(t, ctx, kv, l)

	rec.checkCodes(t)
	s, err := e.scrapeAll(t, ctx, contract.ComponentStore, elasticName)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("the 3 stores running at the end count %v splits and %v moves", s.sum("bellows_region_splits_total"), s.sum("bellows_region_moves_total"))
}
