package client

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/bellows-kv/bellows/internal/sercheck"
	kvpb "github.com/bellows-kv/bellows/proto/bellows/kv/v1"
	"github.com/bellows-kv/bellows/storage-engine/server"
	"github.com/bellows-kv/bellows/storage-engine/server/route"
)

// startTwoStores serves two stores over real gRPC, each owning one of two
// regions split at "m" and forwarding to the other, and returns a client
// seeded with both.
func startTwoStores(t *testing.T) *Client {
	t.Helper()
	spans, err := server.SplitAt([]string{"m"})
	if err != nil {
		t.Fatal(err)
	}
	b := openBucket(t)
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
		s := openStore(t, b, (server.Owner{Ordinal: i, Replicas: 2}).Owned(spans), server.StoreOptions{})
		srv := grpc.NewServer()
		kvpb.RegisterKVServer(srv, server.NewKV(s, &server.Forwarding{Spans: spans, Router: router}, nil))
		go func() { _ = srv.Serve(l) }()
		t.Cleanup(srv.Stop)
	}
	c, err := New(context.Background(), addrs, Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// The list-append workload's keys: registers read in pairs (one of each
// region), and a scanned range whose keys are inserted into.
var (
	pairKeys  = []string{"a1", "a2", "x1", "x2"}
	rangeKeys = []string{"p1", "p2", "p3"} // all in [p, q), region-001
)

func decodeList(v []byte, found bool) []int {
	if !found || len(v) == 0 {
		return nil
	}
	var out []int
	for _, f := range strings.Split(string(v), ",") {
		n, _ := strconv.Atoi(f)
		out = append(out, n)
	}
	return out
}

func encodeList(l []int) []byte {
	parts := make([]string, len(l))
	for i, n := range l {
		parts[i] = strconv.Itoa(n)
	}
	return []byte(strings.Join(parts, ","))
}

// appendWorkload runs workers × perWorker list-append transactions with
// opts: half read two keys and append to one (write skew's shape), half
// scan [p, q) and append to one key of it (a phantom's). A commit refused
// as a conflict is recorded as aborted and the worker goes on. It returns
// the history, with a final reading of every key.
func appendWorkload(t *testing.T, c *Client, seed uint64, workers, perWorker int, opts ...TxnOption) []sercheck.Txn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var (
		mu      sync.Mutex
		history []sercheck.Txn
		elem    atomic.Int64
		wg      sync.WaitGroup
		failed  atomic.Value
	)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, uint64(w)))
			for i := range perWorker {
				rec, err := appendTxn(ctx, c, rng, int(elem.Add(1)), fmt.Sprintf("w%d-%d", w, i), opts...)
				if err != nil {
					failed.CompareAndSwap(nil, err)
					return
				}
				mu.Lock()
				history = append(history, rec)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if err, _ := failed.Load().(error); err != nil {
		t.Fatal(err)
	}
	final := sercheck.Txn{ID: "final", Committed: true, Reads: map[string][]int{}}
	for _, k := range append(slices.Clone(pairKeys), rangeKeys...) {
		v, found, err := c.Get(ctx, []byte(k))
		if err != nil {
			t.Fatal(err)
		}
		final.Reads[k] = decodeList(v, found)
	}
	return append(history, final)
}

// appendTxn runs one transaction of the workload, appending element e.
func appendTxn(ctx context.Context, c *Client, rng *rand.Rand, e int, id string, opts ...TxnOption) (sercheck.Txn, error) {
	rec := sercheck.Txn{ID: id, Reads: map[string][]int{}, Appends: map[string]int{}}
	txn, err := c.Begin(ctx, opts...)
	if err != nil {
		return rec, err
	}
	var target string
	if rng.IntN(2) == 0 {
		i := rng.IntN(2)
		keys := []string{pairKeys[i], pairKeys[2+rng.IntN(2)]}
		for _, k := range keys {
			v, found, err := txn.Get(ctx, []byte(k))
			if err != nil {
				return rec, err
			}
			rec.Reads[k] = decodeList(v, found)
		}
		target = keys[rng.IntN(2)]
	} else {
		rows, err := txn.ScanAll(ctx, []byte("p"), []byte("q"), ScanOptions{})
		if err != nil {
			return rec, err
		}
		for _, k := range rangeKeys {
			rec.Reads[k] = nil
		}
		for _, r := range rows {
			rec.Reads[string(r.Key)] = decodeList(r.Value, true)
		}
		target = rangeKeys[rng.IntN(len(rangeKeys))]
	}
	txn.Put([]byte(target), encodeList(append(slices.Clone(rec.Reads[target]), e)))
	rec.Appends[target] = e
	_, err = txn.Commit(ctx)
	switch {
	case err == nil:
		rec.Committed = true
	case !errors.Is(err, ErrConflict):
		return rec, fmt.Errorf("transaction %s: %w", id, err)
	}
	return rec, nil
}

// The same workload across two stores' regions: under snapshot isolation
// the checker finds write skew and phantoms (G2 cycles) and nothing worse;
// serializable transactions leave no cycle at all, over several seeds.
func TestSerializableTransactionsLeaveNoDependencyCycle(t *testing.T) {
	c := startTwoStores(t)
	si := sercheck.Check(appendWorkload(t, c, 1, 6, 40))
	if si.Count(sercheck.G2) == 0 {
		t.Fatalf("snapshot isolation: no G2 found in %d committed transactions (edges %v): the workload provokes no write skew, so it shows nothing",
			si.Committed, si.Edges)
	}
	if n := len(si.Anomalies) - si.Count(sercheck.G2); n != 0 {
		t.Fatalf("snapshot isolation: anomalies it forbids: %v", si.Anomalies)
	}
	t.Logf("snapshot isolation: %d committed, %d G2 cycles, e.g. %s", si.Committed, si.Count(sercheck.G2), si.Anomalies[0])
	for seed := uint64(2); seed < 5; seed++ {
		c := startTwoStores(t)
		r := sercheck.Check(appendWorkload(t, c, seed, 6, 40, Serializable()))
		if len(r.Anomalies) != 0 {
			t.Fatalf("serializable, seed %d: %d committed, anomalies %v", seed, r.Committed, r.Anomalies)
		}
		if r.Committed < 40 {
			t.Fatalf("serializable, seed %d: only %d of 240 committed", seed, r.Committed)
		}
		t.Logf("serializable, seed %d: %d committed, 0 anomalies, edges %v", seed, r.Committed, r.Edges)
	}
}
