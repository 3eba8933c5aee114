package process

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bellows-kv/bellows/internal/bank"
	kvpb "github.com/bellows-kv/bellows/proto/bellows/kv/v1"
)

// elasticStoreArgs are the flags of store i of the three on addrs in the
// elastic tests: splits by load only (a window of 3 s: 16 sampled keys need
// 43 requests/s), merges of regions cold (under 10 requests/s) for a
// second, the balancer every 300ms at any gap, compactions offloaded to
// worker when it can take them (Preferred).
func elasticStoreArgs(t *testing.T, bucket, walDir string, addrs []string, i int, worker *proc) []string {
	return append(storeArgs(t, bucket, walDir, "Preferred", ""),
		"--split-bytes=0", "--split-qps=40", "--load-window=3s", "--merge-bytes=1GiB", "--merge-after=1s",
		fmt.Sprintf("--region-owner=%d/3", i), "--listen="+addrs[i], "--peers="+strings.Join(addrs, ","),
		"--balance-interval=300ms", "--balance-min-bytes=0",
		"--compactors="+worker.grpc, "--txn-lock-ttl="+txnLockTTL.String())
}

// The bank's cross-region transactions (transfers, some abandoned
// mid-commit, and snapshot sums) through the region-aware Go client, on
// one region that splits by the bank's own load and moves between three
// store processes, one of which is SIGKILLed and restarted, while every
// few hundred milliseconds a region of some store is flushed and
// compacted on a compaction worker: the total holds in every sum and
// after the end, and the recorded history is snapshot isolated (sicheck),
// whatever split, moved or crashed under the transactions' locks and
// commits. (Merges under transactions: region/merge_test.go, both
// parents' locks and outcomes; merges in a live cluster:
// TestHistoryIsLinearizableThroughSplitsMergesMovesAndAKill.)
func TestBankThroughSplitsMovesOffloadedCompactionsAndAKill(t *testing.T) {
	dir := t.TempDir()
	bucket := "file://" + dir + "/bucket"
	addrs := []string{freeAddr(t), freeAddr(t), freeAddr(t)}
	worker := start(t, "compactor", "compactor", "--name=w1", "--cache-bytes=64MiB")
	args := func(i int) []string {
		return elasticStoreArgs(t, bucket, fmt.Sprintf("%s/wal-%d", dir, i), addrs, i, worker)
	}
	var mu sync.Mutex // guards stores
	stores := make([]*proc, 3)
	for i := range stores {
		stores[i] = start(t, fmt.Sprintf("store-%d", i), args(i)...)
	}
	sum := func(series string) float64 {
		mu.Lock()
		defer mu.Unlock()
		n := 0.0
		for _, s := range stores {
			n += s.metric(t, series)
		}
		return n
	}
	splits := func() float64 {
		return sum(`bellows_region_splits_total{reason="load"}`)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	b, err := bank.Open(ctx, newClient(t, stores...), bank.Config{Regions: bankRegions, AccountsPerRegion: 3, Key: bankAccount,
		StartBalance: 100, Transferers: 3, Summers: 1, AbandonEvery: 10})
	if err != nil {
		t.Fatal(err)
	}
	b.Start(ctx)
	bankStopped := false
	defer func() {
		if !bankStopped {
			b.Stop()
		}
	}()
	// Flushes and offloaded compactions of a region of some store, one
	// after the other; a store being killed or a region moving answers
	// errors, which are counted, not failures.
	stopMaintenance := make(chan struct{})
	var maintained, maintenanceErrs atomic.Int64
	var maintenance sync.WaitGroup
	maintenance.Add(1)
	go func() {
		defer maintenance.Done()
		rnd := rand.New(rand.NewPCG(1, 2))
		for {
			select {
			case <-stopMaintenance:
				return
			case <-time.After(200 * time.Millisecond): // pacing, not synchronization
			}
			mu.Lock()
			s := stores[rnd.IntN(len(stores))]
			mu.Unlock()
			cctx, ccancel := context.WithTimeout(ctx, 20*time.Second)
			err := func() error {
				rs, err := s.kv().Regions(cctx, &kvpb.RegionsRequest{})
				if err != nil || len(rs.Regions) == 0 {
					return err
				}
				name := rs.Regions[rnd.IntN(len(rs.Regions))].Name
				if _, err := s.admin().Flush(cctx, &kvpb.FlushRequest{Region: name}); err != nil {
					return err
				}
				_, err = s.admin().Compact(cctx, &kvpb.CompactRequest{Region: name, Major: rnd.IntN(2) == 0})
				return err
			}()
			ccancel()
			if err != nil {
				maintenanceErrs.Add(1)
			} else {
				maintained.Add(1)
			}
		}
	}()

	// A region splits at its sampled median once it serves over 40
	// requests/s (and twice its store's median); the balancer spreads
	// the daughters, which then split again.
	waitFor(t, "2 splits by load and a move", func() bool {
		return splits() >= 2 && sum("bellows_region_moves_total") >= 1
	})
	mu.Lock()
	stores[1].kill()
	stores[1] = start(t, "store-1", args(1)...)
	mu.Unlock()
	waitFor(t, "an offloaded compaction", func() bool {
		return sum(`bellows_compactions_total{location="remote",result="success"}`) >= 1
	})
	if err := b.AwaitTransfers(ctx, b.Transfers()+20, time.Minute); err != nil {
		t.Fatalf("transfers after the splits, the merge, the moves and the kill: %v", err)
	}
	close(stopMaintenance)
	maintenance.Wait()
	b.Stop()
	bankStopped = true
	t.Logf("%.0f load splits, %.0f moves, %.0f remote compactions (counted by the stores running at the end); %d flushes and compactions done, %d refused or failed under the changes",
		splits(), sum("bellows_region_moves_total"),
		sum(`bellows_compactions_total{location="remote",result="success"}`), maintained.Load(), maintenanceErrs.Load())
	checkBank(t, ctx, b, "through splits, moves, compactions and a SIGKILL")
}
