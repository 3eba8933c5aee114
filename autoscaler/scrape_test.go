package autoscaler

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestParseMetricsSumsSeries(t *testing.T) {
	m, err := ParseMetrics(strings.NewReader(`# TYPE bellows_compactions_total counter
bellows_compactions_total{location="local",result="success"} 3
bellows_compactions_total{location="remote",result="success"} 4
# TYPE bellows_compaction_queue_depth gauge
bellows_compaction_queue_depth 2
`))
	if err != nil {
		t.Fatal(err)
	}
	if m["bellows_compactions_total"] != 7 || m["bellows_compaction_queue_depth"] != 2 {
		t.Fatalf("got %v", m)
	}
	if _, err := ParseMetrics(strings.NewReader("not metrics {")); err == nil {
		t.Fatal("want a parse error")
	}
}

// TestScraperObserve serves a worker's and a store's /metrics over HTTP and
// checks that two scrapes give c, w, b, the request rate and the backlog.
func TestScraperObserve(t *testing.T) {
	var requested atomic.Int64
	// The worker's transfer counters: bytes streamed and seconds spent.
	var tBytes, tMillis atomic.Int64
	worker := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintf(w, `# TYPE bellows_compactor_inflight_jobs gauge
bellows_compactor_inflight_jobs 2
# TYPE bellows_compactor_compaction_rate_bytes_per_second gauge
bellows_compactor_compaction_rate_bytes_per_second 2e+07
# TYPE bellows_compactor_transfer_bytes_total counter
bellows_compactor_transfer_bytes_total %d
# TYPE bellows_compactor_transfer_seconds_total counter
bellows_compactor_transfer_seconds_total %g
`, tBytes.Load(), float64(tMillis.Load())/1000)
	}))
	defer worker.Close()
	store := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		n := requested.Load()
		fmt.Fprintf(w, `# TYPE bellows_compaction_requested_total counter
bellows_compaction_requested_total %d
# TYPE bellows_compaction_requested_bytes_total counter
bellows_compaction_requested_bytes_total %d
# TYPE bellows_compaction_queue_depth gauge
bellows_compaction_queue_depth 3
# TYPE bellows_compaction_debt_bytes gauge
bellows_compaction_debt_bytes 9e+09
# TYPE bellows_compaction_oldest_wait_seconds gauge
bellows_compaction_oldest_wait_seconds 75.5
`, n, n*4_000_000_000)
	}))
	defer store.Close()

	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	s := &Scraper{Now: func() time.Time { return now }}
	targets := Targets{
		Pool:    "ns/pool",
		Workers: []Endpoint{{Pod: "w-0", URL: worker.URL + "/metrics"}, {Pod: "w-gone", URL: "http://127.0.0.1:1/metrics"}},
		Stores:  []Endpoint{{Pod: "s-0", URL: store.URL + "/metrics"}},
	}
	requested.Store(10)
	obs, err := s.Observe(context.Background(), targets)
	if err != nil {
		t.Fatal(err)
	}
	if obs.DemandMeasured {
		t.Fatal("one scrape cannot measure a rate")
	}
	if obs.CompactionRate != 20e6 || obs.TransferRate != 0 || obs.Queued != 3 || obs.InflightJobs["w-0"] != 2 ||
		obs.DebtBytes != 9e9 || obs.OldestWait != 75500*time.Millisecond {
		t.Fatalf("first observation: %+v", obs)
	}
	if _, ok := obs.InflightJobs["w-gone"]; ok {
		t.Fatal("an unreachable worker has no in-flight count")
	}

	requested.Store(16)
	// Meanwhile one output of 4 GB streamed at 8 MB/s (500 s), and one
	// remote-cache fetch of a 4 KB block took 10 ms (400 KB/s as a rate
	// of its own): w weighs each by its bytes.
	tBytes.Store(4_000_000_000 + 4_000)
	tMillis.Store(500_000 + 10)
	now = now.Add(time.Hour)
	obs, err = s.Observe(context.Background(), targets)
	if err != nil {
		t.Fatal(err)
	}
	if !obs.DemandMeasured || obs.CompactionSize != 4e9 || obs.RequestRate != 6.0/3600 {
		t.Fatalf("second observation: %+v", obs)
	}
	if w := obs.TransferRate; w < 7.99e6 || w > 8e6 {
		t.Fatalf("w = %v, want ≈ 8e6 (bytes over streaming seconds)", w)
	}
	// Nothing streamed since: w is not measured (the operator keeps its
	// last value), not 0 bytes/s.
	now = now.Add(time.Hour)
	if obs, _ = s.Observe(context.Background(), targets); obs.TransferRate != 0 {
		t.Fatalf("w = %v with nothing streamed, want 0 (not measured)", obs.TransferRate)
	}
}

