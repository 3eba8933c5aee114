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
	// cas: a third of the puts are compare-and-sets instead, each
	// expecting the value its client last saw for the key (seen).
	cas  bool
	seen sync.Map // client and key → the value it last read or wrote
}

type regInput struct {
	put   bool
	scan  bool // every reg- key
	cas   bool // a put of value if the key holds expect ("" = absent)
	key   string
	value string
	// expect is a compare-and-set's condition.
	expect string
}

type regOutput struct {
	value string            // "" = absent; a failed compare-and-set's current value
	rows  map[string]string // scan
	// set: the compare-and-set wrote; unknown: its call failed, so it
	// may or may not have (it then constrains only the state after it).
	set, unknown bool
}

// casStep is a compare-and-set on a register holding state.
func casStep(state string, in regInput, out regOutput) (bool, string) {
	holds := state == in.expect
	switch {
	case out.unknown && holds:
		return true, in.value
	case out.unknown:
		return true, state
	case out.set:
		return holds, in.value
	default:
		return !holds && out.value == state, state
	}
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
	} else if h.cas && rand.IntN(3) == 0 {
		in.cas, in.value = true, fmt.Sprintf("c%d-%d", client, i)
		out, ret, failed = h.compareAndSet(ctx, client, i, &in)
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
		} else {
			h.seen.Store(fmt.Sprint(client, in.key), in.value)
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
		h.seen.Store(fmt.Sprint(client, in.key), out.value)
	}
	h.mu.Lock()
	h.ops = append(h.ops, porcupine.Operation{ClientId: client, Input: in, Call: call, Output: out, Return: ret})
	h.mu.Unlock()
}

