package route

import (
	"context"
	"errors"
	"io"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/status"

	kvpb "github.com/bellows-kv/bellows/proto/bellows/kv/v1"
)

// slowStore is a fakeStore whose Get and Scan run until the test lets them
// finish, and whose Regions can be made to fail.
type slowStore struct {
	fakeStore
	started    chan struct{} // a Get or Scan began (its first message sent)
	finish     chan struct{} // closed: they finish
	failProbes int           // Regions calls still to fail
}

func (s *slowStore) Get(ctx context.Context, req *kvpb.GetRequest) (*kvpb.GetResponse, error) {
	s.started <- struct{}{}
	select {
	case <-s.finish:
		return &kvpb.GetResponse{Found: true, Value: req.Key}, nil
	case <-ctx.Done():
		return nil, status.FromContextError(ctx.Err()).Err()
	}
}

func (s *slowStore) Scan(req *kvpb.ScanRequest, stream kvpb.KV_ScanServer) error {
	if err := stream.Send(&kvpb.ScanResponse{Pairs: []*kvpb.KeyValue{{Key: []byte("first")}}}); err != nil {
		return err
	}
	s.started <- struct{}{}
	select {
	case <-s.finish:
	case <-stream.Context().Done():
		return status.FromContextError(stream.Context().Err()).Err()
	}
	return stream.Send(&kvpb.ScanResponse{Pairs: []*kvpb.KeyValue{{Key: []byte("second")}}})
}

func (s *slowStore) Regions(ctx context.Context, req *kvpb.RegionsRequest) (*kvpb.RegionsResponse, error) {
	s.mu.Lock()
	fail := s.failProbes > 0
	if fail {
		s.failProbes--
	}
	s.mu.Unlock()
	if fail {
		return nil, status.Error(codes.Internal, "probe fails")
	}
	return s.fakeStore.Regions(ctx, req)
}

func newSlowStore() *slowStore {
	return &slowStore{started: make(chan struct{}, 16), finish: make(chan struct{}),
		fakeStore: fakeStore{id: "s", regions: []string{"region-001"}}}
}

// serveSlow serves s (all its methods) on 127.0.0.1.
func serveSlow(t *testing.T, s *slowStore) *slowStore {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	kvpb.RegisterKVServer(srv, s)
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(srv.Stop)
	s.addr = l.Addr().String()
	return s
}

// peerList is a settable Options.Peers.
type peerList struct {
	mu    sync.Mutex
	addrs []string
}

func (p *peerList) set(addrs ...string) { p.mu.Lock(); p.addrs = addrs; p.mu.Unlock() }
func (p *peerList) get() []string       { p.mu.Lock(); defer p.mu.Unlock(); return slices.Clone(p.addrs) }

func refresh(r *Router) {
	_, gen := r.Owners("")
	r.Refresh(gen)
}

func state(l *Lease) connectivity.State { return l.pc.cc.GetState() }

func current(r *Router, addr string) *peerConn {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.conns[addr]
}

// A call over a peer's connection finishes normally when the peer leaves
// the list mid-call; the connection closes when the call releases it.
func TestLongCallSurvivesPeerLeavingTheList(t *testing.T) {
	s := serveSlow(t, newSlowStore())
	peers := &peerList{}
	peers.set(s.addr)
	r := New(Options{Peers: peers.get, MinRefreshGap: time.Nanosecond})
	defer r.Close()
	refresh(r)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l, err := r.Acquire(ctx, s.addr)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		_, err := l.Client().Get(ctx, &kvpb.GetRequest{Key: []byte("k")})
		got <- err
	}()
	<-s.started

	peers.set() // scaled down: the peer leaves the list
	refresh(r)
	if owners, _ := r.Owners("region-001"); owners != nil {
		t.Fatalf("region-001 still routed to %v", owners)
	}
	if current(r, s.addr) != nil {
		t.Fatal("the departed peer's connection is still handed out")
	}
	if st := state(l); st == connectivity.Shutdown {
		t.Fatal("the connection was closed under a running call")
	}
	close(s.finish)
	if err := <-got; err != nil {
		t.Fatalf("call running while its peer left the list: %v", err)
	}
	if st := state(l); st == connectivity.Shutdown {
		t.Fatal("closed before its last user released it")
	}
	l.Release()
	if st := state(l); st != connectivity.Shutdown {
		t.Fatalf("retired connection is %v after its last user released it, want Shutdown", st)
	}
	l.Release() // a second release does nothing
}

