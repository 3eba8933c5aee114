package process

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

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
		fmt.Sprintf("--regions=%d", failoverRegions), "--balance-interval=500ms", "--split-bytes=0", "--merge-bytes=0")
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
// the bank's total is exact in every snapshot, and the history is snapshot
// isolated. The lost store then comes back with an empty volume, rejoins
// as a new incarnation, and is given regions again.
func TestAStoreLostWithItsVolumeFailsOverWithoutLosingAWrite(t *testing.T) {
	cl := newFailoverCluster(t)
	c := newClient(t, cl.stores...)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	waitFor(t, "every region open", func() bool {
		n := 0
		for _, rs := range cl.openOn() {
			n += len(rs)
		}
		return n == failoverRegions
	})
	b, err := bank.Open(ctx, c, bank.Config{Regions: failoverRegions, AccountsPerRegion: 2, Key: failoverAccount,
		StartBalance: 100, Transferers: 3, Summers: 1})
	if err != nil {
		t.Fatal(err)
	}
	w := startUserWriters(c, 2)
	b.Start(ctx)
	if err := b.AwaitTransfers(ctx, 50, time.Minute); err != nil {
		b.Stop()
		t.Fatal(err)
	}

	lost := 2
	var held []string
	for i, rs := range cl.openOn() {
		if i == lost {
			held = rs
		}
	}
	if len(held) == 0 {
		t.Fatalf("store-%d serves no region before its loss: %v", lost, cl.openOn())
	}
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
	if err := b.AwaitTransfers(ctx, b.Transfers()+50, time.Minute); err != nil {
		b.Stop()
		t.Fatalf("after the failover: %v", err)
	}

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
	for k, v := range w.acked {
		got, found, err := c.Get(ctx, []byte(k))
		if err != nil || !found || string(got) != v {
			t.Fatalf("acknowledged %s reads %q, %v, %v", k, trim(got), found, err)
		}
	}
	t.Logf("%d acknowledged plain writes read back", len(w.acked))
}

func trim(b []byte) string {
	if len(b) > 20 {
		return string(b[:20]) + "…"
	}
	return string(b)
}
