package process

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/bellows-kv/bellows/client"
	"github.com/bellows-kv/bellows/internal/bank"
	kvpb "github.com/bellows-kv/bellows/proto/bellows/kv/v1"
)

// failoverCluster is three store processes with the balancer on (which
// fails dead stores over), eight regions spread over them, and the default
// durability: every region's WAL in the bucket.
type failoverCluster struct {
	t      *testing.T
	dir    string
	bucket string
	addrs  []string
	stores []*proc
}

func newFailoverCluster(t *testing.T) *failoverCluster {
	dir := t.TempDir()
	c := &failoverCluster{t: t, dir: dir, bucket: "file://" + dir + "/bucket",
		addrs: []string{freeAddr(t), freeAddr(t), freeAddr(t)}}
	c.stores = make([]*proc, len(c.addrs))
	for i := range c.stores {
		c.stores[i] = c.start(i)
	}
	return c
}

func (c *failoverCluster) walDir(i int) string { return fmt.Sprintf("%s/wal-%d", c.dir, i) }

func (c *failoverCluster) start(i int) *proc {
	return startTxnStore(c.t, fmt.Sprintf("store-%d", i), c.bucket, c.walDir(i), c.addrs[i], fmt.Sprintf("%d/3", i), strings.Join(c.addrs, ","),
		fmt.Sprintf("--regions=%d", failoverRegions), "--balance-interval=500ms", "--split-bytes=0", "--merge-bytes=0", archiveEvery)
}

// startLoad awaits every region open, then starts the bank (transfers
// across the regions, snapshot sums) and two plain writers through a Go
// client, and returns once 50 transfers committed. ctx ends with the test.
func (c *failoverCluster) startLoad() (context.Context, *client.Client, *bank.Bank, *userWriters) {
	t := c.t
	t.Helper()
	cl := newClient(t, c.stores...)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	t.Cleanup(cancel)
	waitFor(t, "every region open", func() bool {
		n := 0
		for _, rs := range c.openOn() {
			n += len(rs)
		}
		return n == failoverRegions
	})
	b, err := bank.Open(ctx, cl, bank.Config{Regions: failoverRegions, AccountsPerRegion: 2, Key: failoverAccount,
		StartBalance: 100, Transferers: 3, Summers: 1})
	if err != nil {
		t.Fatal(err)
	}
	w := startUserWriters(cl, 2)
	b.Start(ctx)
	if err := b.AwaitTransfers(ctx, 50, time.Minute); err != nil {
		b.Stop()
		t.Fatal(err)
	}
	return ctx, cl, b, w
}

// failoverRegions is how many regions the cluster cuts the key space into.
const failoverRegions = 8

