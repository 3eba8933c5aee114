package process

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"golang.org/x/time/rate"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/bellows-kv/bellows/internal/contract"
	kvpb "github.com/bellows-kv/bellows/proto/bellows/kv/v1"
)

// history runs concurrent clients doing puts, gets and scans on a few keys
// and records every operation for a linearizability check (porcupine): puts
// and gets against a register per key, and then everything, scans included,
// against a map of all keys (a scan of one region reads one snapshot, so it
// must see some linearization point's whole state).
type history struct {
	kv      atomic.Value // kvpb.KVClient; swapped when a store restarts
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
	// perClient is each client's rate of operations (default 200/s);
	// hotLo, hotHi bound the keys the clients use, [hotLo, hotHi) (default
	// all): moving them makes regions hot and cold.
	perClient    rate.Limit
	hotLo, hotHi atomic.Int32
	// failurePause, when set, is how long a client pauses after a failed
	// call instead of waiting for setKV: for faults the store recovers
	// from by itself (a region moving), not a dead store.
	failurePause time.Duration
	// scanEvery: every scanEvery-th operation of a client is a scan
	// (default 10). A scan reads every region, so it keeps them all warm.
	scanEvery int
	// retryFor, when set, retries a call that failed with UNAVAILABLE
	// (a region splitting, merging or moving) for up to this long, a put
	// under one idempotency key so that it applies once: the operation
	// spans every attempt, and its outcome is known.
	retryFor time.Duration
}

type regInput struct {
	put   bool
	scan  bool // every reg- key
	key   string
	value string
}

type regOutput struct {
	value string            // "" = absent
	rows  map[string]string // scan
}

func newHistory(kv kvpb.KVClient, clients, keys int) *history {
	h := &history{clients: clients, keys: keys, start0: time.Now(), swapped: make(chan struct{}), perClient: 200, scanEvery: 10}
	h.kv.Store(&kv)
	h.hotHi.Store(int32(keys))
	return h
}

