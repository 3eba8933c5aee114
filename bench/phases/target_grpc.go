package phases

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
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
		metrics: "http://" + metricsAddr + "/metrics", http: &http.Client{Timeout: 10 * time.Second}}, nil
}

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

// gauge scrapes one series of the store's /metrics; labels select it.
func (t *grpcTarget) gauge(name string, labels map[string]string) (float64, error) {
	resp, err := t.http.Get(t.metrics)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return 0, fmt.Errorf("parsing %s: %w", t.metrics, err)
	}
	mf, ok := families[name]
	if !ok {
		return 0, fmt.Errorf("%s exposes no %s", t.metrics, name)
	}
next:
	for _, m := range mf.GetMetric() {
		for _, lp := range m.GetLabel() {
			if want, ok := labels[lp.GetName()]; ok && want != lp.GetValue() {
				continue next
			}
		}
		switch {
		case m.GetGauge() != nil:
			return m.GetGauge().GetValue(), nil
		case m.GetCounter() != nil:
			return m.GetCounter().GetValue(), nil
		}
	}
	return 0, fmt.Errorf("%s has no series %s%v", t.metrics, name, labels)
}

func (t *grpcTarget) Switched() (time.Time, error) {
	s, err := t.gauge("bellows_warmup_switched_timestamp_seconds", map[string]string{"region": storeRegion})
	if err != nil || s == 0 {
		return time.Time{}, err
	}
	sec, frac := math.Modf(s)
	return time.Unix(int64(sec), int64(frac*1e9)), nil
}

func (t *grpcTarget) CachedFraction() (float64, error) {
	return t.gauge("bellows_region_cached_ratio", map[string]string{"region": storeRegion})
}

func (t *grpcTarget) WarmupBytes() (uint64, uint64, error) {
	c, err := t.gauge("bellows_warmup_bytes_total", map[string]string{"source": "compactor"})
	if err != nil {
		return 0, 0, err
	}
	b, err := t.gauge("bellows_warmup_bytes_total", map[string]string{"source": "bucket"})
	return uint64(c), uint64(b), err
}
