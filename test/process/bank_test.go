package process

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/bellows-kv/bellows/client"
	"github.com/bellows-kv/bellows/internal/contract"
	"github.com/bellows-kv/bellows/internal/sicheck"
	kvpb "github.com/bellows-kv/bellows/proto/bellows/kv/v1"
)

// txnLockTTL is the stores' --txn-lock-ttl in these tests: short, so locks
// a killed coordinator leaves behind roll back within the test.
const txnLockTTL = time.Second

// startTxnStore is startPeerStore with the short lock TTL.
func startTxnStore(t *testing.T, name, bucket, walDir, addr, owner, peers string) *proc {
	return start(t, name, "store", "--bucket="+bucket, "--wal-dir="+walDir, "--regions=4",
		"--region-owner="+owner, "--offload=Disabled", "--listen="+addr, "--peers="+peers,
		"--txn-lock-ttl="+txnLockTTL.String())
}

// txnHistory records transactions for the snapshot-isolation checker.
type txnHistory struct {
	mu   sync.Mutex
	txns []sicheck.Txn
	seq  atomic.Int64
}

func (h *txnHistory) add(x sicheck.Txn) {
	h.mu.Lock()
	h.txns = append(h.txns, x)
	h.mu.Unlock()
}

func (h *txnHistory) check(t *testing.T) {
	t.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	count := map[sicheck.Outcome]int{}
	for _, x := range h.txns {
		count[x.Outcome]++
	}
	t.Logf("txnHistory: %d transactions: %d committed, %d aborted, %d outcome unknown, %d read-only",
		len(h.txns), count[sicheck.Committed], count[sicheck.Aborted], count[sicheck.Unknown], count[sicheck.ReadOnly])
	for _, err := range sicheck.Check(h.txns, 20) {
		t.Error("snapshot isolation: ", err)
	}
}

// outcome classifies a commit's error.
func outcome(err error) sicheck.Outcome {
	switch {
	case err == nil:
		return sicheck.Committed
	case errors.Is(err, client.ErrConflict):
		return sicheck.Aborted
	}
	return sicheck.Unknown
}

const (
	accountsPerRegion = 4
	startBalance      = 100
)

func account(i int) []byte { return regionKey(i%4, fmt.Sprintf("acct-%02d", i)) }

// balance parses "balance:writer".
func balance(v []byte) (int, error) {
	b, _, ok := strings.Cut(string(v), ":")
	if !ok {
		return 0, fmt.Errorf("malformed balance %q", v)
	}
	return strconv.Atoi(b)
}

