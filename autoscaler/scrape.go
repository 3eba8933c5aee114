package autoscaler

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"sync"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/bellows-kv/bellows/internal/contract"
)

// Metric names read from the pods: the contract's (the pods export them
// under these names; charts/dashboards_test checks both sides).
const (
	MetricCompactorInflight        = contract.MetricCompactorInflight
	MetricCompactorRate            = contract.MetricCompactorRate
	MetricCompactorTransferBytes   = contract.MetricCompactorTransferBytes
	MetricCompactorTransferSeconds = contract.MetricCompactorTransferSeconds
	MetricStoreRequested           = contract.MetricCompactionRequested
	MetricStoreRequestedBytes      = contract.MetricCompactionRequestedBytes
	MetricStoreQueueDepth          = contract.MetricCompactionQueueDepth
	MetricStorePendingBytes        = contract.MetricCompactionPendingBytes
	MetricStoreDebtBytes           = contract.MetricCompactionDebtBytes
	MetricStoreOldestWait          = contract.MetricCompactionOldestWait
)

// ErrBadValue marks a metric the autoscaler reads whose value is NaN or
// infinite: the pod that reported it is skipped like an unreachable one,
// rather than its value read as a number (a NaN in-flight count would become
// an arbitrary pod-deletion-cost, a NaN counter a NaN demand).
var ErrBadValue = errors.New("not a finite number")

// checkFinite returns an ErrBadValue error for the first of names whose
// value in m is NaN or infinite. A metric missing from m is not measured,
// which is not an error.
func checkFinite(m map[string]float64, names ...string) error {
	for _, n := range names {
		if v, ok := m[n]; ok && (math.IsNaN(v) || math.IsInf(v, 0)) {
			return fmt.Errorf("%s is %v: %w", n, v, ErrBadValue)
		}
	}
	return nil
}

// ParseMetrics parses the Prometheus text exposition format and sums every
// series of each metric (gauges and counters; other types are ignored).
func ParseMetrics(r io.Reader) (map[string]float64, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	families, err := p.TextToMetricFamilies(r)
	if err != nil {
		return nil, err
	}
	out := make(map[string]float64, len(families))
	for name, f := range families {
		var sum float64
		var any bool
		for _, m := range f.GetMetric() {
			switch f.GetType() {
			case dto.MetricType_GAUGE:
				sum += m.GetGauge().GetValue()
				any = true
			case dto.MetricType_COUNTER:
				sum += m.GetCounter().GetValue()
				any = true
			case dto.MetricType_UNTYPED:
				sum += m.GetUntyped().GetValue()
				any = true
			}
		}
		if any {
			out[name] = sum
		}
	}
	return out, nil
}

// Scraper is the production Source: it GETs every pod's /metrics and turns
// the stores' and workers' counters into rates with the previous scrape of
// the same pool.
type Scraper struct {
	Client *http.Client
	// Now is the clock (time.Now when nil).
	Now func() time.Time

	mu   sync.Mutex
	prev map[string]demandPoint
}

type demandPoint struct {
	at                time.Time
	requested, rbytes map[string]float64 // per store pod
	// tbytes, tsecs: per worker pod, its transfer counters.
	tbytes, tsecs map[string]float64
}

func (s *Scraper) get(ctx context.Context, c *http.Client, url string) (map[string]float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "text/plain;version=0.0.4")
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	m, err := ParseMetrics(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", url, err)
	}
	return m, nil
}

