package offload

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bellows-kv/bellows/storage-engine/blob"
	"github.com/bellows-kv/bellows/storage-engine/compaction"
	"github.com/bellows-kv/bellows/storage-engine/hlc"
	"github.com/bellows-kv/bellows/storage-engine/kv"
	"github.com/bellows-kv/bellows/storage-engine/region"
)

// A major compaction run on a compaction worker drops the values expired
// below its GC horizon, as a local one does, and the region reads what it
// read before.
func TestAnOffloadedCompactionDropsExpiredValues(t *testing.T) {
	ctx := context.Background()
	url := "file://" + t.TempDir()
	b, err := blob.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	addr, w := startWorker(t, listen(t), 64<<20)
	exec, err := New(Options{Mode: Required, Workers: Static{addr}, BucketURL: url, Local: compaction.Local{Bucket: b}})
	if err != nil {
		t.Fatal(err)
	}
	defer exec.Close()
	var now atomicTime
	now.set(time.Now())
	r, err := region.Open(ctx, region.Options{Name: "r", Bucket: b, WALDir: t.TempDir(), DisableAutoCompaction: true, Executor: exec,
		Clock: hlc.New(now.get, 0), Retention: compaction.Retention{GCTTL: time.Minute}})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	for _, k := range []string{"a", "b", "c"} {
		if _, err := r.Apply(new(region.Batch).PutExpiring([]byte(k), []byte("short"), time.Second)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := r.Apply(new(region.Batch).PutExpiring([]byte("d"), []byte("long"), 24*time.Hour).Put([]byte("e"), []byte("plain"))); err != nil {
		t.Fatal(err)
	}
	if err := r.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	now.set(now.get().Add(time.Hour))
	info, err := r.Compact(ctx, true)
	if err != nil {
		t.Fatal(err)
	}
	st, err := w.Status(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if st.CompactionRateBytesPerSecond <= 0 {
		t.Fatalf("the worker ran no compaction: %+v", st)
	}
	if info.Stats.DroppedExpired != 3 || info.Stats.OutputVersions != 2 {
		t.Fatalf("offloaded compaction stats %+v; want the 3 expired values dropped, 2 kept", info.Stats)
	}
	got, err := r.Scan(nil, nil, 0, kv.MaxTimestamp)
	if err != nil || len(got) != 2 || string(got[0].Key) != "d" || string(got[1].Key) != "e" {
		t.Fatalf("scan after the compaction: %v, %v; want d and e", got, err)
	}
}

// atomicTime is a physical clock moved only by set.
type atomicTime struct{ ns atomic.Int64 }

func (a *atomicTime) set(t time.Time) { a.ns.Store(t.UnixNano()) }
func (a *atomicTime) get() time.Time  { return time.Unix(0, a.ns.Load()) }