// The bank: accounts in every region, concurrent transfers between
// accounts of different regions (cross-region transactions), readers that
// sum every balance in one snapshot, and stores SIGKILLed mid-commit and
// restarted, clients cut off mid-commit. The total never changes in any
// read, after the restarts, and the recorded txnHistory is snapshot isolated.
func TestBankAcrossRegionsWithCrashes(t *testing.T) {
	bucket := "file://" + t.TempDir()
	addrA, addrB := freeAddr(t), freeAddr(t)
	walA, walB := t.TempDir(), t.TempDir()
	peers := addrA + "," + addrB
	var storesMu sync.Mutex
	stores := map[string]*proc{
		"store-a": startTxnStore(t, "store-a", bucket, walA, addrA, "0/2", peers),
		"store-b": startTxnStore(t, "store-b", bucket, walB, addrB, "1/2", peers),
	}
	c := newClient(t, stores["store-a"], stores["store-b"])
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const accounts = 4 * accountsPerRegion
	const total = accounts * startBalance
	h := &txnHistory{}

	// The accounts open in one transaction across all four regions.
	seed, err := c.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	seedTxn := sicheck.Txn{ID: "seed", StartTS: seed.StartTS(), Writes: map[string]string{}}
	for i := range accounts {
		v := fmt.Sprintf("%d:seed", startBalance)
		seed.Put(account(i), []byte(v))
		seedTxn.Writes[string(account(i))] = v
	}
	res, err := seed.Commit(ctx)
	if err != nil {
		t.Fatal(err)
	}
	seedTxn.CommitTS, seedTxn.Outcome = res.CommitTS, sicheck.Committed
	h.add(seedTxn)

	var transfers, sums, violations atomic.Int64
	// committed wakes awaitTransfers after each committed transfer.
	committed := make(chan struct{}, 1)
	transfer := func(rng *rand.Rand, deadline time.Duration) {
		id := fmt.Sprintf("t%d", h.seq.Add(1))
		from := rng.IntN(accounts)
		to := (from + 1 + rng.IntN(3)) % 4 // another region
		to += 4 * rng.IntN(accountsPerRegion)
		tctx, tcancel := context.WithTimeout(ctx, deadline)
		defer tcancel()
		x, err := c.Begin(tctx)
		if err != nil {
			return
		}
		rec := sicheck.Txn{ID: id, StartTS: x.StartTS(), Reads: map[string]string{}, Writes: map[string]string{}}
		var bal [2]int
		for i, a := range []int{from, to} {
			v, _, err := x.Get(tctx, account(a))
			if err != nil {
				if len(rec.Reads) > 0 {
					h.add(rec)
				}
				return
			}
			rec.Reads[string(account(a))] = string(v)
			if bal[i], err = balance(v); err != nil {
				t.Error(err)
				return
			}
		}
		amount := 1 + rng.IntN(10)
		if bal[0] < amount {
			h.add(rec)
			return
		}
		for i, a := range []int{from, to} {
			v := fmt.Sprintf("%d:%s", bal[i]+[]int{-amount, amount}[i], id)
			x.Put(account(a), []byte(v))
			rec.Writes[string(account(a))] = v
		}
		r, err := x.Commit(tctx)
		rec.Outcome = outcome(err)
		rec.CommitTS = r.CommitTS
		h.add(rec)
		if err == nil {
			transfers.Add(1)
			select {
			case committed <- struct{}{}:
			default:
			}
		}
	}
	sum := func() {
		id := fmt.Sprintf("r%d", h.seq.Add(1))
		rctx, rcancel := context.WithTimeout(ctx, 20*time.Second)
		defer rcancel()
		x, err := c.Begin(rctx)
		if err != nil {
			return
		}
		rec := sicheck.Txn{ID: id, StartTS: x.StartTS(), Reads: map[string]string{}}
		s := 0
		for i := range accounts {
			v, _, err := x.Get(rctx, account(i))
			if err != nil {
				return
			}
			rec.Reads[string(account(i))] = string(v)
			b, err := balance(v)
			if err != nil {
				t.Error(err)
				return
			}
			s += b
		}
		h.add(rec)
		sums.Add(1)
		if s != total {
			violations.Add(1)
			t.Errorf("%s: the balances at %d sum to %d, not %d", id, x.StartTS(), s, total)
		}
	}

	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 1))
			for {
				select {
				case <-stop:
					return
				default:
				}
				// One transfer in ten gets a deadline that ends it
				// mid-commit: a client that goes away.
				deadline := 20 * time.Second
				if rng.IntN(10) == 0 {
					deadline = time.Duration(1+rng.IntN(3)) * time.Millisecond
				}
				transfer(rng, deadline)
			}
		}()
	}
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				sum()
			}
		}()
	}
	awaitTransfers := func(n int64, why string) {
		t.Helper()
		timeout := time.After(time.Minute)
		for transfers.Load() < n {
			select {
			case <-committed:
			case <-timeout:
				t.Fatalf("%s: only %d transfers committed in a minute", why, transfers.Load())
			}
		}
	}
	restart := func(name string) {
		storesMu.Lock()
		defer storesMu.Unlock()
		stores[name].kill()
		addr, wal, owner := addrA, walA, "0/2"
		if name == "store-b" {
			addr, wal, owner = addrB, walB, "1/2"
		}
		stores[name] = startTxnStore(t, name, bucket, wal, addr, owner, peers)
	}
	awaitTransfers(100, "before the first crash")
	restart("store-b")
	awaitTransfers(transfers.Load()+100, "after store-b's restart")
	restart("store-a")
	awaitTransfers(transfers.Load()+100, "after store-a's restart")
	close(stop)
	wg.Wait()
	// After the crashes: once every lock left behind has been resolved (by
	// the reads below or the stores' resolver), the total still holds, in
	// a snapshot and in a plain scan.
	sum()
	rows, err := c.ScanAll(ctx, nil, nil, client.ScanOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s := 0
	for _, kv := range rows {
		if b, err := balance(kv.Value); err == nil && strings.Contains(string(kv.Key), "acct-") {
			s += b
		}
	}
	if s != total {
		t.Errorf("a plain scan after the workload sums to %d, not %d", s, total)
	}
	t.Logf("%d transfers committed, %d snapshot sums, %d invariant violations, 2 stores SIGKILLed and restarted", transfers.Load(), sums.Load(), violations.Load())
	h.check(t)
}