// A streaming call survives the router re-dialling its peer after a failed
// probe: the old connection is retired, not closed, and new calls get the
// new one.
func TestStreamSurvivesRedialAfterFailedProbe(t *testing.T) {
	s := serveSlow(t, newSlowStore())
	peers := &peerList{}
	peers.set(s.addr)
	r := New(Options{Peers: peers.get, MinRefreshGap: time.Nanosecond})
	defer r.Close()
	refresh(r)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l, err := r.Acquire(ctx, s.addr)
	if err != nil {
		t.Fatal(err)
	}
	stream, err := l.Client().Scan(ctx, &kvpb.ScanRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); err != nil {
		t.Fatal(err)
	}
	<-s.started

	s.mu.Lock()
	s.failProbes = 1 // the next probe fails over the old connection
	s.mu.Unlock()
	refresh(r)
	if owners, _ := r.Owners("region-001"); !slices.Equal(owners, []string{s.addr}) {
		t.Fatalf("owners of region-001 after the re-dialled probe: %v", owners)
	}
	if pc := current(r, s.addr); pc == nil || pc == l.pc {
		t.Fatal("the router did not dial afresh after the failed probe")
	}
	if st := state(l); st == connectivity.Shutdown {
		t.Fatal("the failed probe closed the connection under a running stream")
	}
	close(s.finish)
	var keys []string
	for {
		resp, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("stream after the re-dial: %v", err)
		}
		for _, kv := range resp.Pairs {
			keys = append(keys, string(kv.Key))
		}
	}
	if !slices.Equal(keys, []string{"second"}) {
		t.Fatalf("rest of the stream: %q", keys)
	}
	l.Release()
	if st := state(l); st != connectivity.Shutdown {
		t.Fatalf("replaced connection is %v after its last user released it, want Shutdown", st)
	}
}

// A retired connection whose user outlives the drain is closed anyway: at
// MaxDrain for a call without deadline, shortly after the deadline for one
// that has one (a user that never releases its lease).
func TestRetiredConnectionDrainIsBounded(t *testing.T) {
	s := serveSlow(t, newSlowStore())
	defer close(s.finish)
	peers := &peerList{}
	peers.set(s.addr)
	r := New(Options{Peers: peers.get, MinRefreshGap: time.Nanosecond, MaxDrain: 200 * time.Millisecond})
	defer r.Close()

	// No deadline: closed at MaxDrain, failing the call (the forwarder
	// answers that UNAVAILABLE).
	l, err := r.Acquire(context.Background(), s.addr)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		_, err := l.Client().Get(context.Background(), &kvpb.GetRequest{Key: []byte("k")})
		got <- err
	}()
	<-s.started
	began := time.Now()
	peers.set()
	refresh(r)
	err = <-got
	if status.Code(err) != codes.Canceled || time.Since(began) < 150*time.Millisecond {
		t.Fatalf("call outliving the drain: %v after %v, want the closing connection's CANCELLED after ~200ms", err, time.Since(began))
	}
	l.Release()

	// A lease with a deadline that is never released: closed about a
	// second after the deadline, before MaxDrain.
	r2 := New(Options{Peers: peers.get, MinRefreshGap: time.Nanosecond, MaxDrain: time.Minute})
	defer r2.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	l2, err := r2.Acquire(ctx, s.addr)
	if err != nil {
		t.Fatal(err)
	}
	peers.set(s.addr)
	refresh(r2)
	peers.set()
	refresh(r2) // retires the leaked connection
	wctx, wcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer wcancel()
	for st := state(l2); st != connectivity.Shutdown; st = state(l2) {
		if !l2.pc.cc.WaitForStateChange(wctx, st) {
			t.Fatal("leaked lease's connection not closed after its deadline")
		}
	}
}

func TestAcquireAfterCloseIsUnavailable(t *testing.T) {
	r := New(Options{Peers: func() []string { return nil }})
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Acquire(context.Background(), "127.0.0.1:1"); status.Code(err) != codes.Unavailable {
		t.Fatalf("Acquire after Close: %v, want UNAVAILABLE", err)
	}
}
