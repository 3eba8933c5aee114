package route

import (
	"context"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	kvpb "github.com/bellows-kv/bellows/proto/bellows/kv/v1"
)

// fakeStore answers Regions with a settable list and identity.
type fakeStore struct {
	kvpb.UnimplementedKVServer
	mu      sync.Mutex
	id      string
	regions []string
	addr    string
}

func (f *fakeStore) set(regions ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.regions = regions
}

func (f *fakeStore) Regions(ctx context.Context, _ *kvpb.RegionsRequest) (*kvpb.RegionsResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.id != "" {
		_ = grpc.SetHeader(ctx, metadata.Pairs(StoreIDHeader, f.id))
	}
	resp := &kvpb.RegionsResponse{}
	for _, n := range f.regions {
		resp.Regions = append(resp.Regions, &kvpb.RegionInfo{Name: n})
	}
	return resp, nil
}

func serve(t *testing.T, f *fakeStore) *fakeStore {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	kvpb.RegisterKVServer(s, f)
	go func() { _ = s.Serve(l) }()
	t.Cleanup(s.Stop)
	f.addr = l.Addr().String()
	return f
}

// deadAddr is an address nothing listens on.
func deadAddr(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	return addr
}

func TestRouterMapsRegionsToPeersAndExcludesItself(t *testing.T) {
	a := serve(t, &fakeStore{id: "a", regions: []string{"region-000", "region-002"}})
	b := serve(t, &fakeStore{id: "b", regions: []string{"region-001", "region-002"}})
	self := serve(t, &fakeStore{regions: []string{"region-003"}})
	dead := deadAddr(t)

	var mu sync.Mutex
	peers := []string{dead, self.addr, b.addr, a.addr, a.addr}
	r := New(Options{
		Peers:         func() []string { mu.Lock(); defer mu.Unlock(); return slices.Clone(peers) },
		MinRefreshGap: time.Nanosecond, // refresh at once, every time
	})
	defer r.Close()
	self.mu.Lock()
	self.id = r.Self() // self is reached by an address like any other peer
	self.mu.Unlock()

	_, gen := r.Owners("region-000")
	r.Refresh(gen)
	want := map[string][]string{
		"region-000": {a.addr},
		"region-001": {b.addr},
		// Moving between stores: both list it; the forwarder tries each.
		"region-002": sorted(a.addr, b.addr),
		// Only this store lists it: never forward to oneself.
		"region-003": nil,
	}
	for region, addrs := range want {
		if got, _ := r.Owners(region); !slices.Equal(got, addrs) {
			t.Errorf("owners of %s = %v, want %v", region, got, addrs)
		}
	}

	// A refresh with an outdated generation is a no-op: someone else
	// already refreshed after the caller looked.
	b.set("region-001")
	_, newGen := r.Owners("region-002")
	r.Refresh(gen)
	if got, _ := r.Owners("region-002"); len(got) != 2 {
		t.Fatalf("refresh with stale generation %d (now %d) changed the map: %v", gen, newGen, got)
	}
	r.Refresh(newGen)
	if got, _ := r.Owners("region-002"); !slices.Equal(got, []string{a.addr}) {
		t.Fatalf("after b released region-002: owners %v, want [%s]", got, a.addr)
	}

	// A peer discovery no longer lists is dropped, with its connection.
	l, err := r.Acquire(context.Background(), b.addr)
	if err != nil {
		t.Fatal(err)
	}
	l.Release()
	mu.Lock()
	peers = []string{a.addr, self.addr}
	mu.Unlock()
	_, gen = r.Owners("region-001")
	r.Refresh(gen)
	if got, _ := r.Owners("region-001"); got != nil {
		t.Fatalf("region-001 still routed to %v after its store left", got)
	}
	r.mu.Lock()
	_, kept := r.conns[b.addr]
	r.mu.Unlock()
	if kept {
		t.Fatalf("connection to departed peer %s kept", b.addr)
	}
}

func sorted(s ...string) []string { slices.Sort(s); return s }
