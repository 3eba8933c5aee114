package process

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/bellows-kv/bellows/internal/bank"
	"github.com/bellows-kv/bellows/internal/sicheck"
)

// The checker does not trust the stores' timestamps: a sum that reads at
// a start from before transfers it began after (Bank.StaleSum: what a
// store whose clock runs behind hands out) adds up, and the history agrees
// with every timestamp, yet the clients' real-time order flags each such
// sum as a stale snapshot. This is the recorded histories' end-to-end
// check that the real-time rules have something to judge. The stores run
// without the clock bound (--max-clock-offset=0): with it, the stale
// sums' reads find the transfers within their uncertainty window and
// restart instead (docs/clock.md; skew_test.go has real skewed stores).
func TestBankWithStaleStartsIsFlaggedByRealTime(t *testing.T) {
	bucket := "file://" + t.TempDir()
	addrA, addrB := freeAddr(t), freeAddr(t)
	peers := addrA + "," + addrB
	a := startTxnStore(t, "store-a", bucket, t.TempDir(), addrA, "0/2", peers, "--max-clock-offset=0")
	b := startTxnStore(t, "store-b", bucket, t.TempDir(), addrB, "1/2", peers, "--max-clock-offset=0")
	c := newClient(t, a, b)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	bk, err := bank.Open(ctx, c, bank.Config{Regions: bankRegions, AccountsPerRegion: 2, Key: bankAccount,
		StartBalance: 100, Transferers: 2, Summers: 1})
	if err != nil {
		t.Fatal(err)
	}
	bk.Start(ctx)
	const staleSums = 3
	for range staleSums {
		old, err := c.Begin(ctx)
		if err == nil {
			// Transfers commit, acknowledged, after old's start; the sum
			// begins after them and reads at old's start.
			err = bk.AwaitTransfers(ctx, bk.Transfers()+10, time.Minute)
		}
		if err != nil {
			bk.Stop()
			t.Fatal(err)
		}
		bk.StaleSum(ctx, old)
	}
	bk.Stop()
	if err := bk.Final(ctx); err != nil {
		t.Fatal(err)
	}
	res := bk.Result()
	for _, v := range res.Violations {
		t.Errorf("a stale snapshot is still a snapshot; its sum must hold: %s", v)
	}
	untimed := make([]sicheck.Txn, len(res.History))
	for i, x := range res.History {
		x.Invoke, x.Complete = 0, 0
		untimed[i] = x
	}
	if errs := sicheck.Check(untimed, 5); len(errs) != 0 {
		t.Fatalf("the timestamps alone show violations; this test is about what they hide: %v", errs)
	}
	rep := sicheck.Analyze(res.History, 0)
	t.Logf("%d transfers, %d sums: %v", res.Transfers, res.Sums, rep)
	flagged := map[string]bool{}
	for _, err := range rep.Violations {
		id, _, _ := strings.Cut(strings.TrimPrefix(err.Error(), "stale snapshot: "), " ")
		if !strings.HasPrefix(err.Error(), "stale snapshot: ") || !strings.HasSuffix(id, "-stale") {
			t.Errorf("want only the stale sums flagged, got: %v", err)
		}
		flagged[id] = true
	}
	if len(flagged) != staleSums {
		t.Fatalf("%d of the %d stale sums flagged (%v)", len(flagged), staleSums, rep.Violations)
	}
}