// openOn are the regions each store serves open (nil for a store that
// does not answer).
func (c *failoverCluster) openOn() [][]string {
	out := make([][]string, len(c.stores))
	for i, s := range c.stores {
		if s == nil {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		resp, err := s.kv().Regions(ctx, &kvpb.RegionsRequest{})
		cancel()
		if err != nil {
			continue
		}
		for _, r := range resp.Regions {
			if r.Waiting == "" {
				out[i] = append(out[i], r.Name)
			}
		}
	}
	return out
}

// failoverAccount is account i's key, in region i % failoverRegions of the
// first-byte cut --regions makes.
func failoverAccount(i int) []byte {
	return append([]byte{byte(256*(i%failoverRegions)/failoverRegions + 1)}, fmt.Sprintf("acct-%02d", i)...)
}

// A store is SIGKILLed under the bank workload and plain writes, and its
// WAL directory deleted: its node and volume are gone. The balancer fences
// its liveness lease once it has run out and gives its regions to the two
// survivors, which take them over from their WAL streams in the bucket. No
// write fails (clients only retry), every acknowledged write reads back,
// the bank's total is exact in every snapshot, the history is snapshot
// isolated, and a history of puts, compare-and-sets, gets and scans on a
// region of the lost store is linearizable. The lost store then comes back with an empty volume, rejoins
// as a new incarnation, and is given regions again.
func TestAStoreLostWithItsVolumeFailsOverWithoutLosingAWrite(t *testing.T) {
	cl := newFailoverCluster(t)
	ctx, c, b, w := cl.startLoad()

	// The store lost is the one serving the region of a history of puts,
	// compare-and-sets, gets and scans, which a survivor forwards.
	historyRegion := fmt.Sprintf("region-%03d", int('r')*failoverRegions/256)
	lost := -1
	var held []string
	for i, rs := range cl.openOn() {
		if slices.Contains(rs, historyRegion) {
			lost, held = i, rs
		}
	}
	if lost < 0 {
		t.Fatalf("no store serves %s, the history's region: %v", historyRegion, cl.openOn())
	}
	h := newHistory(cl.stores[(lost+1)%len(cl.stores)].kv(), 4, 8)
	h.cas, h.perClient, h.retryFor, h.failurePause = true, 60, 30*time.Second, 20*time.Millisecond
	h.start()
	waitFor(t, "the history to record operations", func() bool {
		h.mu.Lock()
		defer h.mu.Unlock()
		return len(h.ops) >= 100
	})
	cl.stores[lost].kill()
	cl.stores[lost] = nil
	if err := os.RemoveAll(cl.walDir(lost)); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	waitWithin(t, "the lost store's regions open on the survivors", 30*time.Second, 20*time.Millisecond, func() bool {
		n := 0
		for _, rs := range cl.openOn() {
			n += len(rs)
		}
		return n == failoverRegions
	})
	t.Logf("store-%d's %d regions (%v) open on the survivors %v after its kill", lost, len(held), held, time.Since(killed).Round(10*time.Millisecond))
	// The balancer (on one survivor) counted the failover, timed it from
	// the lease's end, and reads no region without a live owner after it.
	var failedOver, timed, ownerless float64
	for _, s := range cl.stores {
		if s != nil {
			failedOver += s.metric(t, "bellows_failovers_total")
			timed += s.metric(t, "bellows_failover_seconds_count")
			ownerless += s.metric(t, "bellows_regions_without_live_owner")
		}
	}
	// held is what the store served before the kill; the balancer may
	// have given it one more region since (a move the load's start set
	// off), which then fails over too.
	if failedOver < float64(len(held)) || failedOver > float64(len(held)+1) || timed != 1 || ownerless != 0 {
		t.Fatalf("after the failover the survivors export %v regions failed over (want %d, or one more moved there before the kill), %v failovers timed (want 1), %v regions without a live owner (want 0)",
			failedOver, len(held), timed, ownerless)
	}
	if err := b.AwaitTransfers(ctx, b.Transfers()+50, time.Minute); err != nil {
		b.Stop()
		t.Fatalf("after the failover: %v", err)
	}
	h.stopAfterMore(20)
	h.check(t)

	cl.stores[lost] = cl.start(lost)
	waitWithin(t, "the returning store given regions by count", 60*time.Second, 50*time.Millisecond, func() bool {
		return len(cl.openOn()[lost]) > 0
	})
	if err := b.AwaitTransfers(ctx, b.Transfers()+50, time.Minute); err != nil {
		b.Stop()
		t.Fatalf("after the return: %v", err)
	}
	b.Stop()
	w.halt(t)
	checkBank(t, ctx, b, fmt.Sprintf("store-%d lost with its volume, failed over, and back empty", lost))
	w.checkAcked(t, ctx, c)
	// The change feed read from the bucket holds the lost store's
	// acknowledged writes, which the takeover fenced in its WAL stream.
	checkFeedAgainstScan(t, ctx, cl.bucket, c, uint64(time.Now().UnixNano()))
}

func trim(b []byte) string {
	if len(b) > 20 {
		return string(b[:20]) + "…"
	}
	return string(b)
}

// regionProbeKey is a key in region name of the failover cluster.
func regionProbeKey(t *testing.T, name, suffix string) []byte {
	var n int
	if _, err := fmt.Sscanf(name, "region-%d", &n); err != nil || n >= failoverRegions {
		t.Fatalf("region %q is not one of the cluster's first %d", name, failoverRegions)
	}
	return append([]byte{byte(256*n/failoverRegions + 1)}, suffix...)
}

// A store paused (SIGSTOP) for longer than its liveness lease, its regions
// failed over meanwhile, then resumed (SIGCONT): a write sent to it while it
// was paused is refused once it runs again, and never becomes visible; the
// store learns it was fenced and stops; it comes back as a new incarnation.
// Under the bank workload and plain writes throughout: no write fails, every
// acknowledged write reads back, the total is exact.
func TestAPausedStoreNeitherAcknowledgesNorServesPastItsLease(t *testing.T) {
	cl := newFailoverCluster(t)
	ctx, c, b, w := cl.startLoad()
	paused := 2
	held := cl.openOn()[paused]
	if len(held) == 0 {
		t.Fatalf("store-%d serves no region: %v", paused, cl.openOn())
	}
	probe := regionProbeKey(t, held[0], "zombie-probe")
	zombie := cl.stores[paused]
	if _, err := zombie.kv().Put(ctx, &kvpb.PutRequest{Key: probe, Value: []byte("before")}); err != nil {
		t.Fatalf("a write to store-%d before its pause: %v", paused, err)
	}

	if err := zombie.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	cl.stores[paused] = nil // not asked while paused
	waitWithin(t, "the paused store's regions open on the others", 30*time.Second, 20*time.Millisecond, func() bool {
		n := 0
		for _, rs := range cl.openOn() {
			n += len(rs)
		}
		return n == failoverRegions
	})
	t.Logf("store-%d's regions %v open elsewhere %v after its pause", paused, held, time.Since(stopped).Round(10*time.Millisecond))
	// Sent while it is paused, read by it once it runs again.
	during := make(chan error, 1)
	go func() {
		pctx, pcancel := context.WithTimeout(ctx, 30*time.Second)
		defer pcancel()
		_, err := zombie.kv().Put(pctx, &kvpb.PutRequest{Key: probe, Value: []byte("during")})
		during <- err
	}()
	time.Sleep(200 * time.Millisecond) // not synchronisation: lets the request reach the paused process's socket
	if err := zombie.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if err := <-during; status.Code(err) != codes.Unavailable {
		t.Fatalf("a write sent to the paused store answered %v after it resumed, want UNAVAILABLE", err)
	}
	select {
	case <-zombie.exited:
	case <-time.After(20 * time.Second):
		t.Fatalf("store-%d did not stop after learning it was fenced:\n%s", paused, zombie.stderr.String())
	}
	if got, found, err := c.Get(ctx, probe); err != nil || !found || string(got) != "before" {
		t.Fatalf("the probe key reads %q, %v, %v; want the value acknowledged before the pause", got, found, err)
	}
	cl.stores[paused] = cl.start(paused)
	if err := b.AwaitTransfers(ctx, b.Transfers()+50, time.Minute); err != nil {
		b.Stop()
		t.Fatalf("after the paused store came back: %v", err)
	}
	b.Stop()
	w.halt(t)
	checkBank(t, ctx, b, fmt.Sprintf("store-%d paused past its lease and resumed", paused))
	w.checkAcked(t, ctx, c)
}

// waitingOn are the regions store i is assigned and not yet serving (an
// open in progress, a takeover among them).
func (c *failoverCluster) waitingOn(i int) []string {
	s := c.stores[i]
	if s == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	resp, err := s.kv().Regions(ctx, &kvpb.RegionsRequest{})
	if err != nil {
		return nil
	}
	var out []string
	for _, r := range resp.Regions {
		if r.Waiting != "" {
			out = append(out, r.Name)
		}
	}
	return out
}

// lose SIGKILLs store i and deletes its WAL directory: its node and volume
// are gone.
func (c *failoverCluster) lose(i int) {
	c.t.Helper()
	c.stores[i].kill()
	c.stores[i] = nil
	if err := os.RemoveAll(c.walDir(i)); err != nil {
		c.t.Fatal(err)
	}
}

// A second store is lost while it takes over the regions of the first
// (SIGKILLed with its volume once it is assigned them, before or while it
// opens them): the last store takes over everything, each region from the
// streams of both dead owners, under the bank workload and plain writes.
// No write fails, every acknowledged write reads back, the total is exact.
// Both lost stores then come back empty and are given regions again.
func TestASecondStoreLostDuringAFailoverLosesNothing(t *testing.T) {
	cl := newFailoverCluster(t)
	ctx, c, b, w := cl.startLoad()

	first, second := 2, 1
	held := cl.openOn()[first]
	if len(held) == 0 {
		t.Fatalf("store-%d serves no region before its loss: %v", first, cl.openOn())
	}
	cl.lose(first)
	killed := time.Now()
	// The second loss lands once the failover gives it the first's
	// regions: the map names it their owner, and its opens (each a
	// takeover: a claim, a fence, a replay and a flush) are under way.
	var midway []string
	waitWithin(t, "store-1 assigned some of store-2's regions", 30*time.Second, 5*time.Millisecond, func() bool {
		midway = nil
		for _, r := range cl.waitingOn(second) {
			if slices.Contains(held, r) {
				midway = append(midway, r)
			}
		}
		return len(midway) > 0
	})
	cl.lose(second)
	t.Logf("store-%d lost %v after store-%d, while opening %v", second, time.Since(killed).Round(10*time.Millisecond), first, midway)

	waitWithin(t, "every region open on the last store", 60*time.Second, 20*time.Millisecond, func() bool {
		return len(cl.openOn()[0]) == failoverRegions
	})
	t.Logf("all %d regions open on store-0 %v after the first loss", failoverRegions, time.Since(killed).Round(10*time.Millisecond))
	if err := b.AwaitTransfers(ctx, b.Transfers()+50, time.Minute); err != nil {
		b.Stop()
		t.Fatalf("after both failovers: %v", err)
	}

	cl.stores[first] = cl.start(first)
	cl.stores[second] = cl.start(second)
	waitWithin(t, "the returning stores given regions by count", 60*time.Second, 50*time.Millisecond, func() bool {
		on := cl.openOn()
		return len(on[first]) > 0 && len(on[second]) > 0
	})
	if err := b.AwaitTransfers(ctx, b.Transfers()+50, time.Minute); err != nil {
		b.Stop()
		t.Fatalf("after the returns: %v", err)
	}
	b.Stop()
	w.halt(t)
	checkBank(t, ctx, b, "two stores lost with their volumes, the second during the failover of the first")
	w.checkAcked(t, ctx, c)
}