// Observe scrapes the targets. Unreachable pods, and pods reporting a NaN or
// infinite value for a metric the autoscaler reads (ErrBadValue), are
// skipped; the error lists them only when no pod at all answered.
func (s *Scraper) Observe(ctx context.Context, t Targets) (Observation, error) {
	now := time.Now()
	if s.Now != nil {
		now = s.Now()
	}
	var errs []error
	obs := Observation{InflightJobs: map[string]float64{}}
	cur := demandPoint{at: now, requested: map[string]float64{}, rbytes: map[string]float64{},
		tbytes: map[string]float64{}, tsecs: map[string]float64{}}
	c := s.Client
	if c == nil {
		c = &http.Client{Timeout: 5 * time.Second}
	}
	if t.TLS != nil {
		// A transport of this observation's: the configuration is the
		// pool's namespace's, and its connections end with it.
		tr := &http.Transport{TLSClientConfig: t.TLS}
		defer tr.CloseIdleConnections()
		c = &http.Client{Timeout: c.Timeout, Transport: tr}
	}
	var cSum float64
	var cN int
	for _, e := range t.Workers {
		m, err := s.get(ctx, c, e.URL)
		if err == nil {
			err = checkFinite(m, MetricCompactorInflight, MetricCompactorRate, MetricCompactorTransferBytes, MetricCompactorTransferSeconds)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("worker %s: %w", e.Pod, err))
			continue
		}
		obs.InflightJobs[e.Pod] = m[MetricCompactorInflight]
		if v := m[MetricCompactorRate]; v > 0 {
			cSum += v
			cN++
		}
		cur.tbytes[e.Pod] = m[MetricCompactorTransferBytes]
		cur.tsecs[e.Pod] = m[MetricCompactorTransferSeconds]
	}
	if cN > 0 {
		obs.CompactionRate = cSum / float64(cN)
	}

	for _, e := range t.Stores {
		m, err := s.get(ctx, c, e.URL)
		if err == nil {
			err = checkFinite(m, MetricStoreRequested, MetricStoreRequestedBytes, MetricStoreQueueDepth, MetricStoreDebtBytes, MetricStoreOldestWait)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("store %s: %w", e.Pod, err))
			continue
		}
		if v := m[contract.MetricClusterRegions]; v > 0 {
			if obs.ClusterRegions == nil {
				obs.ClusterRegions = map[string]float64{}
			}
			obs.ClusterRegions[e.Cluster] = max(obs.ClusterRegions[e.Cluster], v)
		}
		cur.requested[e.Pod] = m[MetricStoreRequested]
		cur.rbytes[e.Pod] = m[MetricStoreRequestedBytes]
		obs.Queued += m[MetricStoreQueueDepth]
		obs.DebtBytes += max(m[MetricStoreDebtBytes], 0)
		obs.OldestWait = max(obs.OldestWait, time.Duration(m[MetricStoreOldestWait]*float64(time.Second)))
	}

	s.mu.Lock()
	if s.prev == nil {
		s.prev = map[string]demandPoint{}
	}
	prev, had := s.prev[t.Pool]
	s.prev[t.Pool] = cur
	s.mu.Unlock()
	if had {
		obs.RequestRate, obs.CompactionSize, obs.DemandMeasured = DemandBetween(prev.at, prev.requested, prev.rbytes, cur.at, cur.requested, cur.rbytes)
		obs.TransferRate = TransferRateBetween(prev.tbytes, prev.tsecs, cur.tbytes, cur.tsecs)
	}

	if len(errs) > 0 && len(errs) == len(t.Workers)+len(t.Stores) {
		return obs, errors.Join(errs...)
	}
	return obs, nil
}

// DemandBetween turns two snapshots of the stores' requested-compaction
// counters (per pod) into a request rate (per second, all stores) and an
// average compaction size. A pod missing from either snapshot, or whose
// counter went down (restart), contributes nothing.
func DemandBetween(t0 time.Time, req0, bytes0 map[string]float64, t1 time.Time, req1, bytes1 map[string]float64) (rate, size float64, ok bool) {
	dt := t1.Sub(t0).Seconds()
	if dt <= 0 {
		return 0, 0, false
	}
	var dReq, dBytes float64
	for pod, r1 := range req1 {
		r0, ok0 := req0[pod]
		b0, okb := bytes0[pod]
		b1 := bytes1[pod]
		if !ok0 || !okb || r1 < r0 || b1 < b0 {
			continue
		}
		dReq += r1 - r0
		dBytes += b1 - b0
	}
	rate = dReq / dt
	if dReq > 0 {
		size = dBytes / dReq
	}
	return rate, size, true
}

// TransferRateBetween is w from two snapshots of the workers' transfer
// counters (per pod): the bytes streamed meanwhile over the seconds spent
// streaming them, all workers together, so each stream weighs by its bytes
// and a one-block fetch (mostly latency) barely moves it. 0 (not measured)
// when nothing was streamed; a pod missing from either snapshot, or whose
// counters went down (restart), contributes nothing.
func TransferRateBetween(bytes0, secs0, bytes1, secs1 map[string]float64) float64 {
	var dBytes, dSecs float64
	for pod, b1 := range bytes1 {
		b0, okb := bytes0[pod]
		s0, oks := secs0[pod]
		s1 := secs1[pod]
		if !okb || !oks || b1 < b0 || s1 < s0 {
			continue
		}
		dBytes += b1 - b0
		dSecs += s1 - s0
	}
	if dBytes <= 0 || dSecs <= 0 {
		return 0
	}
	return dBytes / dSecs
}
