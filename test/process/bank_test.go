package process

import (
	"context"
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/bellows-kv/bellows/internal/bank"
	"github.com/bellows-kv/bellows/internal/contract"
	"github.com/bellows-kv/bellows/internal/sicheck"
	kvpb "github.com/bellows-kv/bellows/proto/bellows/kv/v1"
)

// txnLockTTL is the stores' --txn-lock-ttl in these tests: short, so locks
// a killed coordinator leaves behind roll back within the test.
const txnLockTTL = time.Second

// startTxnStore is startPeerStore with the short lock TTL.
func startTxnStore(t *testing.T, name, bucket, walDir, addr, owner, peers string, extra ...string) *proc {
	return start(t, name, append([]string{"store", "--create-bucket", "--bucket=" + bucket, "--wal-dir=" + walDir, "--regions=4",
		"--region-owner=" + owner, "--offload=Disabled", "--listen=" + addr, "--peers=" + peers,
		"--txn-lock-ttl=" + txnLockTTL.String(), "--balance-interval=0"}, extra...)...)
}

// bankRegions is how many regions the bank's stores split the key space into.
const bankRegions = 4

// bankAccount is account i's key, in region i % bankRegions.
func bankAccount(i int) []byte { return regionKey(i%bankRegions, fmt.Sprintf("acct-%02d", i)) }

// The bank (internal/bank): accounts in every region, concurrent transfers
// between accounts of different regions (cross-region transactions), readers
// that sum every balance in one snapshot, and stores SIGKILLed mid-commit
// and restarted, clients cut off mid-commit. The total never changes in any
// read, after the restarts, and the recorded history is snapshot isolated.
func TestBankAcrossRegionsWithCrashes(t *testing.T) {
	bucket := "file://" + t.TempDir()
	addrA, addrB := freeAddr(t), freeAddr(t)
	walA, walB := t.TempDir(), t.TempDir()
	peers := addrA + "," + addrB
	stores := map[string]*proc{
		"store-a": startTxnStore(t, "store-a", bucket, walA, addrA, "0/2", peers),
		"store-b": startTxnStore(t, "store-b", bucket, walB, addrB, "1/2", peers),
	}
	c := newClient(t, stores["store-a"], stores["store-b"])
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	b, err := bank.Open(ctx, c, bank.Config{Regions: bankRegions, AccountsPerRegion: 4, Key: bankAccount,
		StartBalance: 100, Transferers: 4, Summers: 2, AbandonEvery: 10})
	if err != nil {
		t.Fatal(err)
	}
	restart := func(name string) {
		stores[name].kill()
		addr, wal, owner := addrA, walA, "0/2"
		if name == "store-b" {
			addr, wal, owner = addrB, walB, "1/2"
		}
		stores[name] = startTxnStore(t, name, bucket, wal, addr, owner, peers)
	}
	b.Start(ctx)
	awaitTransfers := func(why string) {
		t.Helper()
		if err := b.AwaitTransfers(ctx, b.Transfers()+100, time.Minute); err != nil {
			b.Stop()
			t.Fatalf("%s: %v", why, err)
		}
	}
	awaitTransfers("before the first crash")
	restart("store-b")
	awaitTransfers("after store-b's restart")
	restart("store-a")
	awaitTransfers("after store-a's restart")
	b.Stop()
	// After the crashes: once every lock left behind has been resolved (by
	// the reads or the stores' resolver), the total still holds, in a
	// snapshot and in a plain scan.
	checkBank(t, ctx, b, "2 stores SIGKILLed and restarted")
}

// checkBank ends a stopped bank's run: once the locks its abandoned
// transfers left are resolved, the total holds in a snapshot and in a
// plain scan (Final), no sum saw another total, and the recorded history
// is snapshot isolated.
func checkBank(t *testing.T, ctx context.Context, b *bank.Bank, what string) {
	t.Helper()
	if err := b.Final(ctx); err != nil {
		t.Fatal(err)
	}
	res := b.Result()
	for _, v := range res.Violations {
		t.Error(v)
	}
	t.Logf("%d transfers committed, %d snapshot sums, %d invariant violations, %s", res.Transfers, res.Sums, len(res.Violations), what)
	checkHistory(t, res.History)
}

// checkHistory runs the snapshot-isolation checker on a recorded history,
// against its timestamps and its clients' real-time order, and says how
// many commits were indeterminate and how many of those a read proved.
func checkHistory(t *testing.T, txns []sicheck.Txn) {
	t.Helper()
	rep := sicheck.Analyze(txns, 20)
	t.Logf("history: %d transactions: %v", len(txns), rep)
	for _, err := range rep.Violations {
		t.Error("snapshot isolation: ", err)
	}
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
		// A TTL of a minute: a read that answers well within it did not
		// wait for it, however loaded the machine.
		const ttl = time.Minute
		start, p, s, commitTS := prewriteBoth("after", ttl)
		if _, err := a.kv().ResolveLocks(ctx, &kvpb.ResolveLocksRequest{StartTs: start, CommitTs: commitTS, Keys: [][]byte{p}, Primary: true}); err != nil {
			t.Fatal(err)
		}
		if v, took := get(s); v != "new" || took > ttl/2 {
			t.Fatalf("secondary read %q after %s; want the committed value without waiting for the TTL (%s)", v, took, ttl)
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
