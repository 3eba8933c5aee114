package process

import (
	"context"
	"crypto/rand"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	kvpb "github.com/bellows-kv/bellows/proto/bellows/kv/v1"
)

// The small-cache scenario: two workers whose caches hold a running job and
// about one kept output each, four regions of one store compacting at once,
// round after round, for each warmup mode that keeps or streams outputs and
// for both offload modes that use workers. A kept output is a cache entry
// (its bytes are in the bucket), so admission evicts it rather than refuse
// a job: every forced major compaction completes within its bound (a cache
// full of kept outputs used to refuse every next job until the outputs'
// 10-minute TTL), and with RemoteCache, whose outputs stay kept while
// their file is live, the workers did evict: the run is in the regime
// where keeping would have refused.
func TestASmallWorkerCacheNeverStopsACompaction(t *testing.T) {
	const (
		regions = 4
		keys    = 300 // per region, overwritten every round: outputs stay ~300 KiB
		perRnd  = 150 // keys written per region per round
		rounds  = 4
		bound   = 30 * time.Second
	)
	for _, tc := range []struct {
		offload, warmup string
		evicts          bool
	}{
		{"Required", "RemoteCache", true},
		{"Preferred", "RemoteCache", true},
		{"Required", "PreSwitch", false},
		{"Required", "ThrottledIncremental, rateBytesPerSecond: 4194304", false},
	} {
		name := tc.offload + "/" + strings.Split(tc.warmup, ",")[0]
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			workers := []*proc{
				start(t, "w1", "compactor", "--name=w1", "--cache-bytes=768KiB"),
				start(t, "w2", "compactor", "--name=w2", "--cache-bytes=768KiB"),
			}
			args := storeArgs(t, "file://"+filepath.Join(dir, "bucket"), filepath.Join(dir, "wal"), tc.offload,
				"warmup: {mode: "+tc.warmup+"}\n")
			args[slices.Index(args, "--regions=1")] = fmt.Sprintf("--regions=%d", regions)
			args = append(args, "--compactors="+workers[0].grpc+","+workers[1].grpc)
			s := start(t, "store", args...)

			want := map[string][]byte{}
			var mu sync.Mutex
			// --regions=4 splits the key space by the first byte: 0x10,
			// 0x50, 0x90 and 0xd0 fall in the four regions.
			write := func(region, round int) {
				for i := range perRnd {
					k := string([]byte{byte(0x10 + 0x40*region)}) + fmt.Sprintf("-%04d", (round*perRnd+i)%keys)
					v := make([]byte, 1024)
					_, _ = rand.Read(v)
					if _, err := s.kv().Put(context.Background(), &kvpb.PutRequest{Key: []byte(k), Value: v}); err != nil {
						t.Errorf("put %q: %v", k, err)
						return
					}
					mu.Lock()
					want[k] = v
					mu.Unlock()
				}
			}
			for round := range rounds {
				var wg sync.WaitGroup
				for r := range regions {
					wg.Go(func() { write(r, round) })
				}
				wg.Wait()
				if _, err := s.admin().Flush(context.Background(), &kvpb.FlushRequest{}); err != nil {
					t.Fatal(err)
				}
				errs := make([]error, regions)
				for r := range regions {
					wg.Go(func() {
						ctx, cancel := context.WithTimeout(context.Background(), bound)
						defer cancel()
						name := fmt.Sprintf("region-%03d", r)
						began := time.Now()
						resp, err := s.admin().Compact(ctx, &kvpb.CompactRequest{Region: name, Major: true})
						if err == nil && !resp.Compacted {
							err = fmt.Errorf("not compacted")
						}
						if err != nil {
							errs[r] = fmt.Errorf("%s, round %d, after %v: %w", name, round, time.Since(began).Round(time.Millisecond), err)
						}
					})
				}
				wg.Wait()
				for _, err := range errs {
					if err != nil {
						t.Error(err)
					}
				}
				if t.Failed() {
					t.FailNow()
				}
			}
			var evictions, rejections float64
			for _, w := range workers {
				evictions += w.metric(t, "bellows_compactor_kept_output_evictions_total")
				rejections += w.metric(t, "bellows_compactor_rejections_total")
			}
			t.Logf("%d rounds of %d concurrent major compactions: %v kept outputs evicted, %v jobs refused (each retried at once elsewhere)",
				rounds, regions, evictions, rejections)
			if tc.evicts && evictions == 0 {
				t.Errorf("no kept output was evicted: the caches held every output, so the run did not test admission under a full cache")
			}
			checkData(t, s, want)
			if log := s.stderr.String(); strings.Contains(log, "cache full") && tc.offload == "Required" {
				t.Logf("the store saw refusals for a full cache (running jobs filled it); every compaction still completed within %v", bound)
			}
		})
	}
}