// setKV points the clients at another store (the same region restarted).
func (h *history) setKV(kv kvpb.KVClient) {
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

// setHot makes the clients use keys [lo, hi) from now on.
func (h *history) setHot(lo, hi int) {
	h.hotHi.Store(int32(hi))
	h.hotLo.Store(int32(lo))
}

func (h *history) client() kvpb.KVClient { return *h.kv.Load().(*kvpb.KVClient) }

func (h *history) now() int64 { return int64(time.Since(h.start0)) }

func (h *history) start() {
	for c := range h.clients {
		h.wg.Add(1)
		go func() {
			defer h.wg.Done()
			// A paced client leaves the store's CPU to the fault under
			// test and keeps the history small enough to check.
			lim := rate.NewLimiter(h.perClient, 1)
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
		switch {
		case failed && h.failurePause > 0:
			time.Sleep(h.failurePause) // pacing after a failure, not synchronization
		case failed:
			h.awaitSwap(seen)
		}
	}()
	lo, hi := int(h.hotLo.Load()), int(h.hotHi.Load())
	in := regInput{key: fmt.Sprintf("reg-%d", lo+rand.IntN(hi-lo))}
	call := h.now()
	var out regOutput
	ret := int64(0)
	if i%h.scanEvery == 0 {
		// Every tenth operation of each client, the first included, is a
		// scan: a history cut short by its fault still has scans to check
		// (a random 10% left 46 operations without one, 1 run in 120).
		in = regInput{scan: true}
		var rows map[string]string
		err := h.retry(func() (err error) {
			rows, err = h.scan(ctx)
			return err
		})
		if err != nil {
			failed = true
			return
		}
		ret = h.now()
		out.rows = rows
	} else if rand.IntN(2) == 0 {
		in.put, in.value = true, fmt.Sprintf("c%d-%d", client, i)
		pctx := metadata.AppendToOutgoingContext(ctx, contract.RequestIDHeader, fmt.Sprintf("history-%d-%d-%d", h.start0.UnixNano(), client, i))
		err := h.retry(func() error {
			_, err := h.client().Put(pctx, &kvpb.PutRequest{Key: []byte(in.key), Value: []byte(in.value)})
			return err
		})
		ret = h.now()
		if err != nil {
			// Unknown outcome: it may take effect at any later time.
			ret = math.MaxInt64
			failed = true
		}
	} else {
		var r *kvpb.GetResponse
		err := h.retry(func() (err error) {
			r, err = h.client().Get(ctx, &kvpb.GetRequest{Key: []byte(in.key)})
			return err
		})
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

// retry runs call until it succeeds or fails otherwise than UNAVAILABLE,
// for up to retryFor (once when unset).
func (h *history) retry(call func() error) error {
	deadline := time.Now().Add(h.retryFor)
	for {
		err := call()
		if err == nil || status.Code(err) != codes.Unavailable || time.Now().After(deadline) {
			return err
		}
		time.Sleep(10 * time.Millisecond) // pacing between attempts, not synchronization
	}
}

// scan reads every reg- key in one Scan call.
func (h *history) scan(ctx context.Context) (map[string]string, error) {
	s, err := h.client().Scan(ctx, &kvpb.ScanRequest{Start: []byte("reg-"), End: []byte("reg.")})
	if err != nil {
		return nil, err
	}
	rows := map[string]string{}
	for {
		resp, err := s.Recv()
		if errors.Is(err, io.EOF) {
			return rows, nil
		}
		if err != nil {
			return nil, err
		}
		for _, kv := range resp.Pairs {
			rows[string(kv.Key)] = string(kv.Value)
		}
	}
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
			in := op.Input.(regInput)
			if in.scan {
				continue // checked by mapModel
			}
			by[in.key] = append(by[in.key], op)
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

// mapModel is the whole key space: scans must return all of it as of one
// instant. Its states are immutable maps.
var mapModel = porcupine.Model{
	Init: func() any { return map[string]string{} },
	Step: func(state, input, output any) (bool, any) {
		st, in := state.(map[string]string), input.(regInput)
		switch {
		case in.put:
			next := maps.Clone(st)
			next[in.key] = in.value
			return true, next
		case in.scan:
			return maps.Equal(output.(regOutput).rows, st), st
		default:
			return output.(regOutput).value == st[in.key], st
		}
	},
	Equal: func(a, b any) bool { return maps.Equal(a.(map[string]string), b.(map[string]string)) },
	DescribeOperation: func(input, output any) string {
		if in := input.(regInput); in.scan {
			return fmt.Sprintf("scan → %v", output.(regOutput).rows)
		}
		return registerModel.DescribeOperation(input, output)
	},
}

func (h *history) check(t *testing.T) {
	t.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	scans := 0
	for _, op := range h.ops {
		if op.Input.(regInput).scan {
			scans++
		}
	}
	if len(h.ops) < 10 || scans == 0 {
		t.Fatalf("history too short to mean anything: %d ops, %d scans", len(h.ops), scans)
	}
	if res, _ := porcupine.CheckOperationsVerbose(registerModel, h.ops, 30*time.Second); res != porcupine.Ok {
		t.Fatalf("history of %d operations is not linearizable per key (%v)", len(h.ops), res)
	}
	started := time.Now()
	res, _ := porcupine.CheckOperationsVerbose(mapModel, h.ops, 60*time.Second)
	if res != porcupine.Ok {
		t.Fatalf("history of %d operations (%d scans) is not linearizable as a whole (%v after %v)", len(h.ops), scans, res, time.Since(started))
	}
	t.Logf("history of %d operations (%d scans) is linearizable (whole-history check %v)", len(h.ops), scans, time.Since(started).Round(time.Millisecond))
}

// The whole-keyspace model rejects a scan that saw one write but not an
// earlier one: no instant had that state.
func TestMapModelRejectsATornScan(t *testing.T) {
	ops := []porcupine.Operation{
		{ClientId: 0, Input: regInput{put: true, key: "reg-0", value: "a"}, Call: 0, Return: 1},
		{ClientId: 0, Input: regInput{put: true, key: "reg-1", value: "b"}, Call: 2, Return: 3},
		{ClientId: 1, Input: regInput{scan: true}, Output: regOutput{rows: map[string]string{"reg-1": "b"}}, Call: 4, Return: 5},
	}
	if res := porcupine.CheckOperationsTimeout(mapModel, ops, 0); res != porcupine.Illegal {
		t.Fatalf("a torn scan was accepted: %v", res)
	}
	ops[2].Output = regOutput{rows: map[string]string{"reg-0": "a", "reg-1": "b"}}
	if res := porcupine.CheckOperationsTimeout(mapModel, ops, 0); res != porcupine.Ok {
		t.Fatalf("a whole scan was rejected: %v", res)
	}
}
