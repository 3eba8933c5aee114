package client

import (
	"context"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	kvpb "github.com/bellows-kv/bellows/proto/bellows/kv/v1"
)

// refusingStore answers its first Regions call with a refusal that says
// why, and holds every later one until the caller gives up: the attempt in
// flight when New's deadline ends, as a TLS handshake under load is.
type refusingStore struct {
	kvpb.UnimplementedKVServer
	calls atomic.Int64
}

const refusalReason = "tls: the peer's certificate is not signed by the CA in ca.crt"

func (s *refusingStore) Regions(ctx context.Context, _ *kvpb.RegionsRequest) (*kvpb.RegionsResponse, error) {
	if s.calls.Add(1) == 1 {
		return nil, status.Error(codes.Unavailable, refusalReason)
	}
	<-ctx.Done()
	return nil, status.FromContextError(ctx.Err()).Err()
}

// Attempts that time out, the last one cut short by New's deadline, do not
// hide why an attempt before them failed (the CLI's `kv get` with another
// cluster's certificate said only "context deadline exceeded").
func TestNewReportsTheLastAnswerNotTheTimeoutsAfterIt(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &refusingStore{}
	srv := grpc.NewServer()
	kvpb.RegisterKVServer(srv, s)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)

	// The attempts after the first run out of time, each on its own
	// (RegionsTimeout) and the last on New's deadline. RegionsTimeout is
	// long enough for the first attempt's dial and answer on a loaded
	// machine: that one must get its refusal back.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := New(ctx, []string{lis.Addr().String()}, Options{RegionsTimeout: 500 * time.Millisecond})
	if err == nil {
		_ = c.Close()
		t.Fatal("New succeeded against a store that lists no region")
	}
	if s.calls.Load() < 3 {
		t.Fatalf("the store was asked %d times; the test needs attempts that time out after the refusal", s.calls.Load())
	}
	if !strings.Contains(err.Error(), refusalReason) || !strings.Contains(err.Error(), "deadline exceeded") {
		t.Fatalf("New's error does not give both the refusal and the deadline:\n%v", err)
	}
}
