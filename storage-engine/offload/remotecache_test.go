package offload

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	compactionpb "github.com/bellows-kv/bellows/proto/bellows/compaction/v1"
)

// fakeWorker answers FetchBlocks for one block: at once, after release is
// closed (a paused worker), or with err.
type fakeWorker struct {
	compactionpb.CompactorClient
	calls   atomic.Int32
	mu      sync.Mutex
	release chan struct{} // nil: answer at once
	err     error
	size    int // bytes of each block sent (1 when 0)
}

func (f *fakeWorker) set(release chan struct{}, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.release, f.err = release, err
}

func (f *fakeWorker) FetchBlocks(ctx context.Context, in *compactionpb.FetchBlocksRequest, _ ...grpc.CallOption) (grpc.ServerStreamingClient[compactionpb.Block], error) {
	f.calls.Add(1)
	f.mu.Lock()
	release, err := f.release, f.err
	f.mu.Unlock()
	if release != nil {
		select {
		case <-release:
		case <-ctx.Done():
			return nil, status.FromContextError(ctx.Err()).Err()
		}
	}
	if err != nil {
		return nil, err
	}
	return &oneBlock{blk: &compactionpb.Block{Index: in.FromBlock, Stored: bytes.Repeat([]byte{byte(in.FromBlock)}, max(f.size, 1))}}, nil
}

type oneBlock struct {
	grpc.ClientStream
	blk *compactionpb.Block
}

func (o *oneBlock) Recv() (*compactionpb.Block, error) { return o.blk, nil }
func (o *oneBlock) Header() (metadata.MD, error)       { return nil, nil }

func newTestReads(timeout, retry time.Duration) (*remoteReads, *metrics) {
	m := newMetrics(prometheus.NewRegistry())
	return newRemoteReads(timeout, retry, 0, slog.New(slog.DiscardHandler), m.remoteFetches), m
}

func fetches(m *metrics, outcome string) int {
	return int(testutil.ToFloat64(m.remoteFetches.WithLabelValues(outcome)))
}

func TestConcurrentMissesOnOneBlockShareOneFetch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rr, m := newTestReads(time.Minute, time.Minute)
		w := &fakeWorker{}
		release := make(chan struct{})
		w.set(release, nil)
		b := &remoteBlocks{client: w, jobID: "region-000/7.sst#1", worker: "w1", reads: rr}
		const n = 8
		var wg sync.WaitGroup
		errs := make(chan error, n)
		for range n {
			wg.Go(func() {
				got, err := b.Block(context.Background(), 3)
				if err == nil && (len(got) != 1 || got[0] != 3) {
					err = errors.New("wrong block")
				}
				errs <- err
			})
		}
		synctest.Wait() // every caller is blocked: in the fetch or waiting for it
		if c := w.calls.Load(); c != 1 {
			t.Fatalf("%d concurrent misses on one block made %d fetches, want 1", n, c)
		}
		close(release)
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
		if got := fetches(m, OutcomeOK); got != 1 {
			t.Fatalf("ok fetches %d, want 1", got)
		}
	})
}

// A paused worker costs one deadline, then misses go to the bucket without
// asking it until the retry interval passed; a probe then finds it back.
func TestBreakerOpensOnTimeoutAndRetriesAfterBackoff(t *testing.T) {
	synctest.Test(t, testBreakerOpensOnTimeoutAndRetriesAfterBackoff)
}

func testBreakerOpensOnTimeoutAndRetriesAfterBackoff(t *testing.T) {
	const timeout, retry = 30 * time.Millisecond, 200 * time.Millisecond
	rr, m := newTestReads(timeout, retry)
	w := &fakeWorker{}
	w.set(make(chan struct{}), nil) // never answers: SIGSTOP
	b := &remoteBlocks{client: w, jobID: "region-000/7.sst#1", worker: "w1", reads: rr}

	began := time.Now()
	if _, err := b.Block(context.Background(), 0); err == nil {
		t.Fatal("a paused worker served a block")
	}
	if d := time.Since(began); d != timeout {
		t.Fatalf("the first miss waited %v for a paused worker, deadline %v", d, timeout)
	}
	if got := fetches(m, OutcomeTimeout); got != 1 {
		t.Fatalf("timeouts %d, want 1", got)
	}
	// Open: other blocks, even of other jobs on that worker, skip it.
	b2 := &remoteBlocks{client: w, jobID: "region-001/9.sst#2", worker: "w1", reads: rr}
	for i := range 5 {
		began := time.Now()
		if _, err := b2.Block(context.Background(), i); err == nil {
			t.Fatal("open breaker let a fetch through")
		}
		if d := time.Since(began); d != 0 {
			t.Fatalf("a miss on an open breaker waited %v", d)
		}
	}
	if got := w.calls.Load(); got != 1 {
		t.Fatalf("worker asked %d times, want 1 (breaker open)", got)
	}
	if got := fetches(m, OutcomeShortCircuit); got != 5 {
		t.Fatalf("short circuits %d, want 5", got)
	}

	// The worker is back, but the breaker does not know before the
	// backoff; after it one probe closes the breaker.
	w.set(nil, nil)
	time.Sleep(retry - time.Millisecond) // fake time: the breaker opened now; just before the backoff ends
	if _, err := b.Block(context.Background(), 1); err == nil {
		t.Fatal("the worker was asked before the backoff ended")
	}
	time.Sleep(2 * time.Millisecond)
	if _, err := b.Block(context.Background(), 1); err != nil {
		t.Fatalf("the probe after the backoff: %v", err)
	}
	for i := range 3 {
		if _, err := b2.Block(context.Background(), i); err != nil {
			t.Fatalf("after recovery: %v", err)
		}
	}
	if got := fetches(m, OutcomeOK); got != 4 {
		t.Fatalf("ok fetches %d, want 4", got)
	}
}

