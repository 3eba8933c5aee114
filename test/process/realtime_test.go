package process

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/bellows-kv/bellows/internal/bank"
	"github.com/bellows-kv/bellows/internal/sicheck"
)

// The checker does not trust the stores' timestamps: a bank whose sums
// read at starts from the past (bank.Config.StaleStarts: what a store
// whose clock runs behind hands out) keeps its invariant, and its history
// agrees with every timestamp, yet its stale snapshots are flagged by the
// clients' real-time order. This is the recorded history's end-to-end
// check that the real-time rules have something to judge; the skewed
// stores themselves are #30's clock work.
func TestBankWithStaleStartsIsFlaggedByRealTime(t *testing.T) {
	bucket := "file://" + t.TempDir()
	addrA, addrB := freeAddr(t), freeAddr(t)
	peers := addrA + "," + addrB
	a := startTxnStore(t, "store-a", bucket, t.TempDir(), addrA, "0/2", peers)
	b := startTxnStore(t, "store-b", bucket, t.TempDir(), addrB, "1/2", peers)
	c := newClient(t, a, b)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	bk, err := bank.Open(ctx, c, bank.Config{Regions: bankRegions, AccountsPerRegion: 2, Key: bankAccount,
		StartBalance: 100, Transferers: 2, Summers: 2, StaleStarts: true})
	if err != nil {
		t.Fatal(err)
	}
	bk.Start(ctx)
	err = bk.AwaitTransfers(ctx, 100, time.Minute)
	bk.Stop()
	if err != nil {
		t.Fatal(err)
	}
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
	if len(rep.Violations) == 0 {
		t.Fatal("no stale snapshot flagged in a history whose every sum read at an earlier sum's start")
	}
	for _, err := range rep.Violations {
		if !strings.HasPrefix(err.Error(), "stale snapshot: r") {
			t.Errorf("want only the sums' stale snapshots flagged, got: %v", err)
		}
	}
}
