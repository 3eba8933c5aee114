//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kvapi "github.com/bellows-kv/bellows/api/v1alpha1"
	"github.com/bellows-kv/bellows/internal/contract"
	kvpb "github.com/bellows-kv/bellows/proto/bellows/kv/v1"
)

// kvClient routes each key to the storage pod serving its region, as a
// region-aware client may: it saves the hop a store takes to forward a
// request for another store's region (the client Service alone serves any
// key; offloadedCompaction checks it), and it lets the tests aim at one pod. It
// discovers the stores from the API (pods of the KVCluster; there is no
// cluster DNS) and their regions with the Regions RPC, and rediscovers when
// a store is unreachable or answers UNAVAILABLE / OUT_OF_RANGE (a rolling
// restart), retrying until the per-call deadline.
type kvClient struct {
	c        client.Client
	ns, name string

	mu     sync.Mutex
	creds  credentials.TransportCredentials
	conns  map[string]*grpc.ClientConn // pod IP:port → connection
	routes []route
}

type route struct {
	region     string
	start, end []byte
	addr       string
	pod        string
	// bytes is the region's data as its store reports it; waiting, when
	// set, says the store is assigned the region but has not opened it
	// (a move under way).
	bytes   int64
	waiting string
}

func newKVClient(c client.Client, ns, name string) *kvClient {
	return &kvClient{c: c, ns: ns, name: name, conns: map[string]*grpc.ClientConn{}}
}

func (k *kvClient) Close() {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, c := range k.conns {
		_ = c.Close()
	}
}

// transport is how the client dials the cluster's pods: with its admin
// client certificate when the cluster has TLS (read once, when first
// needed: the operator issues it after the KVCluster is created).
func (k *kvClient) transport(ctx context.Context) (credentials.TransportCredentials, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.creds != nil {
		return k.creds, nil
	}
	var c kvapi.KVCluster
	if err := k.c.Get(ctx, client.ObjectKey{Namespace: k.ns, Name: k.name}, &c); err != nil {
		return nil, err
	}
	if !c.Spec.TLS.TLSEnabled() {
		k.creds = insecure.NewCredentials()
		return k.creds, nil
	}
	cfg, err := secretTLS(ctx, k.c, k.ns, c.ClientTLSSecretName("admin"))
	if err != nil {
		return nil, err
	}
	k.creds = credentials.NewTLS(cfg)
	return k.creds, nil
}

func (k *kvClient) conn(ctx context.Context, addr string) (*grpc.ClientConn, error) {
	creds, err := k.transport(ctx)
	if err != nil {
		return nil, status.Error(codes.Unavailable, err.Error())
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if c := k.conns[addr]; c != nil {
		return c, nil
	}
	c, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		return nil, err
	}
	k.conns[addr] = c
	return c, nil
}

// discover rebuilds the routing table from the Ready storage pods.
func (k *kvClient) discover(ctx context.Context) error {
	var pods corev1.PodList
	if err := k.c.List(ctx, &pods, client.InNamespace(k.ns), client.MatchingLabels{
		contract.LabelInstance: k.name, contract.LabelComponent: contract.ComponentStore,
	}); err != nil {
		return err
	}
	var routes []route
	for i := range pods.Items {
		p := &pods.Items[i]
		if !podReady(p) {
			continue
		}
		addr := fmt.Sprintf("%s:%d", p.Status.PodIP, contract.StoreGRPCPort)
		conn, err := k.conn(ctx, addr)
		if err != nil {
			return err
		}
		cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		r, err := kvpb.NewKVClient(conn).Regions(cctx, &kvpb.RegionsRequest{})
		cancel()
		if err != nil {
			continue // not serving yet
		}
		for _, g := range r.Regions {
			routes = append(routes, route{region: g.Name, start: g.Start, end: g.End, addr: addr, pod: p.Name, bytes: g.DataBytes, waiting: g.Waiting})
		}
	}
	k.mu.Lock()
	k.routes = routes
	k.mu.Unlock()
	if len(routes) == 0 {
		return status.Error(codes.Unavailable, "no storage pod serves any region yet")
	}
	return nil
}

func (k *kvClient) route(key []byte) (route, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, r := range k.routes {
		if bytes.Compare(key, r.start) >= 0 && (len(r.end) == 0 || bytes.Compare(key, r.end) < 0) {
			return r, true
		}
	}
	return route{}, false
}

