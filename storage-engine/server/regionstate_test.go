package server

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	kvpb "github.com/bellows-kv/bellows/proto/bellows/kv/v1"
	"github.com/bellows-kv/bellows/storage-engine/blob"
	"github.com/bellows-kv/bellows/storage-engine/blockcache"
	"github.com/bellows-kv/bellows/storage-engine/region"
)

// The Regions answer carries a region's size, load, owner and WAL state,
// and says the same as the per-region metrics: both read regionState.
func TestRegionsAnswerMatchesRegionMetrics(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	b, err := blob.Open(ctx, "file://"+filepath.Join(dir, "bucket"))
	if err != nil {
		t.Fatal(err)
	}
	spans, err := SplitEvenly(1)
	if err != nil {
		t.Fatal(err)
	}
	s, err := OpenStore(ctx, spans, StoreOptions{
		WALRoot: filepath.Join(dir, "wal"), Name: "store-7",
		Region: region.Options{Bucket: b, DisableAutoCompaction: true, MemstoreBytes: 1 << 20},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	reg := prometheus.NewRegistry()
	RegisterStoreGauges(reg, s, blockcache.New(1<<20))
	kv := NewKV(s, nil, nil)

	const puts = 20
	for i := range puts {
		if _, err := kv.Put(ctx, &kvpb.PutRequest{Key: []byte{'k', byte(i)}, Value: make([]byte, 100)}); err != nil {
			t.Fatal(err)
		}
	}
	s.checkLoad(ctx, time.Second) // ends a load window: the rate is its requests per second

	one := func() *kvpb.RegionInfo {
		t.Helper()
		resp, err := kv.Regions(ctx, &kvpb.RegionsRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Regions) != 1 {
			t.Fatalf("regions %v, want region-000", resp.Regions)
		}
		return resp.Regions[0]
	}
	r := one()
	if r.Store != "store-7" || r.Waiting != "" {
		t.Errorf("store %q waiting %q, want store-7 and open", r.Store, r.Waiting)
	}
	if r.Requests != puts || r.RequestsPerSecond != puts {
		t.Errorf("requests %d at %v/s, want %d over a 1s window", r.Requests, r.RequestsPerSecond, puts)
	}
	if r.MemstoreBytes <= 0 || r.DataBytes < r.MemstoreBytes || r.WalBytes <= 0 || r.OldestUnflushedMs < 0 {
		t.Errorf("before a flush: data %d, memstore %d, WAL %d bytes, oldest unflushed %dms; want a memstore in the data and a WAL",
			r.DataBytes, r.MemstoreBytes, r.WalBytes, r.OldestUnflushedMs)
	}
	if c := r.Compaction; c.GetRunning() || c.GetQueued() {
		t.Errorf("compaction %v with auto-compaction off and none asked for", c)
	}
	gauge := func(name string) float64 {
		m, ok := series(t, reg, name)["region=region-000,"]
		if !ok {
			t.Fatalf("no %s for region-000", name)
		}
		if m.GetCounter() != nil {
			return m.GetCounter().GetValue()
		}
		return m.GetGauge().GetValue()
	}
	if g := gauge("bellows_region_bytes"); g != float64(r.DataBytes) {
		t.Errorf("bellows_region_bytes %v, Regions data_bytes %d", g, r.DataBytes)
	}
	if g := gauge("bellows_region_requests_total"); g != float64(r.Requests) {
		t.Errorf("bellows_region_requests_total %v, Regions requests %d", g, r.Requests)
	}

	if err := engine(t, s).Flush(ctx); err != nil {
		t.Fatal(err)
	}
	r = one()
	if r.MemstoreBytes != 0 || r.OldestUnflushedMs != 0 || r.SstFiles != 1 || r.DataBytes <= 0 {
		t.Errorf("after a flush: memstore %d bytes, oldest unflushed %dms, %d SSTs, data %d bytes; want an empty memstore in one SST",
			r.MemstoreBytes, r.OldestUnflushedMs, r.SstFiles, r.DataBytes)
	}
	if g := gauge("bellows_region_sst_files"); g != float64(r.SstFiles) {
		t.Errorf("bellows_region_sst_files %v, Regions sst_files %d", g, r.SstFiles)
	}
}

// A region waiting for its previous owner is listed, saying so, with no
// readings.
func TestRegionsListsWaitingRegionWithReason(t *testing.T) {
	kv := testKV(t, false)
	kv.store.snap.Load().live[0].eng.Store(nil) // only the waiting one matters here
	resp, err := kv.Regions(context.Background(), &kvpb.RegionsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var waiting *kvpb.RegionInfo
	for _, r := range resp.Regions {
		if r.Name == "region-002" {
			waiting = r
		}
	}
	if waiting == nil || !strings.Contains(waiting.Waiting, "waiting for its owner") || waiting.DataBytes != 0 {
		t.Fatalf("region-002: %v, want it waiting for its owner, without readings", waiting)
	}
}
