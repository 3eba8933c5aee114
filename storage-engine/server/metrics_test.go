package server

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	kvpb "github.com/bellows-kv/bellows/proto/bellows/kv/v1"
	"github.com/bellows-kv/bellows/storage-engine/blob"
	"github.com/bellows-kv/bellows/storage-engine/blockcache"
	"github.com/bellows-kv/bellows/storage-engine/region"
	"github.com/bellows-kv/bellows/storage-engine/server/route"
)

// series gathers reg and returns name's series, each by its labels.
func series(t *testing.T, reg *prometheus.Registry, name string) map[string]*dto.Metric {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*dto.Metric{}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			key := ""
			for _, l := range m.GetLabel() {
				key += l.GetName() + "=" + l.GetValue() + ","
			}
			out[key] = m
		}
	}
	return out
}

type fakeStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (f fakeStream) Context() context.Context { return f.ctx }

// The request histogram counts each client request once under its op and
// the name of the status code it ended with; only the OK series exist
// before any request, and a made-up code is Unknown.
func TestRequestDurationByCode(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)

	before := series(t, reg, "bellows_kv_request_duration_seconds")
	if len(before) != len(ops) {
		t.Errorf("%d series before any request, want one per op (%d): %v", len(before), len(ops), before)
	}
	for k := range before {
		if !regexp.MustCompile(`^code=OK,op=[a-z-]+,$`).MatchString(k) {
			t.Errorf("series %s before any request", k)
		}
	}

	unary := func(ctx context.Context, method string, err error) {
		_, _ = m.UnaryInterceptor(ctx, nil, &grpc.UnaryServerInfo{FullMethod: method},
			func(context.Context, any) (any, error) { return nil, err })
	}
	ctx := context.Background()
	fwd := metadata.NewIncomingContext(ctx, metadata.Pairs(route.ForwardedHeader, "1"))
	unary(ctx, "/bellows.kv.v1.KV/Put", nil)
	unary(ctx, "/bellows.kv.v1.KV/Put", nil)
	unary(ctx, "/bellows.kv.v1.KV/CommitTxn", status.Error(codes.Aborted, "write conflict"))
	unary(ctx, "/bellows.kv.v1.KV/CommitTxn", nil)
	unary(ctx, "/bellows.kv.v1.KV/Get", errors.New("not a status"))
	unary(ctx, "/bellows.kv.v1.KV/Get", status.Error(codes.Code(42), "made up"))
	unary(ctx, "/bellows.kv.v1.KV/Get", context.Canceled)
	unary(fwd, "/bellows.kv.v1.KV/Put", status.Error(codes.Internal, "owner's answer, timed by the caller's store"))
	unary(ctx, "/bellows.kv.v1.Admin/Flush", status.Error(codes.Internal, "not a client request"))
	_ = m.StreamInterceptor(nil, fakeStream{ctx: ctx}, &grpc.StreamServerInfo{FullMethod: "/bellows.kv.v1.KV/Scan"},
		func(any, grpc.ServerStream) error { return status.Error(codes.Unavailable, "region moving") })

	want := map[string]uint64{
		"code=OK,op=put,":               2,
		"code=Aborted,op=commit-txn,":   1,
		"code=OK,op=commit-txn,":        1,
		"code=Unknown,op=get,":          3,
		"code=Unavailable,op=scan,":     1,
		"code=OK,op=get,":               0,
		"code=OK,op=check-txn-status,":  0,
		"code=Internal,op=put,":         0, // forwarded: not observed here
		"code=Internal,op=admin-flush,": 0,
	}
	got := series(t, reg, "bellows_kv_request_duration_seconds")
	for k, n := range want {
		var c uint64
		if s, ok := got[k]; ok {
			c = s.GetHistogram().GetSampleCount()
		}
		if c != n {
			t.Errorf("%s: %d requests, want %d", k, c, n)
		}
	}
	if n := len(got) - len(before); n != 3 {
		t.Errorf("%d new series, want 3 (Aborted commit-txn, Unknown get, Unavailable scan): %v", n, got)
	}
}

// A flush that fails and the writes that stall behind it are exported per
// region while they happen, from the region's own counters.
func TestFlushErrorsAndWriteStallsExported(t *testing.T) {
	dir := t.TempDir()
	bucketDir := filepath.Join(dir, "bucket")
	b, err := blob.Open(context.Background(), "file://"+bucketDir)
	if err != nil {
		t.Fatal(err)
	}
	spans, err := SplitEvenly(1)
	if err != nil {
		t.Fatal(err)
	}
	s, err := OpenStore(context.Background(), spans, StoreOptions{
		WALRoot: filepath.Join(dir, "wal"),
		Region: region.Options{Bucket: b, DisableAutoCompaction: true,
			MemstoreBytes: 16 << 10, MaxImmutableMemstores: 1},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	reg := prometheus.NewRegistry()
	RegisterStoreGauges(reg, s, blockcache.New(1<<20))

	counter := func(name string) float64 {
		got := series(t, reg, name)
		if len(got) != 1 {
			t.Fatalf("%s: series %v, want one, region=region-000", name, got)
		}
		m, ok := got["region=region-000,"]
		if !ok {
			t.Fatalf("%s: series %v, want region=region-000", name, got)
		}
		return m.GetCounter().GetValue()
	}
	if e, st := counter("bellows_flush_errors_total"), counter("bellows_write_stalls_total"); e != 0 || st != 0 {
		t.Fatalf("before any flush: %v flush errors, %v stalls", e, st)
	}

	// A file where the SSTs' directory goes fails every SST write, even
	// as root, until it is removed.
	block := filepath.Join(bucketDir, region.ObjectKey("region-000", "sst"))
	if err := os.WriteFile(block, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	e := engine(t, s)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		v := make([]byte, 1<<10)
		for i := range 100 { // 100 KiB: several memstores of 16 KiB
			if _, err := e.Put([]byte{byte(i)}, v); err != nil {
				t.Errorf("put %d: %v", i, err)
				return
			}
		}
	}()
	waitUntil(t, "a flush error and a stall exported", func() bool {
		return counter("bellows_flush_errors_total") > 0 && counter("bellows_write_stalls_total") > 0
	})
	if err := os.Remove(block); err != nil {
		t.Fatal(err)
	}
	wg.Wait() // the retried flush succeeds and the stalled writes go on
	if n := e.Stats().FlushErrors.Load(); counter("bellows_flush_errors_total") != float64(n) {
		t.Errorf("exported %v flush errors, the region counted %d", counter("bellows_flush_errors_total"), n)
	}
}

// Every client-facing KV method is observed under an op: a method added to
// the service without one would go unmeasured (BatchGet and DeleteRange
// did).
func TestEveryKVMethodHasAnOp(t *testing.T) {
	var names []string
	for _, m := range kvpb.KV_ServiceDesc.Methods {
		names = append(names, m.MethodName)
	}
	for _, s := range kvpb.KV_ServiceDesc.Streams {
		names = append(names, s.StreamName)
	}
	for _, n := range names {
		if n == "Regions" || n == "Clock" || n == "Watch" {
			// The routing table and the peers' clock check are not client
			// requests; a watch is a stream that lasts as long as its
			// consumer, whose resumptions would read as errors
			// (bellows_watch_* count it instead).
			continue
		}
		if _, ok := ops["/"+kvpb.KV_ServiceDesc.ServiceName+"/"+n]; !ok {
			t.Errorf("KV method %s has no op label", n)
		}
	}
}
