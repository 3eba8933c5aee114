package client

import (
	"context"
	"errors"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/bellows-kv/bellows/internal/contract"
	kvpb "github.com/bellows-kv/bellows/proto/bellows/kv/v1"
	"github.com/bellows-kv/bellows/storage-engine/blob"
	"github.com/bellows-kv/bellows/storage-engine/liveness"
	"github.com/bellows-kv/bellows/storage-engine/region"
	"github.com/bellows-kv/bellows/storage-engine/regionmap"
	"github.com/bellows-kv/bellows/storage-engine/server"
	"github.com/bellows-kv/bellows/storage-engine/server/route"
)

// The stores here are real (storage-engine/server over a file bucket, real
// gRPC on 127.0.0.1), in this process.

func openBucket(t *testing.T) *blob.Bucket {
	t.Helper()
	b, err := blob.Open(context.Background(), "file://"+filepath.Join(t.TempDir(), "bucket"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b
}

func openStore(t *testing.T, b *blob.Bucket, spans []server.Span, o server.StoreOptions) *server.Store {
	t.Helper()
	o.WALRoot = t.TempDir()
	o.Region = region.Options{Bucket: b, DisableAutoCompaction: true}
	s, err := server.OpenStore(context.Background(), spans, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// mapSplitAtM writes into b the region map of a key space split at "m"
// into region-000 and region-001.
func mapSplitAtM(t *testing.T, b *blob.Bucket) regionmap.Map {
	t.Helper()
	all, err := server.SplitAt([]string{"m"})
	if err != nil {
		t.Fatal(err)
	}
	initial, err := server.InitialMap(all)
	if err != nil {
		t.Fatal(err)
	}
	m, err := regionmap.Bootstrap(context.Background(), b, initial)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// serveKV serves kv's KV API on 127.0.0.1 until the test ends.
func serveKV(t *testing.T, kv *server.KV, opts ...grpc.ServerOption) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(opts...)
	kvpb.RegisterKVServer(srv, kv)
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(srv.Stop)
	return l.Addr().String()
}

// failingOverStore serves store 0 of two, which split the key space at
// "m" by the region map, with forwarding on; store 1, region-001's owner,
// let its liveness lease run out a minute ago and is gone. move commits
// the map that gives region-001 to store 0 (the balancer's failover),
// which store 0 then opens.
func failingOverStore(t *testing.T) (addr string, move func()) {
	t.Helper()
	ctx := context.Background()
	b := openBucket(t)
	m := mapSplitAtM(t, b)
	if _, err := liveness.Renew(ctx, b, "1", "gone", liveness.Record{}, time.Now().Add(-time.Minute), time.Second); err != nil {
		t.Fatal(err)
	}
	spans := server.SpansOf(m)
	s := openStore(t, b, (server.Owner{Ordinal: 0, Replicas: 2}).Owned(spans), server.StoreOptions{Map: &m,
		MapPollInterval: 5 * time.Millisecond, ReleasePollInterval: 5 * time.Millisecond,
		Liveness: &server.Liveness{Store: "0", Incarnation: "zero", Bucket: b, CheckInterval: 5 * time.Millisecond}})
	router := route.New(route.Options{Peers: func() []string { return nil }})
	t.Cleanup(func() { _ = router.Close() })
	kv := server.NewKV(s, &server.Forwarding{Spans: spans, Router: router}, nil)
	a := &server.Assigner{Store: s, Ordinal: 0, Replicas: func() (int, bool) { return 2, true }, Interval: 5 * time.Millisecond}
	actx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); a.Run(actx) }()
	t.Cleanup(func() { cancel(); <-done })
	return serveKV(t, kv), func() {
		next, err := m.Moved([]regionmap.Move{{Region: "region-001", From: 1, To: 0}})
		if err != nil {
			t.Fatal(err)
		}
		if err := regionmap.Commit(ctx, b, m, &next); err != nil {
			t.Fatal(err)
		}
	}
}

// leaseExpiredStore serves one region, region-000 (every key), as a store
// whose liveness lease has run out serves it: it refuses every KV call but
// Regions with UNAVAILABLE LEASE_EXPIRED.
func leaseExpiredStore(t *testing.T) string {
	t.Helper()
	b := openBucket(t)
	spans, err := server.SplitEvenly(1)
	if err != nil {
		t.Fatal(err)
	}
	keeper := liveness.NewKeeper(b, "0", "zero", time.Second, time.Second, 0, func() time.Time { return time.Now().Add(-time.Minute) })
	if _, err := keeper.Renew(context.Background()); err != nil {
		t.Fatal(err)
	}
	unary, stream := server.LeaseInterceptors(keeper)
	return serveKV(t, server.NewKV(openStore(t, b, spans, server.StoreOptions{}), nil, nil), grpc.UnaryInterceptor(unary), grpc.StreamInterceptor(stream))
}

// retries records what Options.Retrying is told.
type retries struct {
	mu      sync.Mutex
	errs    []error
	failing chan FailingOver // each failover told, without blocking
}

func newRetries() *retries { return &retries{failing: make(chan FailingOver, 1000)} }

func (r *retries) add(err error) {
	r.mu.Lock()
	r.errs = append(r.errs, err)
	r.mu.Unlock()
	if f, ok := FailingOverOf(err); ok {
		select {
		case r.failing <- f:
		default:
		}
	}
}

func (r *retries) next(t *testing.T) FailingOver {
	t.Helper()
	select {
	case f := <-r.failing:
		return f
	case <-time.After(20 * time.Second):
		r.mu.Lock()
		defer r.mu.Unlock()
		t.Fatalf("no retry of a region failing over; retried: %v", r.errs)
		return FailingOver{}
	}
}

func quickRetries(r *retries) Options {
	return Options{RetryInitial: 5 * time.Millisecond, RetryMax: 50 * time.Millisecond, Retrying: r.add}
}

// A put to a region whose store died, through a live store, is retried
// while that store answers the region is failing over (told to Retrying,
// naming the region and the dead store), and succeeds once the region map
// gives the region to the live store and it has opened it. The table
// shows the region failing over, with no owner, until then.
func TestAPutRidesThroughARegionFailingOver(t *testing.T) {
	addr, move := failingOverStore(t)
	r := newRetries()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := New(ctx, []string{addr}, quickRetries(r))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	regions := c.Regions()
	if len(regions) != 2 || regions[1].Name != "region-001" || regions[1].FailingOverFrom != "1" || len(regions[1].Owners) != 0 {
		t.Fatalf("the table: %+v; want region-001 failing over from store 1, with no owner", regions)
	}

	type result struct {
		w   WriteResult
		err error
	}
	put := make(chan result, 1)
	go func() {
		w, err := c.Put(ctx, []byte("n"), []byte("v"))
		put <- result{w, err}
	}()
	if f := r.next(t); f != (FailingOver{Region: "region-001", Store: "1"}) || f.String() != "region-001 is failing over (store 1's liveness lease ran out)" {
		t.Fatalf("retried %+v (%q), want region-001 failing over from store 1", f, f)
	}
	move()
	got := <-put
	if got.err != nil || got.w.Region != "region-001" {
		t.Fatalf("put: %+v, %v; want it applied in region-001 once the region moved", got.w, got.err)
	}
	if v, found, err := c.Get(ctx, []byte("n")); err != nil || !found || string(v) != "v" {
		t.Fatalf("get: %q %t %v", v, found, err)
	}
	// The table read afresh: the put's last refresh may have been taken
	// while the region was still opening.
	if err := c.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	for _, g := range c.Regions() {
		if g.FailingOverFrom != "" {
			t.Errorf("%s still failing over from %s after it opened", g.Name, g.FailingOverFrom)
		}
	}
}

// A put to a store whose own liveness lease ran out is retried
// (LEASE_EXPIRED: the region is failing over from that store) and
// succeeds once another store serves the region.
func TestAPutRidesThroughAStoreWhoseLeaseRanOut(t *testing.T) {
	expired := leaseExpiredStore(t)
	next := openStore(t, openBucket(t), nil, server.StoreOptions{})
	other := serveKV(t, server.NewKV(next, nil, nil))
	r := newRetries()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := New(ctx, []string{expired, other}, quickRetries(r))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	put := make(chan error, 1)
	go func() {
		_, err := c.Put(ctx, []byte("k"), []byte("v"))
		put <- err
	}()
	want := FailingOver{Region: "region-000", Store: "0", LeaseExpired: true, Addr: expired}
	if f := r.next(t); f != want || !strings.Contains(f.String(), "region-000 is failing over (its store 0, at "+expired+", let its liveness lease run out)") {
		t.Fatalf("retried %+v (%q), want %+v", f, f, want)
	}
	spans, err := server.SplitEvenly(1)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := next.Reassign(ctx, spans); err != nil {
		t.Fatal(err)
	}
	if err := <-put; err != nil {
		t.Fatalf("put: %v; want it applied at the store that took the region", err)
	}
	if v, found, err := c.Get(ctx, []byte("k")); err != nil || !found || string(v) != "v" {
		t.Fatalf("get: %q %t %v", v, found, err)
	}
}

// wantFailingOver checks the error of a request that gave up on a region
// failing over: UNAVAILABLE with reason, matching the deadline, and saying
// want.
func wantFailingOver(t *testing.T, what string, err error, reason string, want FailingOver) {
	t.Helper()
	if status.Code(err) != codes.Unavailable || !hasReason(err, reason) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("%s: %v (code %v, details %v); want UNAVAILABLE with reason %s, matching context.DeadlineExceeded",
			what, err, status.Code(err), status.Convert(err).Details(), reason)
		return
	}
	f, ok := FailingOverOf(err)
	if !ok || f != want {
		t.Errorf("%s: FailingOverOf = %+v, %t; want %+v", what, f, ok, want)
	}
	if !strings.Contains(err.Error(), want.String()) || !strings.Contains(status.Convert(err).Message(), want.String()) {
		t.Errorf("%s: %q does not say %q", what, err, want)
	}
}

// A failover that outlasts the caller's deadline ends every kind of request
// with UNAVAILABLE (a code to retry on), the answer's reason, and a message
// naming the region failing over; the error still matches the deadline.
func TestAFailoverOutlastingTheDeadlineIsUnavailableAndNamesTheRegion(t *testing.T) {
	failing, _ := failingOverStore(t)
	expired := leaseExpiredStore(t)
	for _, tc := range []struct {
		name, addr, reason string
		want               FailingOver
	}{
		{"a live store's answer", failing, contract.RegionFailingOverReason, FailingOver{Region: "region-001", Store: "1"}},
		{"the dead store's own answer", expired, contract.LeaseExpiredReason, FailingOver{Region: "region-001", Store: "0", LeaseExpired: true, Addr: expired}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Each request's deadline passes at its first retry: it
			// then has an answer to report however loaded the machine
			// (a timer could end the first call before any answer, and
			// the error would be the deadline's alone).
			var current atomic.Pointer[retryDeadline]
			opts := quickRetries(newRetries())
			opts.Retrying = func(error) {
				if d := current.Load(); d != nil {
					d.pass()
				}
			}
			c, err := New(context.Background(), []string{tc.addr}, opts)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if tc.addr == expired {
				tc.want.Region = "region-000"
			}
			short := func() (context.Context, context.CancelFunc) {
				d := newRetryDeadline()
				current.Store(d)
				return d, d.pass
			}
			ctx, cancel := short()
			_, err = c.Put(ctx, []byte("n"), []byte("v"))
			cancel()
			wantFailingOver(t, "put", err, tc.reason, tc.want)
			ctx, cancel = short()
			_, _, err = c.Get(ctx, []byte("n"))
			cancel()
			wantFailingOver(t, "get", err, tc.reason, tc.want)
			ctx, cancel = short()
			_, err = c.ScanAll(ctx, []byte("n"), nil, ScanOptions{})
			cancel()
			wantFailingOver(t, "scan", err, tc.reason, tc.want)
			ctx, cancel = short()
			_, err = c.BatchGet(ctx, [][]byte{[]byte("n"), []byte("o")})
			cancel()
			wantFailingOver(t, "batch get", err, tc.reason, tc.want)
		})
	}
}

// retryDeadline is a request's context whose deadline passes when pass is
// called (at the client's first retry), or after a minute at the latest:
// Err is then context.DeadlineExceeded, as a timer's would be.
type retryDeadline struct {
	context.Context // Value only
	done            chan struct{}
	once            sync.Once
	at              time.Time
	timer           *time.Timer
}

func newRetryDeadline() *retryDeadline {
	d := &retryDeadline{Context: context.Background(), done: make(chan struct{}), at: time.Now().Add(time.Minute)}
	d.timer = time.AfterFunc(time.Minute, d.pass)
	return d
}

func (d *retryDeadline) pass() {
	d.once.Do(func() {
		d.timer.Stop()
		close(d.done)
	})
}

func (d *retryDeadline) Deadline() (time.Time, bool) { return d.at, true }
func (d *retryDeadline) Done() <-chan struct{}       { return d.done }
func (d *retryDeadline) Err() error {
	select {
	case <-d.done:
		return context.DeadlineExceeded
	default:
		return nil
	}
}
