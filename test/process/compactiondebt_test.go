package process

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/bellows-kv/bellows/autoscaler"
	"github.com/bellows-kv/bellows/internal/contract"
)

// A store's compaction debt and oldest wait, as the autoscaler scrapes them
// from a real store process: with offload Required and its only worker not
// running yet, the compaction the policy selects after the third flush
// waits; the store reports its inputs as owed and the wait growing, and
// the autoscaler's scraper reads both. Once the worker starts, the
// compaction runs and both return to zero.
func TestAStoreReportsTheCompactionWorkItIsNotGetting(t *testing.T) {
	dir := t.TempDir()
	workerAddr := freeAddr(t)
	config := filepath.Join(dir, "engine.yaml")
	// The exploring policy's defaults, with a small memstore: three
	// flushed files of similar size make a window.
	if err := os.WriteFile(config, []byte("compaction: {minFiles: 3, maxFiles: 10, ratio: 1.2, maxBytes: 1073741824}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s := start(t, "store", "store", "--create-bucket", "--bucket=file://"+filepath.Join(dir, "bucket"), "--wal-dir="+filepath.Join(dir, "wal"),
		"--config="+config, "--regions=1", "--offload=Required", "--compactors="+workerAddr)
	want := load(t, s, 3, 50)

	waitWithin(t, "the store to report a compaction waiting for a worker for 2 s", time.Minute, 100*time.Millisecond, func() bool {
		return s.metric(t, contract.MetricCompactionOldestWait) >= 2
	})
	debt := s.metric(t, contract.MetricCompactionDebtBytes)
	if debt < 3*50*1024 {
		t.Fatalf("the store owes %.0f bytes with three files of 50 KiB of values waiting, want at least their %d", debt, 3*50*1024)
	}
	scraper := &autoscaler.Scraper{}
	obs, err := scraper.Observe(context.Background(), autoscaler.Targets{Pool: "p",
		Stores: []autoscaler.Endpoint{{Pod: "store", URL: s.metricsURL() + "/metrics"}}})
	if err != nil {
		t.Fatal(err)
	}
	if obs.DebtBytes < 3*50*1024 || obs.OldestWait < 2*time.Second {
		t.Fatalf("the autoscaler's scrape reads a debt of %.0f bytes and an oldest wait of %v, want the store's", obs.DebtBytes, obs.OldestWait)
	}
	t.Logf("waiting for a worker: debt %.0f bytes, oldest wait %v", obs.DebtBytes, obs.OldestWait)

	start(t, "w1", "compactor", "--name=w1", "--cache-bytes=64MiB", "--listen="+workerAddr)
	waitWithin(t, "the compaction to run and the debt and wait to return to zero", time.Minute, 100*time.Millisecond, func() bool {
		return s.metric(t, contract.MetricCompactionDebtBytes) == 0 && s.metric(t, contract.MetricCompactionOldestWait) == 0
	})
	checkData(t, s, want)
}
