package process

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"golang.org/x/time/rate"

	kvv1 "github.com/bellows-kv/bellows/proto/bellows/kv/v1"
)

// history runs concurrent clients doing puts and gets on a few keys and
// records every operation for a linearizability check (porcupine,
// single-key register model, partitioned by key).
type history struct {
	kv      atomic.Value // kvv1.KVClient; swapped when a store restarts
	clients int
	keys    int
	start0  time.Time
	stop    atomic.Bool
	after   atomic.Int64 // ops to do after stop is requested
	wg      sync.WaitGroup
	mu      sync.Mutex
	ops     []porcupine.Operation
	// swapped is closed when setKV points the clients at a new store. A
	// client whose call failed waits for it: thousands of calls to a dead
	// store would each be an operation of unknown outcome, which tell the
	// checker nothing and make its search explode.
	swapped chan struct{}
}

type regInput struct {
	put   bool
	key   string
	value string
}

type regOutput struct {
	value string // "" = absent
}

func newHistory(kv kvv1.KVClient, clients, keys int) *history {
	h := &history{clients: clients, keys: keys, start0: time.Now(), swapped: make(chan struct{})}
	h.kv.Store(&kv)
	return h
}

// setKV points the clients at another store (the same region restarted).
func (h *history) setKV(kv kvv1.KVClient) {
	h.kv.Store(&kv)
	h.mu.Lock()
	close(h.swapped)
	h.swapped = make(chan struct{})
	h.mu.Unlock()
}

// awaitSwap blocks a client after a failure until the store is replaced or
// the history stops.
func (h *history) awaitSwap(seen chan struct{}) {
	for !h.stop.Load() {
		select {
		case <-seen:
			return
		case <-time.After(50 * time.Millisecond): // re-check stop
		}
	}
}

func (h *history) client() kvv1.KVClient { return *h.kv.Load().(*kvv1.KVClient) }

func (h *history) now() int64 { return int64(time.Since(h.start0)) }

func (h *history) start() {
	for c := range h.clients {
		h.wg.Add(1)
		go func() {
			defer h.wg.Done()
			// A paced client leaves the store's CPU to the fault under
			// test and keeps the history small enough to check.
			lim := rate.NewLimiter(200, 1)
			for i := 0; ; i++ {
				if h.stop.Load() && h.after.Add(-1) < 0 {
					return
				}
				_ = lim.Wait(context.Background())
				h.one(c, i)
			}
		}()
	}
}

func (h *history) one(client, i int) {
	ctx := context.Background()
	h.mu.Lock()
	seen := h.swapped
	h.mu.Unlock()
	failed := false
	defer func() {
		if failed {
			h.awaitSwap(seen)
		}
	}()
	in := regInput{key: fmt.Sprintf("reg-%d", rand.IntN(h.keys))}
	call := h.now()
	var out regOutput
	ret := int64(0)
	if rand.IntN(2) == 0 {
		in.put, in.value = true, fmt.Sprintf("c%d-%d", client, i)
		_, err := h.client().Put(ctx, &kvv1.PutRequest{Key: []byte(in.key), Value: []byte(in.value)})
		ret = h.now()
		if err != nil {
			// Unknown outcome: it may take effect at any later time.
			ret = math.MaxInt64
			failed = true
		}
	} else {
		r, err := h.client().Get(ctx, &kvv1.GetRequest{Key: []byte(in.key)})
		if err != nil {
			failed = true
			return // a failed read constrains nothing
		}
		ret = h.now()
		if r.Found {
			out.value = string(r.Value)
		}
	}
	h.mu.Lock()
	h.ops = append(h.ops, porcupine.Operation{ClientId: client, Input: in, Call: call, Output: out, Return: ret})
	h.mu.Unlock()
}

// stopAfterMore lets each client do up to n more operations (so the history
// covers the state after the fault), then waits for them.
func (h *history) stopAfterMore(n int) {
	h.after.Store(int64(n))
	h.stop.Store(true)
	h.wg.Wait()
}

var registerModel = porcupine.Model{
	Partition: func(ops []porcupine.Operation) [][]porcupine.Operation {
		by := map[string][]porcupine.Operation{}
		for _, op := range ops {
			k := op.Input.(regInput).key
			by[k] = append(by[k], op)
		}
		var out [][]porcupine.Operation
		for _, p := range by {
			out = append(out, p)
		}
		return out
	},
	Init: func() any { return "" },
	Step: func(state, input, output any) (bool, any) {
		in := input.(regInput)
		if in.put {
			return true, in.value
		}
		return output.(regOutput).value == state.(string), state
	},
	Equal: func(a, b any) bool { return a == b },
	DescribeOperation: func(input, output any) string {
		in := input.(regInput)
		if in.put {
			return fmt.Sprintf("put(%s, %s)", in.key, in.value)
		}
		return fmt.Sprintf("get(%s) → %q", in.key, output.(regOutput).value)
	},
}

func (h *history) check(t *testing.T) {
	t.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.ops) < 10 {
		t.Fatalf("history too short to mean anything: %d ops", len(h.ops))
	}
	res, _ := porcupine.CheckOperationsVerbose(registerModel, h.ops, 30*time.Second)
	if res != porcupine.Ok {
		t.Fatalf("history of %d operations is not linearizable (%v)", len(h.ops), res)
	}
	t.Logf("history of %d operations is linearizable", len(h.ops))
}