func TestErrorOpensBreakerAndMissingJobDoesNot(t *testing.T) {
	rr, m := newTestReads(time.Second, time.Minute)
	w := &fakeWorker{}
	w.set(nil, status.Error(codes.NotFound, "job released"))
	gone := &remoteBlocks{client: w, jobID: "a", worker: "w1", reads: rr}
	if _, err := gone.Block(context.Background(), 0); !errors.Is(err, errJobGone) {
		t.Fatalf("released job: %v", err)
	}
	if _, err := gone.Block(context.Background(), 1); !errors.Is(err, errJobGone) {
		t.Fatalf("released job, second read: %v", err)
	}
	if got := w.calls.Load(); got != 1 {
		t.Fatalf("a released job was asked for %d times, want 1", got)
	}
	// The worker is still healthy for its other jobs.
	w.set(nil, nil)
	other := &remoteBlocks{client: w, jobID: "b", worker: "w1", reads: rr}
	if _, err := other.Block(context.Background(), 0); err != nil {
		t.Fatalf("a released job opened the breaker: %v", err)
	}
	w.set(nil, status.Error(codes.Unavailable, "connection refused"))
	if _, err := other.Block(context.Background(), 1); err == nil {
		t.Fatal("want the error")
	}
	w.set(nil, nil)
	if _, err := other.Block(context.Background(), 2); err == nil {
		t.Fatal("an error did not open the breaker")
	}
	if fetches(m, OutcomeError) != 2 || fetches(m, OutcomeShortCircuit) != 2 {
		t.Fatalf("errors %d short circuits %d, want 2 and 2", fetches(m, OutcomeError), fetches(m, OutcomeShortCircuit))
	}
}

// A client that gives up returns at once; the shared fetch it started still
// serves the others.
func TestCancelledCallerLeavesTheSharedFetch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rr, _ := newTestReads(time.Minute, time.Minute)
		w := &fakeWorker{}
		release := make(chan struct{})
		w.set(release, nil)
		b := &remoteBlocks{client: w, jobID: "j", worker: "w1", reads: rr}
		ctx, cancel := context.WithCancel(context.Background())
		first := make(chan error, 1)
		go func() { _, err := b.Block(ctx, 4); first <- err }()
		synctest.Wait() // the first caller's fetch is blocked in the worker
		second := make(chan error, 1)
		go func() { _, err := b.Block(context.Background(), 4); second <- err }()
		synctest.Wait() // the second caller waits for the same fetch
		if got := w.calls.Load(); got != 1 {
			t.Fatalf("worker asked %d times, want 1 shared fetch", got)
		}
		cancel()
		if err := <-first; !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled caller: %v", err)
		}
		close(release)
		if err := <-second; err != nil {
			t.Fatalf("the other caller: %v", err)
		}
	})
}

// TestRemoteCacheRateBoundsWhatAStorePulls: the misses of every file share
// one byte budget; past it they read the bucket at once (they never wait),
// and it refills at its rate, so what a store pulls in t is at most
// rate × t + burst + one block.
func TestRemoteCacheRateBoundsWhatAStorePulls(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const block, perSecond = 64 << 10, 1 << 20 // a burst of 16 blocks, 16 blocks a second
		m := newMetrics(prometheus.NewRegistry())
		rr := newRemoteReads(time.Second, time.Minute, perSecond, slog.New(slog.DiscardHandler), m.remoteFetches)
		w := &fakeWorker{size: block}
		files := []*remoteBlocks{
			{client: w, jobID: "a", worker: "w1", reads: rr},
			{client: w, jobID: "b", worker: "w2", reads: rr}, // another worker, the same budget
		}
		next := 0
		burst := func() (pulled, limited int) {
			for range 100 {
				next++
				_, err := files[next%2].Block(context.Background(), next)
				switch {
				case err == nil:
					pulled += block
				case errors.Is(err, errRateLimited):
					limited++
				default:
					t.Fatalf("miss %d: %v", next, err)
				}
			}
			return pulled, limited
		}
		start := time.Now()
		p0, l0 := burst()
		time.Sleep(time.Second)
		p1, l1 := burst()
		if elapsed := time.Since(start); elapsed != time.Second {
			t.Fatalf("the misses waited: %v passed, want exactly the 1s slept", elapsed)
		}
		pulled := p0 + p1
		if bound := perSecond*1 + perSecond + block; pulled > bound || pulled < perSecond {
			t.Fatalf("pulled %d bytes in 1s, want between %d and the bound %d", pulled, perSecond, bound)
		}
		if got := int(w.calls.Load()); got*block != pulled {
			t.Fatalf("worker asked %d times for %d bytes pulled", got, pulled)
		}
		if got := fetches(m, OutcomeRateLimited); got != l0+l1 || l0 == 0 || l1 == 0 {
			t.Fatalf("rate_limited %d (bursts %d, %d): every miss past the budget must read the bucket", got, l0, l1)
		}
	})
}
