//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	bellows "github.com/bellows-kv/bellows/client"
	"github.com/bellows-kv/bellows/internal/contract"
)

// serviceSeed is the KVCluster's client Service as a client in the cluster
// reaches it: its ClusterIP and the store port (kube-proxy routes it on
// this node).
func (e *env) serviceSeed(t *testing.T, ctx context.Context) string {
	t.Helper()
	var svc corev1.Service
	if err := e.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: clusterName}, &svc); err != nil {
		t.Fatal(err)
	}
	if svc.Spec.ClusterIP == "" || svc.Spec.ClusterIP == corev1.ClusterIPNone {
		t.Fatalf("Service %s has no ClusterIP", svc.Name)
	}
	return net.JoinHostPort(svc.Spec.ClusterIP, strconv.Itoa(contract.StoreGRPCPort))
}

// serviceWatch watches the whole key space through the Go client seeded
// with the client Service, from just after a write of its own: what it
// delivers of the keys it keeps is checked against the acknowledged
// writes (expect).
type serviceWatch struct {
	stop func()

	mu   sync.Mutex
	seen map[string][]uint64 // key → the commit timestamps delivered, in order
	vals map[string]string   // key → the value delivered last
	err  error               // why the watch ended, if it did
}

func (e *env) startServiceWatch(t *testing.T, ctx context.Context, keep func(key []byte) bool) *serviceWatch {
	t.Helper()
	seed := e.serviceSeed(t, ctx)
	c, err := bellows.New(ctx, []string{seed}, e.clientOptions(t, clusterName, "write"))
	if err != nil {
		t.Fatalf("client seeded with the Service %s: %v", seed, err)
	}
	// Every write acknowledged after this one commits after it: the watch
	// delivers them all.
	mark, err := c.Put(ctx, []byte("service-watch-start"), []byte(time.Now().UTC().Format(time.RFC3339Nano)))
	if err != nil {
		_ = c.Close()
		t.Fatalf("put through the Service %s: %v", seed, err)
	}
	wctx, cancel := context.WithCancel(ctx)
	w := c.Watch(wctx, nil, nil, bellows.WatchOptions{AfterTS: mark.CommitTS})
	sw := &serviceWatch{seen: map[string][]uint64{}, vals: map[string]string{}}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for w.Next() {
			sw.mu.Lock()
			for _, ev := range w.Update().Events {
				if keep(ev.Key) && !ev.Delete {
					sw.seen[string(ev.Key)] = append(sw.seen[string(ev.Key)], ev.CommitTS)
					sw.vals[string(ev.Key)] = string(ev.Value)
				}
			}
			sw.mu.Unlock()
		}
		sw.mu.Lock()
		sw.err = w.Err()
		sw.mu.Unlock()
	}()
	sw.stop = func() {
		cancel()
		<-done
		w.Close()
		_ = c.Close()
	}
	t.Logf("watching every change after %d through the Service %s", mark.CommitTS, seed)
	return sw
}

// expect waits until every write in acked (key → value) has been
// delivered, then checks that no commit was delivered twice, that each
// key's commits came in order, and that each key's last value is the
// acknowledged one. A write that failed may have committed, and a retried
// one committed twice: those are deliveries of real commits, not
// repeats.
func (sw *serviceWatch) expect(t *testing.T, acked map[string]string, timeout time.Duration) {
	t.Helper()
	defer sw.stop()
	eventually(t, timeout, "the watch through the Service to deliver every acknowledged write", func(context.Context) (bool, string, error) {
		sw.mu.Lock()
		defer sw.mu.Unlock()
		if sw.err != nil {
			return false, "", fmt.Errorf("the watch ended: %w", sw.err)
		}
		missing := 0
		for k := range acked {
			if len(sw.seen[k]) == 0 {
				missing++
			}
		}
		return missing == 0, fmt.Sprintf("%d of %d acknowledged writes not delivered yet", missing, len(acked)), nil
	})
	sw.mu.Lock()
	defer sw.mu.Unlock()
	events := 0
	for k, ts := range sw.seen {
		events += len(ts)
		for i := 1; i < len(ts); i++ {
			if ts[i] <= ts[i-1] {
				t.Errorf("key %q: commits delivered as %v, a repeat or out of commit order", k, ts)
				break
			}
		}
		if want, ok := acked[k]; ok && sw.vals[k] != want {
			t.Errorf("key %q: the last value delivered is %q, the acknowledged one %q", k, sw.vals[k], want)
		}
	}
	t.Logf("the watch through the Service delivered %d commits of %d keys; %d acknowledged writes, each delivered", events, len(sw.seen), len(acked))
}
