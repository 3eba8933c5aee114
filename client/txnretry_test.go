package client

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/bellows-kv/bellows/internal/contract"
	kvpb "github.com/bellows-kv/bellows/proto/bellows/kv/v1"
)

// txnStore is a store that serves one region and answers each commit as
// the test's script says: enough of a store to watch RunTxn's retries.
type txnStore struct {
	kvpb.UnimplementedKVServer
	// commit answers the n-th CommitTxn (from 1).
	commit func(n int) error
	// get answers every TxnGet (nil: found "v").
	get func() error

	mu              sync.Mutex
	begins, commits int
}

func (s *txnStore) Regions(context.Context, *kvpb.RegionsRequest) (*kvpb.RegionsResponse, error) {
	return &kvpb.RegionsResponse{Regions: []*kvpb.RegionInfo{{Name: "region-000"}}}, nil
}

func (s *txnStore) BeginTxn(context.Context, *kvpb.BeginTxnRequest) (*kvpb.BeginTxnResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.begins++
	return &kvpb.BeginTxnResponse{StartTs: uint64(10 * s.begins), TxnId: fmt.Sprintf("txn-%d", s.begins), TimeoutMs: 60000}, nil
}

func (s *txnStore) TxnGet(context.Context, *kvpb.TxnGetRequest) (*kvpb.GetResponse, error) {
	if s.get != nil {
		if err := s.get(); err != nil {
			return nil, err
		}
	}
	return &kvpb.GetResponse{Value: []byte("v"), Found: true}, nil
}

func (s *txnStore) CommitTxn(context.Context, *kvpb.CommitTxnRequest) (*kvpb.CommitTxnResponse, error) {
	s.mu.Lock()
	s.commits++
	n := s.commits
	s.mu.Unlock()
	if err := s.commit(n); err != nil {
		return nil, err
	}
	return &kvpb.CommitTxnResponse{Region: "region-000", CommitTs: uint64(1000 + n)}, nil
}

func (s *txnStore) RollbackTxn(context.Context, *kvpb.RollbackTxnRequest) (*kvpb.RollbackTxnResponse, error) {
	return &kvpb.RollbackTxnResponse{}, nil
}

func (s *txnStore) counts() (begins, commits int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.begins, s.commits
}

func withReason(code codes.Code, reason string, md map[string]string) error {
	st, err := status.New(code, "scripted "+reason).WithDetails(&errdetails.ErrorInfo{Reason: reason, Domain: contract.ErrorDomain, Metadata: md})
	if err != nil {
		panic(err)
	}
	return st.Err()
}

// conflict is the store's answer to a commit that lost to a write of "k".
func conflict() error {
	return withReason(codes.Aborted, contract.WriteConflictReason, map[string]string{"key_base64": "aw==", "committed_ts": "7"})
}

func startTxnStore(t *testing.T, s *txnStore) *Client {
	t.Helper()
	return startKVServer(t, s)
}