// Regions is the current routing table (discovering it first).
func (k *kvClient) Regions(ctx context.Context) ([]route, error) {
	if err := k.discover(ctx); err != nil {
		return nil, err
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	return append([]route(nil), k.routes...), nil
}

// retryable: the errors a rolling restart or a moving region produce.
func retryable(err error) bool {
	switch status.Code(err) {
	case codes.Unavailable, codes.OutOfRange, codes.FailedPrecondition, codes.DeadlineExceeded:
		return true
	}
	return false
}

// do runs f against the store serving key, rediscovering and retrying on
// retryable errors until ctx ends. retries counts the retried attempts.
func (k *kvClient) do(ctx context.Context, key []byte, f func(ctx context.Context, conn *grpc.ClientConn) error) (retries int, err error) {
	for {
		r, ok := k.route(key)
		if !ok {
			err = status.Errorf(codes.Unavailable, "no route for key %q", key)
		} else {
			var conn *grpc.ClientConn
			if conn, err = k.conn(ctx, r.addr); err == nil {
				actx, cancel := context.WithTimeout(ctx, 5*time.Second)
				err = f(actx, conn)
				cancel()
			}
		}
		if err == nil || !retryable(err) || ctx.Err() != nil {
			return retries, err
		}
		retries++
		select {
		case <-ctx.Done():
			return retries, err
		case <-time.After(200 * time.Millisecond):
		}
		_ = k.discover(ctx)
	}
}

// Put writes key=value; a nil error means the write was acknowledged.
func (k *kvClient) Put(ctx context.Context, key, value []byte) (int, error) {
	return k.do(ctx, key, func(ctx context.Context, conn *grpc.ClientConn) error {
		_, err := kvpb.NewKVClient(conn).Put(ctx, &kvpb.PutRequest{Key: key, Value: value})
		return err
	})
}

// Get reads the newest value of key.
func (k *kvClient) Get(ctx context.Context, key []byte) (value []byte, found bool, retries int, err error) {
	retries, err = k.do(ctx, key, func(ctx context.Context, conn *grpc.ClientConn) error {
		r, err := kvpb.NewKVClient(conn).Get(ctx, &kvpb.GetRequest{Key: key})
		if err == nil {
			value, found = r.Value, r.Found
		}
		return err
	})
	return value, found, retries, err
}

// Admin calls f with the Admin client of the store serving region r.
func (k *kvClient) Admin(ctx context.Context, r route, f func(ctx context.Context, a kvpb.AdminClient) error) error {
	_, err := k.do(ctx, r.start, func(ctx context.Context, conn *grpc.ClientConn) error {
		return f(ctx, kvpb.NewAdminClient(conn))
	})
	return err
}

// keyFor spreads keys over the whole key space (regions split it by the first
// byte): the first byte cycles through 0..255.
func keyFor(prefix string, i int) []byte {
	return append([]byte{byte(i * 37)}, fmt.Sprintf("%s-%06d", prefix, i)...)
}

// ledger records every acknowledged write: the value the key must read back.
type ledger struct {
	mu    sync.Mutex
	acked map[string][]byte
}

func newLedger() *ledger { return &ledger{acked: map[string][]byte{}} }

func (l *ledger) ack(key, value []byte) {
	l.mu.Lock()
	l.acked[string(key)] = append([]byte(nil), value...)
	l.mu.Unlock()
}

func (l *ledger) snapshot() map[string][]byte {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make(map[string][]byte, len(l.acked))
	for k, v := range l.acked {
		out[k] = v
	}
	return out
}

// verify reads back every acknowledged write and returns the keys that are
// missing or hold another value.
func (l *ledger) verify(ctx context.Context, k *kvClient) (checked int, bad []string, err error) {
	for key, want := range l.snapshot() {
		got, found, _, err := k.Get(ctx, []byte(key))
		if err != nil {
			return checked, bad, fmt.Errorf("get %q: %w", key, err)
		}
		checked++
		if !found || !bytes.Equal(got, want) {
			bad = append(bad, fmt.Sprintf("%q (found=%t, %d bytes, want %d bytes)", key, found, len(got), len(want)))
		}
	}
	return checked, bad, nil
}
