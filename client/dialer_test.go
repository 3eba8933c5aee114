package client

import (
	"context"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/bellows-kv/bellows/storage-engine/server"
)

// A Dialer is given each store's address as named, unresolved: a name
// that only the dialer knows (a pod's, reached by a port-forward from
// outside its cluster) must reach it, where gRPC's default resolver would
// look the name up by DNS first and fail ("produced zero addresses").
func TestADialerReachesNamesOnlyItKnows(t *testing.T) {
	spans, err := server.SplitEvenly(1)
	if err != nil {
		t.Fatal(err)
	}
	real := serveKV(t, server.NewKV(openStore(t, openBucket(t), spans, server.StoreOptions{}), nil, nil))
	const name = "store-0.bellows.invalid:7000" // .invalid never resolves (RFC 6761)
	var mu sync.Mutex
	var asked []string
	dialer := func(ctx context.Context, addr string) (net.Conn, error) {
		mu.Lock()
		asked = append(asked, addr)
		mu.Unlock()
		var d net.Dialer
		return d.DialContext(ctx, "tcp", real)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := New(ctx, []string{name}, Options{Dialer: dialer})
	if err != nil {
		t.Fatalf("New through a dialer that knows %s: %v", name, err)
	}
	defer c.Close()
	if _, err := c.Put(ctx, []byte("k"), []byte("v")); err != nil {
		t.Fatal(err)
	}
	if got, found, err := c.Get(ctx, []byte("k")); err != nil || !found || string(got) != "v" {
		t.Fatalf("get k = %q, %v, %v; want v", got, found, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if !slices.Contains(asked, name) {
		t.Errorf("the dialer was asked for %q, not for the seed's name %s", asked, name)
	}
}