// startKVServer serves s and returns a client of it.
func startKVServer(t *testing.T, s kvpb.KVServer) *Client {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	kvpb.RegisterKVServer(srv, s)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := New(ctx, []string{lis.Addr().String()}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// bounded is a context that ends a RunTxn that would retry forever (a
// failure, then, not a hang).
func bounded(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// recordSleeps stands in for the wait between attempts: it records each
// wait and returns at once, unless ctx has ended.
type recordSleeps struct {
	mu     sync.Mutex
	waited []time.Duration
}

func (r *recordSleeps) sleep(ctx context.Context, d time.Duration) error {
	r.mu.Lock()
	r.waited = append(r.waited, d)
	r.mu.Unlock()
	return ctx.Err()
}

// readAndWrite is a transaction body: one read, one write.
func readAndWrite(runs *int) func(ctx context.Context, t *Txn) error {
	return func(ctx context.Context, t *Txn) error {
		*runs++
		if _, _, err := t.Get(ctx, []byte("k")); err != nil {
			return err
		}
		t.Put([]byte("k"), []byte("v2"))
		return nil
	}
}

// A transaction that always conflicts is run at most the maximum number of
// attempts, and the error says so and names the last conflict. (Before,
// RunTxn ran it until the caller's deadline: a livelock between two
// contenders had no other end.)
func TestRunTxnGivesUpAfterItsMaxAttempts(t *testing.T) {
	for _, c := range []struct {
		name string
		opts []TxnOption
		want int
	}{
		{"an explicit maximum", []TxnOption{WithTxnMaxAttempts(4)}, 4},
		{"one attempt: no retry", []TxnOption{WithTxnMaxAttempts(1)}, 1},
		{"the default", nil, DefaultTxnMaxAttempts},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := &txnStore{commit: func(int) error { return conflict() }}
			cl := startTxnStore(t, s)
			var sl recordSleeps
			runs := 0
			_, err := cl.RunTxn(bounded(t), readAndWrite(&runs), append(c.opts, withTxnSleep(sl.sleep))...)
			var gaveUp *TxnGaveUpError
			var ce *ConflictError
			switch {
			case !errors.As(err, &gaveUp) || gaveUp.Attempts != c.want:
				t.Fatalf("err = %v; want a *TxnGaveUpError after %d attempts", err, c.want)
			case !errors.Is(err, ErrTooManyAttempts) || errors.Is(err, context.DeadlineExceeded):
				t.Fatalf("err = %v; want it to match ErrTooManyAttempts only", err)
			case !errors.Is(err, ErrConflict) || !errors.As(err, &ce) || string(ce.Key) != "k" || ce.CommittedTS != 7:
				t.Fatalf("err = %v; want the last attempt's conflict on \"k\" at 7 inside it", err)
			}
			if begins, commits := s.counts(); runs != c.want || begins != c.want || commits != c.want {
				t.Fatalf("f ran %d times, %d begins, %d commits; want %d of each", runs, begins, commits, c.want)
			}
			if len(sl.waited) != c.want-1 {
				t.Fatalf("%d waits between %d attempts", len(sl.waited), c.want)
			}
		})
	}
}

// The waits between attempts grow exponentially up to the cap, each drawn
// at random within ±50% of its interval: two contenders do not come back
// in lockstep.
func TestRunTxnBacksOffExponentiallyWithJitter(t *testing.T) {
	const initial, maxWait, attempts = 10 * time.Millisecond, 80 * time.Millisecond, 12
	s := &txnStore{commit: func(int) error { return conflict() }}
	cl := startTxnStore(t, s)
	var sl recordSleeps
	runs := 0
	_, err := cl.RunTxn(bounded(t), readAndWrite(&runs),
		WithTxnMaxAttempts(attempts), WithTxnBackoff(initial, maxWait), withTxnSleep(sl.sleep))
	if !errors.Is(err, ErrTooManyAttempts) {
		t.Fatalf("err = %v; want ErrTooManyAttempts", err)
	}
	if len(sl.waited) != attempts-1 {
		t.Fatalf("%d waits between %d attempts", len(sl.waited), attempts)
	}
	interval, atNominal := initial, 0
	for i, d := range sl.waited {
		lo, hi := interval/2, interval*3/2+1
		if d < lo || d > hi {
			t.Fatalf("wait %d = %v; want within [%v, %v] (interval %v): all %v", i, d, lo, hi, interval, sl.waited)
		}
		if d == interval {
			atNominal++
		}
		interval = min(2*interval, maxWait)
	}
	if atNominal == len(sl.waited) {
		t.Fatalf("every wait is exactly its interval, no jitter: %v", sl.waited)
	}
}

// A retry follows only an attempt that wrote nothing: a conflict, a lost
// transaction, a read refused as too old; then the transaction commits.
func TestRunTxnRunsAgainAfterRefusalsThenCommits(t *testing.T) {
	gets := 0
	s := &txnStore{
		commit: func(n int) error {
			switch n {
			case 1:
				return conflict()
			case 2:
				return withReason(codes.FailedPrecondition, contract.TxnEndedReason, nil)
			}
			return nil
		},
		get: func() error {
			// The third attempt's read is refused as too old (f fails).
			if gets++; gets == 3 {
				return withReason(codes.FailedPrecondition, contract.SnapshotTooOldReason, nil)
			}
			return nil
		},
	}
	cl := startTxnStore(t, s)
	var sl recordSleeps
	runs := 0
	res, err := cl.RunTxn(bounded(t), readAndWrite(&runs), withTxnSleep(sl.sleep))
	if err != nil || res.CommitTS != 1003 {
		t.Fatalf("RunTxn = %+v, %v; want the third commit's timestamp 1003", res, err)
	}
	if begins, commits := s.counts(); runs != 4 || begins != 4 || commits != 3 || len(sl.waited) != 3 {
		t.Fatalf("f ran %d times, %d begins, %d commits, %d waits; want 4, 4, 3, 3", runs, begins, commits, len(sl.waited))
	}
}

// A commit whose outcome is unknown is returned at once, as it is: running
// the transaction again could apply it twice.
func TestRunTxnDoesNotRunAgainAfterAnUnknownOutcome(t *testing.T) {
	s := &txnStore{commit: func(int) error { return status.Error(codes.Internal, "connection reset mid-commit") }}
	cl := startTxnStore(t, s)
	var sl recordSleeps
	runs := 0
	_, err := cl.RunTxn(bounded(t), readAndWrite(&runs), withTxnSleep(sl.sleep))
	var gaveUp *TxnGaveUpError
	if status.Code(err) != codes.Internal || errors.As(err, &gaveUp) {
		t.Fatalf("err = %v; want the commit's INTERNAL as it is", err)
	}
	if _, commits := s.counts(); runs != 1 || commits != 1 || len(sl.waited) != 0 {
		t.Fatalf("f ran %d times, %d commits, %d waits; want one attempt", runs, commits, len(sl.waited))
	}
}

// f's own error ends RunTxn even when it matches ErrConflict: only the
// commit's conflicts are RunTxn's to retry.
func TestRunTxnReturnsTheBodysErrors(t *testing.T) {
	s := &txnStore{commit: func(int) error { return nil }}
	cl := startTxnStore(t, s)
	mine := fmt.Errorf("an inner transaction: %w", &ConflictError{Key: []byte("x"), Message: "inner"})
	runs := 0
	_, err := cl.RunTxn(bounded(t), func(context.Context, *Txn) error { runs++; return mine }, withTxnSleep(new(recordSleeps).sleep))
	if err != mine || runs != 1 {
		t.Fatalf("RunTxn = %v after %d runs; want f's error after one", err, runs)
	}
}

// The caller's context ends the retries, also during a wait, and the error
// says so and keeps the last attempt's conflict.
func TestRunTxnGivesUpWhenTheContextEnds(t *testing.T) {
	t.Run("cancelled during the wait", func(t *testing.T) {
		s := &txnStore{commit: func(int) error { return conflict() }}
		cl := startTxnStore(t, s)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		// The wait is an hour: only the cancellation can end it.
		cancelThenWait := func(ctx context.Context, d time.Duration) error {
			cancel()
			return sleepCtx(ctx, time.Hour)
		}
		runs := 0
		_, err := cl.RunTxn(ctx, readAndWrite(&runs), withTxnSleep(cancelThenWait))
		var gaveUp *TxnGaveUpError
		if !errors.As(err, &gaveUp) || gaveUp.Attempts != 1 || !errors.Is(err, context.Canceled) || !errors.Is(err, ErrConflict) || errors.Is(err, ErrTooManyAttempts) {
			t.Fatalf("err = %v; want a *TxnGaveUpError after 1 attempt matching context.Canceled and ErrConflict", err)
		}
		if begins, _ := s.counts(); begins != 1 {
			t.Fatalf("%d begins after the cancellation; want none after the first", begins)
		}
	})
	t.Run("the deadline passes during the wait", func(t *testing.T) {
		s := &txnStore{commit: func(int) error { return conflict() }}
		cl := startTxnStore(t, s)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		runs := 0
		_, err := cl.RunTxn(ctx, readAndWrite(&runs), WithTxnBackoff(time.Hour, time.Hour))
		if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, ErrConflict) {
			t.Fatalf("err = %v; want context.DeadlineExceeded with the last conflict", err)
		}
	})
}

// sleepCtx waits its duration, or returns the context's error when it ends.
func TestSleepCtx(t *testing.T) {
	if err := sleepCtx(context.Background(), time.Millisecond); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := sleepCtx(ctx, time.Hour); !errors.Is(err, context.Canceled) {
		t.Fatalf("sleepCtx on a cancelled context = %v", err)
	}
}
