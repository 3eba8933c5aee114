package phases

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	kvpb "github.com/bellows-kv/bellows/proto/bellows/kv/v1"
)

// storeRegion is the one region a `bellows store --regions 1` serves.
const storeRegion = "region-000"

// grpcTarget is a `bellows store` process: requests go over gRPC, and what
// the bench needs to know about the warmup comes from the store's /metrics.
type grpcTarget struct {
	conn    *grpc.ClientConn
	kv      kvpb.KVClient
	admin   kvpb.AdminClient
	metrics string
	http    *http.Client
}

func newGRPCTarget(grpcAddr, metricsAddr string) (*grpcTarget, error) {
	conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	return &grpcTarget{conn: conn, kv: kvpb.NewKVClient(conn), admin: kvpb.NewAdminClient(conn),
		metrics: "http://" + metricsAddr + "/metrics", http: scrapeClient}, nil
}

// scrapeClient asks for the store's /metrics uncompressed. Go's transport
// asks for gzip by default, and the store then compressed every scrape on
// its one CPU: half of a scrape's cost there (perf, hack/perf-store.sh), ten times a
// second, in front of the reads being timed. Over loopback it saves
// nothing. One for every target, as http.DefaultClient was.
var scrapeClient = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableCompression: true}}

func (t *grpcTarget) Close() error { return t.conn.Close() }

func (t *grpcTarget) Put(key, value []byte) error {
	_, err := t.kv.Put(context.Background(), &kvpb.PutRequest{Key: key, Value: value})
	return err
}

func (t *grpcTarget) Get(key []byte) error {
	_, err := t.kv.Get(context.Background(), &kvpb.GetRequest{Key: key})
	return err
}

func (t *grpcTarget) Scan(start, end []byte, n int) (int, error) {
	s, err := t.kv.Scan(context.Background(), &kvpb.ScanRequest{Start: start, End: end, Limit: uint32(n)})
	if err != nil {
		return 0, err
	}
	rows := 0
	for {
		resp, err := s.Recv()
		if errors.Is(err, io.EOF) {
			return rows, nil
		}
		if err != nil {
			return rows, err
		}
		rows += len(resp.Pairs)
	}
}

func (t *grpcTarget) Flush(ctx context.Context) error {
	_, err := t.admin.Flush(ctx, &kvpb.FlushRequest{})
	return err
}

func (t *grpcTarget) Compact(ctx context.Context) error {
	resp, err := t.admin.Compact(ctx, &kvpb.CompactRequest{Region: storeRegion, Major: true})
	if err == nil && !resp.Compacted {
		err = errors.New("the store found nothing to compact")
	}
	return err
}

