package controllers

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	kvapi "github.com/bellows-kv/bellows/api/v1alpha1"
	"github.com/bellows-kv/bellows/autoscaler"
	"github.com/bellows-kv/bellows/internal/contract"
)

// podPage is one pod's /metrics, built from the contract's metric names
// (the names the pods export), changed between scrapes by the test.
type podPage struct {
	mu      sync.Mutex
	metrics map[string]float64
	types   map[string]string
}

func (p *podPage) set(name, typ string, v float64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.metrics[name], p.types[name] = v, typ
}

func (p *podPage) add(name string, v float64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.metrics[name] += v
}

func (p *podPage) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for name, v := range p.metrics {
		fmt.Fprintf(w, "# TYPE %s %s\n%s %g\n", name, p.types[name], name, v)
	}
}

func newPodPage(t *testing.T) (*podPage, string) {
	p := &podPage{metrics: map[string]float64{}, types: map[string]string{}}
	srv := httptest.NewServer(p)
	t.Cleanup(srv.Close)
	return p, srv.URL + "/metrics"
}

// TestDecidePaperExampleFromScrapedMetrics runs the operator's whole input
// path on the paper's §6.3 example in a steady state: the pods' /metrics
// pages (c = 20 MB/s, w = 8 MB/s, b = 4 GB, 10 regions each requesting one
// compaction per hour, two workers busy with one job each) are scraped by
// the production Scraper, and Decide sizes the pool: 2 workers. Before the
// model's inputs were fixed the same state gave 3 (the two running jobs
// were counted as a backlog of 2, ⌈2/5.14⌉ = 1 more worker).
func TestDecidePaperExampleFromScrapedMetrics(t *testing.T) {
	workers := make([]*podPage, 2)
	stores := make([]*podPage, 2)
	targets := autoscaler.Targets{Pool: "ns/w"}
	for i := range workers {
		p, url := newPodPage(t)
		workers[i] = p
		targets.Workers = append(targets.Workers, autoscaler.Endpoint{Pod: fmt.Sprintf("w-%d", i), URL: url})
		p.set(contract.MetricCompactorInflight, "gauge", 1)
		p.set(contract.MetricCompactorRate, "gauge", 20e6)
		// The smoothed per-stream gauge is not what w is read from: a
		// one-block remote-cache fetch makes it a latency.
		p.set(contract.MetricCompactorTransferRate, "gauge", 0.4e6)
		p.set(contract.MetricCompactorTransferBytes, "counter", 1e12)
		p.set(contract.MetricCompactorTransferSeconds, "counter", 1.25e5)
	}
	for i := range stores {
		p, url := newPodPage(t)
		stores[i] = p
		targets.Stores = append(targets.Stores, autoscaler.Endpoint{Pod: fmt.Sprintf("s-%d", i), URL: url})
		p.set(contract.MetricCompactionRequested, "counter", 500)
		p.set(contract.MetricCompactionRequestedBytes, "counter", 500*4e9)
		// Running jobs are not queued; one job waits for a slot now and then.
		p.set(contract.MetricCompactionQueueDepth, "gauge", 1)
		p.set(contract.MetricCompactionPendingBytes, "gauge", 4e9)
	}
	// One hour of the steady state: each store's 5 regions request one
	// compaction of 4 GB; each worker streams 5 outputs back at 8 MB/s
	// (2500 s), plus a few one-block fetches of 4 KB that take 10 ms.
	hour := func() {
		for _, s := range stores {
			s.add(contract.MetricCompactionRequested, 5)
			s.add(contract.MetricCompactionRequestedBytes, 5*4e9)
		}
		for _, w := range workers {
			w.add(contract.MetricCompactorTransferBytes, 5*4e9+3*4e3)
			w.add(contract.MetricCompactorTransferSeconds, 2500+3*0.01)
		}
	}

	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	scraper := &autoscaler.Scraper{Now: func() time.Time { return now }}
	pool := decidePool(kvapi.AutoscalingModel)
	evaluate := func(transfers bool) Decision {
		t.Helper()
		obs, err := scraper.Observe(context.Background(), targets)
		if err != nil {
			t.Fatal(err)
		}
		d := Decide(pool, durationsOf(t, pool), obs, 10, transfers, now)
		pool.Status.Autoscaler = &d.Status
		return d
	}
	if d := evaluate(true); d.Active {
		t.Fatalf("one scrape measured a rate: %s", d.Message)
	}

	hour()
	now = now.Add(time.Hour)
	d := evaluate(true)
	if !d.Active || d.Desired == nil {
		t.Fatalf("no recommendation: %s: %s", d.Reason, d.Message)
	}
	in := d.Inputs
	if in.CompactionRate != 20e6 || in.TransferRate < 7.99e6 || in.TransferRate > 8e6 || in.CompactionSize != 4e9 ||
		in.CompactionsPerRegion < 0.999999 || in.CompactionsPerRegion > 1.000001 || in.Backlog != 0 {
		t.Fatalf("inputs %+v, want c=20e6 w≈8e6 b=4e9 T=1 backlog=0", in)
	}
	if d.Result.Workers != 2 || d.Result.BacklogWorkers != 0 || *d.Desired != 2 {
		t.Fatalf("the paper's example: %d+%d workers, desired %d; want 2 (%s)", d.Result.Workers, d.Result.BacklogWorkers, *d.Desired, d.Message)
	}

	// The same metrics where the stores fetch no output (warmup None,
	// Offload or WriteThrough): D = b/c = 200 s, h = 18, one worker.
	hour()
	now = now.Add(time.Hour)
	if d := evaluate(false); !d.Active || d.Result.D != 200 || d.Result.Workers != 1 {
		t.Fatalf("without transfer: D=%v workers %d, want 200 s and 1 (%s)", d.Result.D, d.Result.Workers, d.Message)
	}

	// The queue grows (6 compactions waiting where 2 were): the backlog
	// term drains it within one interval, ⌈6/5.14⌉ = 2 more workers.
	for _, s := range stores {
		s.set(contract.MetricCompactionQueueDepth, "gauge", 3)
	}
	hour()
	now = now.Add(time.Hour)
	if d := evaluate(true); !d.Active || d.Inputs.Backlog != 6 || d.Result.Total != 4 {
		t.Fatalf("growing queue: backlog %v, %d workers; want 6 and 4 (%s)", d.Inputs.Backlog, d.Result.Total, d.Message)
	}
}
