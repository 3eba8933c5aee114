package process

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	kvpb "github.com/bellows-kv/bellows/proto/bellows/kv/v1"
)

// Three store processes start with one region, on store 0. As a client
// loads keys with a common prefix, the region splits, and the balancer (the
// store holding the lease) moves regions until every store serves some,
// through a SIGKILL of a store in the middle. The client only retries (no
// write fails); afterwards every acknowledged write reads back.
func TestOneRegionSplitsAndSpreadsOverThreeStores(t *testing.T) {
	dir := t.TempDir()
	bucket := "file://" + dir + "/bucket"
	addrs := []string{freeAddr(t), freeAddr(t), freeAddr(t)}
	// Merges are off: the writers' values are zero-padded, so a region
	// that split at 1 MiB in its memstore is some 20 KiB once flushed, far
	// under the merge size (a quarter of the split size). The plan keeps
	// adjacent regions that small together on their store until they
	// merge (--merge-after, 10 minutes), and while bytes are out of
	// balance it makes no count move either: a store left with a run of
	// adjacent daughters kept them for the whole wait below, whose
	// condition is the byte balance's fixed point (regionmap.Plan).
	args := func(i int) []string {
		return append(storeArgs(t, bucket, fmt.Sprintf("%s/wal-%d", dir, i), "Disabled", ""),
			"--split-bytes=1MiB", "--merge-bytes=0", fmt.Sprintf("--region-owner=%d/3", i), "--listen="+addrs[i],
			"--peers="+strings.Join(addrs, ","), "--balance-interval=300ms", "--balance-min-bytes=0")
	}
	stores := make([]*proc, 3)
	for i := range stores {
		stores[i] = start(t, fmt.Sprintf("store-%d", i), args(i)...)
	}
	c := newClient(t, stores[0])

	w := startUserWriters(c, 2)
	// open are the regions each store serves open.
	open := func() [][]*kvpb.RegionInfo {
		out := make([][]*kvpb.RegionInfo, len(stores))
		for i, s := range stores {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			resp, err := s.kv().Regions(ctx, &kvpb.RegionsRequest{})
			cancel()
			if err != nil {
				continue
			}
			for _, r := range resp.Regions {
				if r.Waiting == "" {
					out[i] = append(out[i], r)
				}
			}
		}
		return out
	}
	total := func() int {
		n := 0
		for _, rs := range open() {
			n += len(rs)
		}
		return n
	}
	waitFor(t, "4 regions", func() bool { return total() >= 4 })
	stores[1].kill()
	stores[1] = start(t, "store-1", args(1)...)
	waitFor(t, "9 regions, or a failed write", func() bool { return w.failed() || total() >= 9 })
	w.halt(t)
	// The balancer's fixed point: no region on the fullest store is
	// smaller than its gap to the emptiest (regionmap.Plan would move
	// it), so the stores differ by at most the largest region.
	var layout []string
	defer func() {
		if t.Failed() {
			t.Logf("the stores as last read: %s", strings.Join(layout, "; "))
		}
	}()
	waitFor(t, "the stores within one region's bytes of each other", func() bool {
		layout = layout[:0]
		var hi, lo, largest int64 = 0, -1, 0
		for i, rs := range open() {
			var bytes int64
			for _, r := range rs {
				bytes += r.DataBytes
				largest = max(largest, r.DataBytes)
			}
			hi = max(hi, bytes)
			if lo < 0 || bytes < lo {
				lo = bytes
			}
			layout = append(layout, fmt.Sprintf("store-%d: %d regions, %d KiB", i, len(rs), bytes>>10))
		}
		return lo > 0 && hi-lo <= largest
	})
	ctx := context.Background()
	for k, v := range w.acked {
		ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		got, found, err := c.Get(ctx, []byte(k))
		cancel()
		if err != nil || !found || string(got) != v {
			for i, st := range stores {
				resp, rerr := st.kv().Regions(context.Background(), &kvpb.RegionsRequest{})
				for _, r := range resp.GetRegions() {
					t.Logf("store-%d: %s [%q, %q) waiting %q", i, r.Name, r.Start, r.End, r.Waiting)
				}
				if rerr != nil {
					t.Logf("store-%d: %v", i, rerr)
				}
			}
			t.Fatalf("get %s after %d acknowledged writes: %q %v %v", k, len(w.acked), got, found, err)
		}
	}
	var moves float64
	for _, st := range stores {
		moves += st.metric(t, "bellows_region_moves_total")
	}
	if moves == 0 {
		t.Fatal("bellows_region_moves_total is 0 on every store, yet regions moved")
	}
	t.Logf("%d acknowledged writes; %v; %.0f moves", len(w.acked), layout, moves)
}