// A coordinator that dies after prewriting leaves locks: a reader that
// meets one waits for the lock's TTL, then rolls the transaction back; one
// that dies after its commit point leaves a secondary lock that the first
// reader rolls forward at once. A primary's store SIGKILLed between
// prewrite and commit keeps the lock, and the commit goes ahead after.
// The "coordinator" here is the test, calling the stores' participant RPCs.
func TestLockResolutionAfterTheCoordinatorDies(t *testing.T) {
	bucket := "file://" + t.TempDir()
	addrA, addrB := freeAddr(t), freeAddr(t)
	walB := t.TempDir()
	peers := addrA + "," + addrB
	a := startTxnStore(t, "store-a", bucket, t.TempDir(), addrA, "0/2", peers)
	b := startTxnStore(t, "store-b", bucket, walB, addrB, "1/2", peers)
	// Stores restarted in a subtest belong to the test: a process is
	// killed when the test that started it ends.
	top := t
	c := newClient(t, a, b)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// The primary in store-b's region 1, the secondary in store-a's region 0.
	prewriteBoth := func(name string, ttl time.Duration) (uint64, []byte, []byte, uint64) {
		t.Helper()
		p, s := regionKey(1, name+"-p"), regionKey(0, name+"-s")
		for _, k := range [][]byte{p, s} {
			if _, err := c.Put(ctx, k, []byte("old")); err != nil {
				t.Fatal(err)
			}
		}
		x, err := c.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		start := x.StartTS()
		var prepare uint64
		for _, k := range [][]byte{p, s} {
			resp, err := a.kv().Prewrite(ctx, &kvpb.PrewriteRequest{StartTs: start, Primary: p, TtlMs: uint64(ttl.Milliseconds()),
				Mutations: []*kvpb.Mutation{{Op: kvpb.Mutation_OP_PUT, Key: k, Value: []byte("new")}}})
			if err != nil {
				t.Fatalf("prewrite %q: %v", k, err)
			}
			prepare = max(prepare, resp.PrepareTs)
		}
		return start, p, s, prepare + 1
	}
	get := func(k []byte) (string, time.Duration) {
		t.Helper()
		begin := time.Now()
		v, _, err := c.Get(ctx, k)
		if err != nil {
			t.Fatalf("get %q: %v", k, err)
		}
		return string(v), time.Since(begin)
	}

	t.Run("dead before the commit point: rolled back after the TTL", func(t *testing.T) {
		_, p, s, _ := prewriteBoth("before", txnLockTTL)
		if v, took := get(s); v != "old" || took < txnLockTTL/2 {
			t.Fatalf("secondary read %q after %s; want the old value, after waiting for the lock's TTL (%s)", v, took, txnLockTTL)
		}
		if v, _ := get(p); v != "old" {
			t.Fatalf("primary read %q after the rollback", v)
		}
	})

	t.Run("dead after the commit point: rolled forward at once", func(t *testing.T) {
		start, p, s, commitTS := prewriteBoth("after", txnLockTTL)
		if _, err := a.kv().ResolveLocks(ctx, &kvpb.ResolveLocksRequest{StartTs: start, CommitTs: commitTS, Keys: [][]byte{p}, Primary: true}); err != nil {
			t.Fatal(err)
		}
		if v, took := get(s); v != "new" || took > txnLockTTL/2 {
			t.Fatalf("secondary read %q after %s; want the committed value without waiting for the TTL", v, took)
		}
		if v, _ := get(p); v != "new" {
			t.Fatalf("primary read %q", v)
		}
	})

	t.Run("a commit retried after its coordinator restarted learns it committed", func(t *testing.T) {
		// The answer to a committed request is lost, and the coordinator
		// (store-b, the primary's owner) restarts, forgetting the request
		// ID; the client retries with the same ID. Before the primary's
		// region kept outcomes for retries, the retry met its own writes
		// as a conflict and answered ABORTED: a client would have run the
		// transaction again.
		x, err := c.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		req := &kvpb.CommitTxnRequest{StartTs: x.StartTS(), Mutations: []*kvpb.Mutation{
			{Op: kvpb.Mutation_OP_PUT, Key: regionKey(1, "retried-p"), Value: []byte("v")},
			{Op: kvpb.Mutation_OP_PUT, Key: regionKey(0, "retried-s"), Value: []byte("v")}}}
		rctx := metadata.AppendToOutgoingContext(ctx, contract.RequestIDHeader, "retried-commit-1")
		first, err := b.kv().CommitTxn(rctx, req)
		if err != nil {
			t.Fatal(err)
		}
		b.kill()
		b = startTxnStore(top, "store-b", bucket, walB, addrB, "1/2", peers)
		again, err := b.kv().CommitTxn(rctx, req)
		if err != nil || again.CommitTs != first.CommitTs {
			t.Fatalf("the retried commit: %v, %v; want the first commit's timestamp %d", again, err, first.CommitTs)
		}
		// Another request for the same transaction is not taken for it.
		other := metadata.AppendToOutgoingContext(ctx, contract.RequestIDHeader, "retried-commit-2")
		if _, err := b.kv().CommitTxn(other, req); status.Code(err) == codes.OK {
			t.Fatal("a second request committing the same transaction succeeded")
		}
	})

	t.Run("the primary's store restarts between prewrite and commit", func(t *testing.T) {
		// A TTL the restart cannot outlast: the stores' resolver would
		// rightly roll back an expired primary first.
		start, p, s, commitTS := prewriteBoth("restart", time.Minute)
		b.kill()
		b = startTxnStore(top, "store-b", bucket, walB, addrB, "1/2", peers)
		// Within the TTL the lock is still there and the commit succeeds.
		if _, err := a.kv().ResolveLocks(ctx, &kvpb.ResolveLocksRequest{StartTs: start, CommitTs: commitTS, Keys: [][]byte{p}, Primary: true}); err != nil {
			t.Fatalf("commit after the primary's store restarted: %v (the lock must survive the restart)", err)
		}
		for _, k := range [][]byte{p, s} {
			if v, _ := get(k); v != "new" {
				t.Fatalf("%q = %q after the commit", k, v)
			}
		}
	})
}