// scrape reads the store's /metrics in the protobuf format, which carries
// the request latency's native histogram (the text format has only its
// classic buckets, a factor of 2 apart).
func (t *grpcTarget) scrape() (map[string]*dto.MetricFamily, error) {
	req, err := http.NewRequest(http.MethodGet, t.metrics, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", string(expfmt.NewFormat(expfmt.TypeProtoDelim)))
	resp, err := t.http.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	dec := expfmt.NewDecoder(resp.Body, expfmt.ResponseFormat(resp.Header))
	families := map[string]*dto.MetricFamily{}
	for {
		mf := &dto.MetricFamily{}
		if err := dec.Decode(mf); errors.Is(err, io.EOF) {
			return families, nil
		} else if err != nil {
			return nil, fmt.Errorf("parsing %s: %w", t.metrics, err)
		}
		families[mf.GetName()] = mf
	}
}

// series finds the series of name whose labels include labels.
func series(families map[string]*dto.MetricFamily, name string, labels map[string]string) (*dto.Metric, error) {
	mf, ok := families[name]
	if !ok {
		return nil, fmt.Errorf("the store exposes no %s", name)
	}
next:
	for _, m := range mf.GetMetric() {
		for _, lp := range m.GetLabel() {
			if want, ok := labels[lp.GetName()]; ok && want != lp.GetValue() {
				continue next
			}
		}
		return m, nil
	}
	return nil, fmt.Errorf("the store has no series %s%v", name, labels)
}

func value(families map[string]*dto.MetricFamily, name string, labels map[string]string) (float64, error) {
	m, err := series(families, name, labels)
	if err != nil {
		return 0, err
	}
	if m.GetGauge() != nil {
		return m.GetGauge().GetValue(), nil
	}
	return m.GetCounter().GetValue(), nil
}

// gauge scrapes one series of the store's /metrics; labels select it.
func (t *grpcTarget) gauge(name string, labels map[string]string) (float64, error) {
	families, err := t.scrape()
	if err != nil {
		return 0, err
	}
	return value(families, name, labels)
}

// latencyHistogram is one op's successful requests as the store timed them.
func latencyHistogram(families map[string]*dto.MetricFamily, op string) (histogram, error) {
	m, err := series(families, "bellows_kv_request_duration_seconds", map[string]string{"op": op, "code": "OK"})
	if err != nil {
		return histogram{}, err
	}
	return histogramOf(m.GetHistogram()), nil
}

// histogramOf reads a histogram's native buckets when it has them, its
// classic ones otherwise.
func histogramOf(h *dto.Histogram) histogram {
	out := histogram{Count: h.GetSampleCount(), Sum: h.GetSampleSum(), Buckets: map[float64]uint64{}}
	if spans := h.GetPositiveSpan(); len(spans) > 0 || h.GetZeroCount() > 0 {
		// Bucket i of schema s holds (base^(i-1), base^i], base = 2^(2^-s);
		// the spans place runs of buckets and the deltas give their counts.
		out.Native = true
		base := math.Pow(2, math.Pow(2, -float64(h.GetSchema())))
		out.Buckets[h.GetZeroThreshold()] = h.GetZeroCount()
		deltas, idx, count := h.GetPositiveDelta(), int32(0), int64(0)
		for si, sp := range spans {
			if si == 0 {
				idx = sp.GetOffset()
			} else {
				idx += sp.GetOffset()
			}
			for range sp.GetLength() {
				count += deltas[0]
				deltas = deltas[1:]
				out.Buckets[math.Pow(base, float64(idx))] += uint64(count)
				idx++
			}
		}
		return out
	}
	var below uint64
	for _, b := range h.GetBucket() {
		out.Buckets[b.GetUpperBound()] = b.GetCumulativeCount() - below
		below = b.GetCumulativeCount()
	}
	out.Buckets[math.Inf(1)] = h.GetSampleCount() - below
	return out
}

// Sample is one scrape of the store (CPU times are the caller's).
func (t *grpcTarget) Sample() (Sample, error) {
	s := Sample{At: time.Now()}
	families, err := t.scrape()
	if err != nil {
		return s, err
	}
	if s.Get, err = latencyHistogram(families, "get"); err != nil {
		return s, err
	}
	if s.Scan, err = latencyHistogram(families, "scan"); err != nil {
		return s, err
	}
	counters := []struct {
		name string
		to   *uint64
	}{{"bellows_block_cache_misses_total", &s.Misses}, {"bellows_block_cache_miss_bucket_reads_total", &s.BucketReads},
		{"bellows_block_cache_miss_worker_reads_total", &s.WorkerReads}}
	for _, c := range counters {
		v, err := value(families, c.name, nil)
		if err != nil {
			return s, err
		}
		*c.to = uint64(v)
	}
	region := map[string]string{"region": storeRegion}
	if sw, err := value(families, "bellows_warmup_switched_timestamp_seconds", region); err == nil && sw > 0 {
		sec, frac := math.Modf(sw)
		s.Switched = time.Unix(int64(sec), int64(frac*1e9))
	}
	s.Cached, err = value(families, "bellows_region_cached_ratio", region)
	return s, err
}

func (t *grpcTarget) WarmupBytes() (uint64, uint64, error) {
	c, err := t.gauge("bellows_warmup_bytes_total", map[string]string{"source": "compactor"})
	if err != nil {
		return 0, 0, err
	}
	b, err := t.gauge("bellows_warmup_bytes_total", map[string]string{"source": "bucket"})
	return uint64(c), uint64(b), err
}