// compareAndSet puts in.value if in.key holds the value the client last
// saw (absent when it saw none), under one idempotency key for every
// attempt, and returns the operation's output and return time (MaxInt64
// when its outcome is unknown).
func (h *history) compareAndSet(ctx context.Context, client, i int, in *regInput) (out regOutput, ret int64, failed bool) {
	if v, ok := h.seen.Load(fmt.Sprint(client, in.key)); ok {
		in.expect = v.(string)
	}
	cond := &kvpb.Condition{Expect: &kvpb.Condition_Absent{Absent: true}}
	if in.expect != "" {
		cond = &kvpb.Condition{Expect: &kvpb.Condition_Value{Value: []byte(in.expect)}}
	}
	cctx := metadata.AppendToOutgoingContext(ctx, contract.RequestIDHeader, fmt.Sprintf("history-cas-%d-%d-%d", h.start0.UnixNano(), client, i))
	var r *kvpb.CompareAndSetResponse
	err := h.retry(func() (err error) {
		r, err = h.client().CompareAndSet(cctx, &kvpb.CompareAndSetRequest{Key: []byte(in.key), Condition: cond, Value: []byte(in.value)})
		return err
	})
	if err != nil {
		return regOutput{unknown: true}, math.MaxInt64, true
	}
	out = regOutput{set: r.Succeeded}
	seen := in.value
	if !r.Succeeded {
		if r.Found {
			out.value = string(r.Value)
		}
		seen = out.value
	}
	h.seen.Store(fmt.Sprint(client, in.key), seen)
	return out, h.now(), false
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
		if in.cas {
			return casStep(state.(string), in, output.(regOutput))
		}
		return output.(regOutput).value == state.(string), state
	},
	Equal: func(a, b any) bool { return a == b },
	DescribeOperation: func(input, output any) string {
		in := input.(regInput)
		if in.put {
			return fmt.Sprintf("put(%s, %s)", in.key, in.value)
		}
		if in.cas {
			out := output.(regOutput)
			return fmt.Sprintf("cas(%s, if %q, %s) → set %v, unknown %v, holds %q", in.key, in.expect, in.value, out.set, out.unknown, out.value)
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
		case in.cas:
			ok, v := casStep(st[in.key], in, output.(regOutput))
			if v == st[in.key] {
				return ok, st
			}
			next := maps.Clone(st)
			next[in.key] = v
			return ok, next
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
	var cas, wrote, held int
	for _, op := range h.ops {
		if op.Input.(regInput).cas {
			cas++
			if out := op.Output.(regOutput); out.set {
				wrote++
			} else if !out.unknown {
				held++
			}
		}
	}
	if h.cas && (wrote == 0 || held == 0) {
		t.Fatalf("%d compare-and-sets: %d wrote, %d found another value; the history checks compare-and-set only with both", cas, wrote, held)
	}
	if res, _ := porcupine.CheckOperationsVerbose(registerModel, h.ops, 30*time.Second); res != porcupine.Ok {
		t.Fatalf("history of %d operations is not linearizable per key (%v)", len(h.ops), res)
	}
	started := time.Now()
	res, _ := porcupine.CheckOperationsVerbose(mapModel, h.ops, 60*time.Second)
	if res != porcupine.Ok {
		t.Fatalf("history of %d operations (%d scans) is not linearizable as a whole (%v after %v)", len(h.ops), scans, res, time.Since(started))
	}
	t.Logf("history of %d operations (%d scans, %d compare-and-sets: %d wrote, %d did not) is linearizable (whole-history check %v)",
		len(h.ops), scans, cas, wrote, held, time.Since(started).Round(time.Millisecond))
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

// The compare-and-set model accepts a history only if every compare-and-set
// that wrote found what it expected and every one that did not saw the
// value then: a lost update (two that both wrote from the same value) and
// a failure that reports a stale value are rejected.
func TestRegisterModelChecksCompareAndSet(t *testing.T) {
	put := regInput{put: true, key: "reg-0", value: "a"}
	casB := regInput{cas: true, key: "reg-0", expect: "a", value: "b"}
	casC := regInput{cas: true, key: "reg-0", expect: "a", value: "c"}
	for _, c := range []struct {
		name string
		ops  []porcupine.Operation
		want porcupine.CheckResult
	}{
		{"one wins, one sees it", []porcupine.Operation{
			{ClientId: 0, Input: put, Call: 0, Return: 1},
			{ClientId: 1, Input: casB, Output: regOutput{set: true}, Call: 2, Return: 3},
			{ClientId: 2, Input: casC, Output: regOutput{value: "b"}, Call: 4, Return: 5},
		}, porcupine.Ok},
		{"a lost update", []porcupine.Operation{
			{ClientId: 0, Input: put, Call: 0, Return: 1},
			{ClientId: 1, Input: casB, Output: regOutput{set: true}, Call: 2, Return: 3},
			{ClientId: 2, Input: casC, Output: regOutput{set: true}, Call: 4, Return: 5},
		}, porcupine.Illegal},
		{"a failure naming a stale value", []porcupine.Operation{
			{ClientId: 0, Input: put, Call: 0, Return: 1},
			{ClientId: 1, Input: casB, Output: regOutput{set: true}, Call: 2, Return: 3},
			{ClientId: 2, Input: casC, Output: regOutput{value: "a"}, Call: 4, Return: 5},
		}, porcupine.Illegal},
		{"an unknown outcome that may have written", []porcupine.Operation{
			{ClientId: 0, Input: put, Call: 0, Return: 1},
			{ClientId: 1, Input: casB, Output: regOutput{unknown: true}, Call: 2, Return: math.MaxInt64},
			{ClientId: 2, Input: regInput{key: "reg-0"}, Output: regOutput{value: "b"}, Call: 4, Return: 5},
		}, porcupine.Ok},
	} {
		for _, m := range []porcupine.Model{registerModel, mapModel} {
			if res := porcupine.CheckOperationsTimeout(m, c.ops, 0); res != c.want {
				t.Errorf("%s: %v, want %v", c.name, res, c.want)
			}
		}
	}
}
