package process

import (
	"context"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	kvpb "github.com/bellows-kv/bellows/proto/bellows/kv/v1"
)

// writeLog is what the writers saw: every acknowledged write, and the
// codes of the failed ones.
type writeLog struct {
	mu       sync.Mutex
	acked    map[string]string // key → value
	failed   map[string]bool   // keys whose write failed (maybe applied)
	codes    map[codes.Code]int
	bad      []string // failures with a code other than UNAVAILABLE / DEADLINE_EXCEEDED
	attempts atomic.Int64
	// routes counts the acknowledged writes by entry store (writer w
	// enters through store w%2) and region.
	routes [2][4]int
}

func (w *writeLog) record(writer, region int, key, value string, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if err == nil {
		w.acked[key] = value
		w.routes[writer%2][region]++
		return
	}
	w.failed[key] = true
	c := status.Code(err)
	w.codes[c]++
	if c != codes.Unavailable && c != codes.DeadlineExceeded && len(w.bad) < 20 {
		w.bad = append(w.bad, fmt.Sprintf("put %q: %v", key, err))
	}
}

func (w *writeLog) routeCounts() [2][4]int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.routes
}

// Two stores forward to each other under a steady write load while each in
// turn is restarted (SIGTERM, then SIGKILL), so each one's connections to
// the other break and are re-dialled repeatedly with calls running over
// them. Every failed write is UNAVAILABLE or DEADLINE_EXCEEDED — never
// CANCELLED — and every acknowledged write reads back.
func TestForwardingSurvivesPeerRestartsUnderLoad(t *testing.T) {
	bucket := "file://" + t.TempDir()
	addrA, addrB := freeAddr(t), freeAddr(t)
	walA, walB := t.TempDir(), t.TempDir()
	peers := addrA + "," + addrB
	stores := map[string]*proc{
		"store-a": startPeerStore(t, "store-a", bucket, walA, addrA, "0/2", peers),
		"store-b": startPeerStore(t, "store-b", bucket, walB, addrB, "1/2", peers),
	}
	// forwarded sums each store's forwarded puts over its lifetimes.
	forwarded := map[string]float64{}
	restart := func(name string, graceful bool) {
		p := stores[name]
		forwarded[name] += p.metric(t, `bellows_kv_forwarded_total{op="put"}`)
		if graceful {
			p.terminate()
		} else {
			p.kill()
		}
		addr, wal, owner := addrA, walA, "0/2"
		if name == "store-b" {
			addr, wal, owner = addrB, walB, "1/2"
		}
		stores[name] = startPeerStore(t, name, bucket, wal, addr, owner, peers)
	}

	// The writers' connections outlive the processes: gRPC reconnects to
	// the same address once a store is back.
	conns := map[string]*grpc.ClientConn{}
	for name, addr := range map[string]string{"store-a": addrA, "store-b": addrB} {
		c, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		conns[name] = c
	}

	log := &writeLog{acked: map[string]string{}, failed: map[string]bool{}, codes: map[codes.Code]int{}}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 4 {
		entry := []string{"store-a", "store-b"}[w%2]
		client := kvpb.NewKVClient(conns[entry])
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				// Every region in turn: half of each writer's puts are
				// forwarded by its entry store.
				key := string(regionKey(n%4, fmt.Sprintf("w%d-%06d", w, n)))
				value := "v-" + key
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				_, err := client.Put(ctx, &kvpb.PutRequest{Key: []byte(key), Value: []byte(value)})
				cancel()
				log.attempts.Add(1)
				log.record(w, n%4, key, value, err)
				if err != nil {
					time.Sleep(5 * time.Millisecond) // back off while a store is down, not synchronisation
				}
			}
		}()
	}
	defer func() {
		select {
		case <-stop:
		default:
			close(stop)
		}
		wg.Wait()
	}()

	// progress waits until the writers have had more writes acknowledged
	// through each store to each region: both stores forward to the
	// other's regions again.
	progress := func(what string, more int) {
		t.Helper()
		base := log.routeCounts()
		waitFor(t, what, func() bool {
			now := log.routeCounts()
			for e := range now {
				for r := range now[e] {
					if now[e][r] < base[e][r]+more {
						return false
					}
				}
			}
			return true
		})
	}
	progress("writes before the first restart", 50)
	for i, c := range []struct {
		name     string
		graceful bool
	}{
		{"store-b", true}, {"store-a", true}, {"store-b", false}, {"store-a", false},
		{"store-b", true}, {"store-b", false}, {"store-a", true}, {"store-a", false},
	} {
		restart(c.name, c.graceful)
		progress(fmt.Sprintf("writes after restart %d (%s, graceful=%t)", i+1, c.name, c.graceful), 50)
	}
	close(stop)
	wg.Wait()

	log.mu.Lock()
	defer log.mu.Unlock()
	t.Logf("%d writes: %d acknowledged, failures by code %v", log.attempts.Load(), len(log.acked), log.codes)
	for _, b := range log.bad {
		t.Errorf("failed write with a code other than UNAVAILABLE or DEADLINE_EXCEEDED: %s", b)
	}

	// Every acknowledged write reads back, through either store (a scan of
	// the whole key space, every other region forwarded); a key that is
	// there without an acknowledgement must be one whose write failed.
	for name, p := range stores {
		got := map[string]string{}
		waitFor(t, "a whole scan through "+name, func() bool {
			clear(got)
			stream, err := p.kv().Scan(context.Background(), &kvpb.ScanRequest{})
			if err != nil {
				return false
			}
			for {
				resp, err := stream.Recv()
				if err == io.EOF {
					return true
				}
				if err != nil {
					return false
				}
				for _, kv := range resp.Pairs {
					got[string(kv.Key)] = string(kv.Value)
				}
			}
		})
		missing := 0
		for k, v := range log.acked {
			if got[k] != v {
				if missing++; missing <= 10 {
					t.Errorf("acknowledged put %q = %q: scan through %s has %q", k, v, name, got[k])
				}
			}
		}
		for k := range got {
			if _, ok := log.acked[k]; !ok && !log.failed[k] {
				t.Errorf("scan through %s: key %q was never written", name, k)
			}
		}
		if missing > 0 {
			t.Fatalf("%d of %d acknowledged writes missing through %s", missing, len(log.acked), name)
		}
		if n := forwarded[name] + p.metric(t, `bellows_kv_forwarded_total{op="put"}`); n < 50 {
			t.Errorf("%s forwarded %v puts, want many", name, n)
		}
	}
}