// TestScraperBadValues: a NaN or infinite value of a metric the autoscaler
// reads is an error for that pod (skipped, like an unreachable one), never a
// number; NaN elsewhere in the exposition does not matter.
func TestScraperBadValues(t *testing.T) {
	serve := func(body string) *httptest.Server {
		return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, body) }))
	}
	good := serve(`# TYPE bellows_compactor_inflight_jobs gauge
bellows_compactor_inflight_jobs 2
# TYPE bellows_compactor_compaction_rate_bytes_per_second gauge
bellows_compactor_compaction_rate_bytes_per_second 2e+07
# TYPE some_other_ratio gauge
some_other_ratio NaN
`)
	defer good.Close()
	nanInflight := serve(`# TYPE bellows_compactor_inflight_jobs gauge
bellows_compactor_inflight_jobs NaN
`)
	defer nanInflight.Close()
	infRate := serve(`# TYPE bellows_compactor_compaction_rate_bytes_per_second gauge
bellows_compactor_compaction_rate_bytes_per_second +Inf
`)
	defer infRate.Close()
	nanStore := serve(`# TYPE bellows_compaction_requested_total counter
bellows_compaction_requested_total NaN
`)
	defer nanStore.Close()

	s := &Scraper{}
	obs, err := s.Observe(context.Background(), Targets{Pool: "ns/p",
		Workers: []Endpoint{{Pod: "good", URL: good.URL}, {Pod: "nan", URL: nanInflight.URL}, {Pod: "inf", URL: infRate.URL}},
		Stores:  []Endpoint{{Pod: "s", URL: nanStore.URL}},
	})
	if err != nil {
		t.Fatalf("one pod answered well: %v", err)
	}
	if want := map[string]float64{"good": 2}; !reflect.DeepEqual(obs.InflightJobs, want) {
		t.Errorf("in-flight jobs %v, want %v: pods with bad values have none", obs.InflightJobs, want)
	}
	if obs.CompactionRate != 2e7 {
		t.Errorf("compaction rate %v, want the good worker's 2e7", obs.CompactionRate)
	}

	// Every pod bad: the error says which metric of which pod.
	_, err = s.Observe(context.Background(), Targets{Pool: "ns/q", Workers: []Endpoint{{Pod: "nan", URL: nanInflight.URL}}, Stores: []Endpoint{{Pod: "s", URL: nanStore.URL}}})
	if !errors.Is(err, ErrBadValue) {
		t.Fatalf("want ErrBadValue, got %v", err)
	}
	want := "worker nan: bellows_compactor_inflight_jobs is NaN: not a finite number\nstore s: bellows_compaction_requested_total is NaN: not a finite number"
	if err.Error() != want {
		t.Errorf("error %q, want %q", err, want)
	}
}

func TestScraperAllDown(t *testing.T) {
	s := &Scraper{}
	_, err := s.Observe(context.Background(), Targets{Pool: "ns/p", Workers: []Endpoint{{Pod: "w", URL: "http://127.0.0.1:1/metrics"}}})
	if err == nil || !strings.Contains(err.Error(), "worker w") {
		t.Fatalf("want an error naming the pod, got %v", err)
	}
}

func TestDemandBetweenCounterReset(t *testing.T) {
	t0 := time.Unix(0, 0)
	rate, size, ok := DemandBetween(t0, map[string]float64{"a": 10, "b": 5}, map[string]float64{"a": 100, "b": 50},
		t0.Add(10*time.Second), map[string]float64{"a": 12, "b": 1}, map[string]float64{"a": 120, "b": 10})
	if !ok || rate != 0.2 || size != 10 {
		t.Fatalf("got rate %v size %v ok %v; a restarted pod must not count", rate, size, ok)
	}
}

// R is live: each cluster's region count is the most any of its stores
// reports (one that has not seen the newest map reports fewer), and a
// cluster whose stores report none counts what its spec or status says.
func TestScraperReadsTheLiveRegionCount(t *testing.T) {
	serve := func(regions int) *httptest.Server {
		return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			fmt.Fprintf(w, "# TYPE bellows_compaction_requested_total counter\nbellows_compaction_requested_total 1\n"+
				"# TYPE bellows_compaction_requested_bytes_total counter\nbellows_compaction_requested_bytes_total 1\n"+
				"# TYPE bellows_compaction_queue_depth gauge\nbellows_compaction_queue_depth 0\n"+
				"# TYPE bellows_cluster_regions gauge\nbellows_cluster_regions %d\n", regions)
		}))
	}
	a0, a1, b0 := serve(9), serve(7), serve(0)
	defer a0.Close()
	defer a1.Close()
	defer b0.Close()
	targets := Targets{Pool: "ns/pool", Stores: []Endpoint{
		{Pod: "a-0", Cluster: "ns/a", URL: a0.URL}, {Pod: "a-1", Cluster: "ns/a", URL: a1.URL},
		{Pod: "b-0", Cluster: "ns/b", URL: b0.URL},
	}, RegionCounts: map[string]int32{"ns/a": 1, "ns/b": 4}}
	obs, err := (&Scraper{}).Observe(context.Background(), targets)
	if err != nil {
		t.Fatal(err)
	}
	if got := obs.ClusterRegions["ns/a"]; got != 9 {
		t.Fatalf("cluster a reports %v regions, want its stores' largest, 9", got)
	}
	if got := LiveRegions(targets.RegionCounts, obs.ClusterRegions); got != 9+4 {
		t.Fatalf("R = %d, want 9 (a's stores) + 4 (b's spec: its stores report none)", got)
	}
}
