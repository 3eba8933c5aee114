package backup

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bellows-kv/bellows/storage-engine/compaction"
	"github.com/bellows-kv/bellows/storage-engine/hlc"
	"github.com/bellows-kv/bellows/storage-engine/kv"
	"github.com/bellows-kv/bellows/storage-engine/region"
	"github.com/bellows-kv/bellows/storage-engine/regionmap"
)

// A backup taken before a value's expiry holds it: after the value expired
// and a compaction dropped it from the cluster, a restore of the backup
// reads it at the backup's timestamp (and, past the expiry, not at all:
// expiry is a time, not a countdown restarted by a restore).
func TestABackupTakenBeforeAnExpiryRestoresTheValue(t *testing.T) {
	ctx := context.Background()
	var physical atomic.Int64
	physical.Store(time.Now().UnixNano())
	now := func() time.Time { return time.Unix(0, physical.Load()) }
	clock := hlc.New(now, 0)
	withClock := func(o *region.Options) {
		o.Clock = clock
		o.Retention = compaction.Retention{GCTTL: time.Minute}
		o.DisableAutoCompaction = true
	}
	dir := t.TempDir()
	c := openClusterWith(t, dir, withClock, "m")
	c.Clock = clock
	regionOf := func(key string) *region.Region {
		for _, sp := range c.spans {
			if sp.Contains([]byte(key)) {
				return c.Regions[sp.Name]
			}
		}
		t.Fatalf("no region holds %q", key)
		return nil
	}
	if _, err := regionOf("e").Apply(new(region.Batch).PutExpiring([]byte("e"), []byte("expiring"), 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	c.put("p", "plain")
	base, err := Create(ctx, c.Bucket, c, "base")
	if err != nil {
		t.Fatal(err)
	}

	physical.Add(int64(time.Hour))
	r := regionOf("e")
	if err := r.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	info, err := r.Compact(ctx, true)
	if err != nil {
		t.Fatal(err)
	}
	if info.Stats.DroppedExpired != 1 {
		t.Fatalf("the cluster's compaction dropped %d expired values, want 1 (stats %+v)", info.Stats.DroppedExpired, info.Stats)
	}

	dst := openBucket(t, "file://"+dir+"/restored")
	b, err := Restore(ctx, c.Bucket, base.ID, dst)
	if err != nil {
		t.Fatal(err)
	}
	m, err := regionmap.Load(ctx, dst)
	if err != nil {
		t.Fatal(err)
	}
	restored := map[string]*region.Region{}
	for _, sp := range m.Region {
		restored[sp.Name] = openRegion(t, dst, hlc.New(now, 0), dir+"/restored-wal/"+sp.Name, sp.Name, nil)
	}
	if got := state(t, restored, m.Region, b.TS); got["e"] != "expiring" || got["p"] != "plain" {
		t.Fatalf("the restore read at the backup's timestamp %d: %v; want e and p", b.TS, got)
	}
	if got := state(t, restored, m.Region, kv.MaxTimestamp); got["e"] != "" || got["p"] != "plain" {
		t.Fatalf("the restore read now, past e's expiry: %v; want p only", got)
	}
}
