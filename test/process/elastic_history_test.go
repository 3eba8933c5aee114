package process

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// A history of puts, compare-and-sets, gets and scans stays linearizable
// (porcupine, per key and as a whole) while its regions split by load, merge when they cool,
// move between three store processes, and one store is SIGKILLed. The
// clients all go through store-0, which forwards; a failed call is an
// operation of unknown outcome.
func TestHistoryIsLinearizableThroughSplitsMergesMovesAndAKill(t *testing.T) {
	stores, args, sum, _ := startElasticStores(t)
	splits := func() float64 {
		return sum(`bellows_region_splits_total{reason="load"}`)
	}
	h := newHistory(stores[0].kv(), 4, 8)
	h.cas = true
	h.perClient = 60
	h.failurePause = 20 * time.Millisecond
	h.retryFor = 10 * time.Second
	h.scanEvery = 50 // scans, which read every region, leave cold ones under 10/s
	h.start()
	// A region splits at its sampled median once it serves over 40
	// requests/s (and twice its store's median); the balancer spreads
	// the daughters, which then split again.
	waitFor(t, "3 splits by load and a move", func() bool {
		return splits() >= 3 && sum("bellows_region_moves_total") >= 1
	})
	stores[1].kill()
	stores[1] = start(t, "store-1", args(1)...)
	// Keys 1-7 go cold: their regions are brought onto one store and merge.
	h.setHot(0, 1)
	waitFor(t, "a merge of cooled regions", func() bool { return sum("bellows_region_merges_total") >= 1 })
	h.setHot(0, 8)
	h.stopAfterMore(20)
	t.Logf("%.0f load splits, %.0f merges, %.0f moves (counted by the stores running at the end)",
		splits(), sum("bellows_region_merges_total"), sum("bellows_region_moves_total"))
	h.check(t)
}

// startElasticStores starts three store processes over one bucket whose
// regions split by load only (a window of 3 s: 16 sampled keys need 43
// requests/s), merge when cold (under 10 requests/s) for a second, and
// move by a balancer running every 300ms at any gap. args(i) restarts
// store i as it was; sum adds a series over the stores running; bucket is
// their bucket's URL. extra are more flags for every store.
func startElasticStores(t *testing.T, extra ...string) (stores []*proc, args func(i int) []string, sum func(series string) float64, bucket string) {
	dir := t.TempDir()
	bucket = "file://" + dir + "/bucket"
	addrs := []string{freeAddr(t), freeAddr(t), freeAddr(t)}
	args = func(i int) []string {
		a := append(storeArgs(t, bucket, fmt.Sprintf("%s/wal-%d", dir, i), "Disabled", ""),
			"--split-bytes=0", "--split-qps=40", "--load-window=3s", "--merge-bytes=1GiB", "--merge-after=1s",
			fmt.Sprintf("--region-owner=%d/3", i), "--listen="+addrs[i], "--peers="+strings.Join(addrs, ","),
			"--balance-interval=300ms", "--balance-min-bytes=0")
		return append(a, extra...)
	}
	stores = make([]*proc, 3)
	for i := range stores {
		stores[i] = start(t, fmt.Sprintf("store-%d", i), args(i)...)
	}
	sum = func(series string) float64 {
		n := 0.0
		for _, s := range stores {
			n += s.metric(t, series)
		}
		return n
	}
	return stores, args, sum, bucket
}
