package server

import (
	"context"
	"net"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/bellows-kv/bellows/internal/contract"
	kvpb "github.com/bellows-kv/bellows/proto/bellows/kv/v1"
	"github.com/bellows-kv/bellows/storage-engine/blob"
	"github.com/bellows-kv/bellows/storage-engine/liveness"
	"github.com/bellows-kv/bellows/storage-engine/manifest"
	"github.com/bellows-kv/bellows/storage-engine/region"
	"github.com/bellows-kv/bellows/storage-engine/regionmap"
	"github.com/bellows-kv/bellows/storage-engine/server/route"
)

// failingOverInfo is the ErrorInfo of reason REGION_FAILING_OVER err
// carries, or nil.
func failingOverInfo(err error) *errdetails.ErrorInfo {
	for _, d := range status.Convert(err).Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.Reason == contract.RegionFailingOverReason && info.Domain == contract.ErrorDomain {
			return info
		}
	}
	return nil
}

// Store 0 and store 1 split the key space at "m" by the region map. Store 1
// stops (paused: every call it gets waits for the caller's deadline) after
// its liveness lease ran out. Store 0, asked for store 1's region, answers
// at once that the region is failing over, naming the region and store 1,
// instead of forwarding into the pause; its Regions answer lists the
// region as failing over. Once store 1 renews its lease and resumes, store
// 0 forwards to it again.
func TestAStoreAnswersFailingOverForARegionWhoseOwnersLeaseRanOut(t *testing.T) {
	ctx := context.Background()
	bucket, err := blob.Open(ctx, "file://"+filepath.Join(t.TempDir(), "bucket"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = bucket.Close() })
	all, err := SplitAt([]string{"m"})
	if err != nil {
		t.Fatal(err)
	}
	initial, err := InitialMap(all)
	if err != nil {
		t.Fatal(err)
	}
	m, err := regionmap.Bootstrap(ctx, bucket, initial)
	if err != nil {
		t.Fatal(err)
	}
	spans := SpansOf(m)

	// Store 1: its lease ran out a minute ago.
	rec, err := liveness.Renew(ctx, bucket, "1", "one", liveness.Record{}, time.Now().Add(-time.Minute), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var paused atomic.Bool
	held := make(chan string, 16)
	one := NewKV(openStore(t, (Owner{1, 2}).Owned(spans), bucket), nil, nil)
	srv := grpc.NewServer(grpc.UnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		if paused.Load() {
			held <- info.FullMethod
			<-ctx.Done()
			return nil, status.FromContextError(ctx.Err()).Err()
		}
		return h(ctx, req)
	}))
	kvpb.RegisterKVServer(srv, one)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(srv.Stop)

	// Store 0 follows the map, knows the cluster has two stores, and has
	// learned store 1 as region-001's owner before it paused.
	zero, err := OpenStore(ctx, (Owner{0, 2}).Owned(spans), StoreOptions{WALRoot: t.TempDir(),
		Region: region.Options{Bucket: bucket, DisableAutoCompaction: true}, Map: &m,
		Liveness: &Liveness{Store: "0", Incarnation: "zero", Bucket: bucket, CheckInterval: time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = zero.Close() })
	two := func() (int, bool) { return 2, true }
	zero.replicas.Store(&two)
	router := route.New(route.Options{Peers: func() []string { return []string{l.Addr().String()} }, MinRefreshGap: time.Millisecond})
	t.Cleanup(func() { _ = router.Close() })
	router.Refresh(0)
	if owners, _ := router.Owners("region-001"); len(owners) != 1 {
		t.Fatalf("the router learned region-001's owners as %v, want store 1", owners)
	}
	kv := NewKV(zero, &Forwarding{Spans: spans, Router: router}, nil)
	paused.Store(true)

	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err = kv.Put(dctx, &kvpb.PutRequest{Key: []byte("n"), Value: []byte("v")})
	info := failingOverInfo(err)
	if status.Code(err) != codes.Unavailable || info == nil || info.Metadata["region"] != "region-001" || info.Metadata["store"] != "1" || RegionOf(err) != "region-001" {
		t.Fatalf("put to a region whose owner's lease ran out: %v (details %v), want UNAVAILABLE REGION_FAILING_OVER naming region-001 and store 1",
			err, status.Convert(err).Details())
	}
	if msg := status.Convert(err).Message(); !strings.Contains(msg, "region-001 is failing over: store 1, its owner, let its liveness lease run out") {
		t.Errorf("message %q does not say region-001 is failing over from store 1", msg)
	}
	if len(held) > 0 {
		t.Errorf("the put was forwarded to the paused store (%s)", <-held)
	}
	if _, err := kv.Get(dctx, &kvpb.GetRequest{Key: []byte("z")}); failingOverInfo(err) == nil {
		t.Errorf("get: %v, want REGION_FAILING_OVER", err)
	}
	resp, err := kv.Regions(ctx, &kvpb.RegionsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if f := resp.FailingOver; len(f) != 1 || f[0].Name != "region-001" || f[0].Store != "1" || string(f[0].Start) != "m" || f[0].ExpiredMs < 50_000 {
		t.Fatalf("Regions lists %v as failing over, want region-001 [m, ) from store 1, expired about a minute ago", f)
	}
	if len(resp.Regions) != 1 || resp.Regions[0].Name != "region-000" || resp.Regions[0].FailingOverFrom != "" {
		t.Fatalf("Regions lists %v as its own", resp.Regions)
	}

	// Store 1 renews and resumes: it serves again, through store 0.
	if _, err := liveness.Renew(ctx, bucket, "1", "one", rec, time.Now(), time.Minute); err != nil {
		t.Fatal(err)
	}
	paused.Store(false)
	waitUntil(t, "store 0 to forward to store 1 again", func() bool {
		r, err := kv.Put(ctx, &kvpb.PutRequest{Key: []byte("n"), Value: []byte("v")})
		return err == nil && r.Region == "region-001"
	})
	if resp, err := kv.Regions(ctx, &kvpb.RegionsRequest{}); err != nil || len(resp.FailingOver) != 0 {
		t.Fatalf("Regions after store 1 renewed: %v, %v, want nothing failing over", resp.GetFailingOver(), err)
	}
}

// A region this store is taking over from a dead store answers that it is
// failing over (not that it waits for a release), without forwarding, and
// its Regions entry names the dead store.
func TestARegionBeingTakenOverAnswersFailingOver(t *testing.T) {
	kv := testKV(t, true) // forwarding on, and no router: nothing may be forwarded
	a := kv.store.Assignments()[1]
	marked := takingOverError(a.Name(), &region.Error{Region: a.Name(), Err: &manifest.OwnedError{Manifest: 7, Owner: "old pid 1", WALID: "w", Lease: "1/gone"}})
	a.waiting.Store(&marked)

	_, err := kv.Put(context.Background(), &kvpb.PutRequest{Key: []byte("q"), Value: []byte("v")})
	info := failingOverInfo(err)
	if status.Code(err) != codes.Unavailable || info == nil || info.Metadata["region"] != "region-002" || info.Metadata["store"] != "1" ||
		info.Metadata["taking_over"] != "true" || RegionOf(err) != "region-002" {
		t.Fatalf("put to a region being taken over: %v (details %v), want UNAVAILABLE REGION_FAILING_OVER of region-002 from store 1, taking over",
			err, status.Convert(err).Details())
	}
	got := regionInfo("here", a, time.Now())
	if got.FailingOverFrom != "1" || !strings.Contains(got.Waiting, "region-002 is failing over") {
		t.Fatalf("Regions entry: failing over from %q, waiting %q; want store 1, and the waiting reason saying so", got.FailingOverFrom, got.Waiting)
	}
}
