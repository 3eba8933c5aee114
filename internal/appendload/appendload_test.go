package appendload_test

import (
	"context"
	"net"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/bellows-kv/bellows/client"
	"github.com/bellows-kv/bellows/internal/appendload"
	"github.com/bellows-kv/bellows/internal/sercheck"
	kvpb "github.com/bellows-kv/bellows/proto/bellows/kv/v1"
	"github.com/bellows-kv/bellows/storage-engine/blob"
	"github.com/bellows-kv/bellows/storage-engine/region"
	"github.com/bellows-kv/bellows/storage-engine/server"
	"github.com/bellows-kv/bellows/storage-engine/server/route"
)

// startTwoStores serves two stores in this process over real gRPC, each
// owning one of two regions split at "m" and forwarding to the other, and
// returns a client seeded with both.
func startTwoStores(t *testing.T) *client.Client {
	t.Helper()
	ctx := context.Background()
	spans, err := server.SplitAt([]string{"m"})
	if err != nil {
		t.Fatal(err)
	}
	b, err := blob.Open(ctx, "file://"+filepath.Join(t.TempDir(), "bucket"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	var lis []net.Listener
	var addrs []string
	for range 2 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lis = append(lis, l)
		addrs = append(addrs, l.Addr().String())
	}
	for i, l := range lis {
		router := route.New(route.Options{Peers: func() []string { return addrs }})
		t.Cleanup(func() { _ = router.Close() })
		s, err := server.OpenStore(ctx, (server.Owner{Ordinal: i, Replicas: 2}).Owned(spans),
			server.StoreOptions{WALRoot: t.TempDir(), Region: region.Options{Bucket: b, DisableAutoCompaction: true}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		srv := grpc.NewServer()
		kvpb.RegisterKVServer(srv, server.NewKV(s, &server.Forwarding{Spans: spans, Router: router}, nil))
		go func() { _ = srv.Serve(l) }()
		t.Cleanup(srv.Stop)
	}
	c, err := client.New(ctx, addrs, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// Pairs in both regions (a…, x…), the scanned range in region-001.
var keys = appendload.Keys{
	Pairs:      [][]byte{[]byte("a1"), []byte("a2"), []byte("x1"), []byte("x2")},
	RangeStart: []byte("p"), RangeEnd: []byte("q"),
	Range: [][]byte{[]byte("p1"), []byte("p2"), []byte("p3")},
}

func history(t *testing.T, c *client.Client, o appendload.Options) (sercheck.Report, appendload.Stats) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	h, st, err := appendload.Run(ctx, c, keys, o, nil)
	if err != nil {
		t.Fatal(err)
	}
	if st.Unknown > 0 || st.ReadFailures > 0 {
		t.Fatalf("with no faults: %+v", st)
	}
	final, err := appendload.Final(ctx, c, keys)
	if err != nil {
		t.Fatal(err)
	}
	return sercheck.Check(append(h, final)), st
}

// The workload across two stores' regions: under snapshot isolation the
// checker finds write skew and phantoms (G2 cycles) and nothing worse;
// serializable transactions leave no cycle at all, over several seeds.
func TestSerializableTransactionsLeaveNoDependencyCycle(t *testing.T) {
	si, _ := history(t, startTwoStores(t), appendload.Options{Workers: 6, PerWorker: 40, Seed: 1})
	if si.Count(sercheck.G2) == 0 {
		t.Fatalf("snapshot isolation: no G2 found in %d committed transactions (edges %v): the workload provokes no write skew, so it shows nothing",
			si.Committed, si.Edges)
	}
	if n := len(si.Anomalies) - si.Count(sercheck.G2); n != 0 {
		t.Fatalf("snapshot isolation: anomalies it forbids: %v", si.Anomalies)
	}
	t.Logf("snapshot isolation: %d committed, %d G2 cycles, e.g. %s", si.Committed, si.Count(sercheck.G2), si.Anomalies[0])
	for seed := uint64(2); seed < 5; seed++ {
		r, st := history(t, startTwoStores(t), appendload.Options{Workers: 6, PerWorker: 40, Seed: seed, Txn: []client.TxnOption{client.Serializable()}})
		if len(r.Anomalies) != 0 {
			t.Fatalf("serializable, seed %d: %d committed, anomalies %v", seed, r.Committed, r.Anomalies)
		}
		if st.Committed < 40 {
			t.Fatalf("serializable, seed %d: only %d of 240 committed (%+v)", seed, st.Committed, st)
		}
		t.Logf("serializable, seed %d: %d committed, %d refused, 0 anomalies, edges %v", seed, st.Committed, st.Conflicts, r.Edges)
	}
}
