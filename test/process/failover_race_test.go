package process

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bellows-kv/bellows/internal/bank"
	kvpb "github.com/bellows-kv/bellows/proto/bellows/kv/v1"
)

// A store is lost with its volume (SIGKILL, WAL directory deleted) while its
// regions split by load, merge, move, flush and compact on a compaction
// worker, while backups are taken one after another and the bank's
// cross-region transactions commit (some abandoned mid-commit). The
// balancer fails its regions over to the two survivors, which take each
// over from its WAL stream, whatever the dead store was doing to it. The
// total holds in every sum and at the end, the history is snapshot
// isolated, every acknowledged plain write reads back, and a backup taken
// after the failover succeeds. The lost store then comes back empty.
func TestAFailoverRacingSplitsMergesCompactionsBackupsAndTransactionsLosesNothing(t *testing.T) {
	dir := t.TempDir()
	bucket := "file://" + dir + "/bucket"
	addrs := []string{freeAddr(t), freeAddr(t), freeAddr(t)}
	worker := start(t, "compactor", "compactor", "--name=w1", "--cache-bytes=64MiB")
	walDir := func(i int) string { return fmt.Sprintf("%s/wal-%d", dir, i) }
	args := func(i int) []string { return elasticStoreArgs(t, bucket, walDir(i), addrs, i, worker) }
	var mu sync.Mutex // guards stores
	stores := make([]*proc, 3)
	for i := range stores {
		stores[i] = start(t, fmt.Sprintf("store-%d", i), args(i)...)
	}
	live := func() []*proc {
		mu.Lock()
		defer mu.Unlock()
		var out []*proc
		for _, s := range stores {
			if s != nil {
				out = append(out, s)
			}
		}
		return out
	}
	sum := func(series string) float64 {
		n := 0.0
		for _, s := range live() {
			n += s.metric(t, series)
		}
		return n
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	c := newClient(t, stores...)
	b, err := bank.Open(ctx, c, bank.Config{Regions: bankRegions, AccountsPerRegion: 3, Key: bankAccount,
		StartBalance: 100, Transferers: 3, Summers: 1, AbandonEvery: 10})
	if err != nil {
		t.Fatal(err)
	}
	w := startUserWriters(c, 2)
	b.Start(ctx)
	bankStopped := false
	defer func() {
		if !bankStopped {
			b.Stop()
		}
	}()

	// Flushes and offloaded compactions of a region of some live store,
	// and backups through some live store, each loop one after the other;
	// a store lost or a region moving answers errors, which are counted.
	stop := make(chan struct{})
	var maintained, backups, refused atomic.Int64
	var loops sync.WaitGroup
	loop := func(seed uint64, step func(ctx context.Context, s *proc, rnd *rand.Rand, n int) error) {
		loops.Add(1)
		go func() {
			defer loops.Done()
			rnd := rand.New(rand.NewPCG(seed, 2))
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				case <-time.After(150 * time.Millisecond): // pacing, not synchronization
				}
				ss := live()
				cctx, ccancel := context.WithTimeout(ctx, 20*time.Second)
				err := step(cctx, ss[rnd.IntN(len(ss))], rnd, n)
				ccancel()
				if err != nil {
					refused.Add(1)
				}
			}
		}()
	}
	loop(1, func(ctx context.Context, s *proc, rnd *rand.Rand, _ int) error {
		rs, err := s.kv().Regions(ctx, &kvpb.RegionsRequest{})
		if err != nil || len(rs.Regions) == 0 {
			return err
		}
		name := rs.Regions[rnd.IntN(len(rs.Regions))].Name
		if _, err := s.admin().Flush(ctx, &kvpb.FlushRequest{Region: name}); err != nil {
			return err
		}
		if _, err := s.admin().Compact(ctx, &kvpb.CompactRequest{Region: name, Major: rnd.IntN(2) == 0}); err != nil {
			return err
		}
		maintained.Add(1)
		return nil
	})
	loop(3, func(ctx context.Context, s *proc, _ *rand.Rand, n int) error {
		if _, err := s.admin().Backup(ctx, &kvpb.BackupRequest{Id: fmt.Sprintf("race-%03d", n)}); err != nil {
			return err
		}
		backups.Add(1)
		return nil
	})

	waitFor(t, "2 splits by load, a move and a backup", func() bool {
		return sum(`bellows_region_splits_total{reason="load"}`) >= 2 && sum("bellows_region_moves_total") >= 1 && backups.Load() >= 1
	})
	lost := 1
	mu.Lock()
	stores[lost].kill()
	stores[lost] = nil
	mu.Unlock()
	if err := os.RemoveAll(walDir(lost)); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	backupsAtKill := backups.Load()
	waitWithin(t, "the survivors' balancer failing the lost store's regions over", 60*time.Second, 50*time.Millisecond, func() bool {
		return sum("bellows_failovers_total") >= 1
	})
	t.Logf("regions failed over %v after the kill", time.Since(killed).Round(10*time.Millisecond))
	if err := b.AwaitTransfers(ctx, b.Transfers()+50, time.Minute); err != nil {
		t.Fatalf("transfers after the failover: %v", err)
	}
	waitWithin(t, "a backup after the failover", 60*time.Second, 50*time.Millisecond, func() bool {
		return backups.Load() > backupsAtKill
	})

	mu.Lock()
	stores[lost] = start(t, fmt.Sprintf("store-%d", lost), args(lost)...)
	mu.Unlock()
	if err := b.AwaitTransfers(ctx, b.Transfers()+20, time.Minute); err != nil {
		t.Fatalf("transfers after the lost store came back: %v", err)
	}
	close(stop)
	loops.Wait()
	b.Stop()
	bankStopped = true
	w.halt(t)
	t.Logf("%.0f load splits, %.0f moves, %.0f failovers, %.0f remote compactions (counted by the stores running at the end); %d flushes and compactions, %d backups, %d refused or failed under the changes",
		sum(`bellows_region_splits_total{reason="load"}`), sum("bellows_region_moves_total"), sum("bellows_failovers_total"),
		sum(`bellows_compactions_total{location="remote",result="success"}`), maintained.Load(), backups.Load(), refused.Load())
	checkBank(t, ctx, b, "a store lost with its volume under splits, merges, moves, compactions, backups and transactions")
	w.checkAcked(t, ctx, c)
}
