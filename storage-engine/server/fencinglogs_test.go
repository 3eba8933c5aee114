package server

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bellows-kv/bellows/internal/contract"
	"github.com/bellows-kv/bellows/storage-engine/backup"
	"github.com/bellows-kv/bellows/storage-engine/blob"
	"github.com/bellows-kv/bellows/storage-engine/liveness"
	"github.com/bellows-kv/bellows/storage-engine/regionmap"
)

// epochsKept are the map epochs in b, in order.
func epochsKept(t *testing.T, b *blob.Bucket) []uint64 {
	t.Helper()
	objs, err := b.List(context.Background(), "regionmap/")
	if err != nil {
		t.Fatal(err)
	}
	var ns []uint64
	for _, o := range objs {
		if n, err := strconv.ParseUint(strings.TrimPrefix(o.Key, "regionmap/"), 10, 64); err == nil {
			ns = append(ns, n)
		}
	}
	return ns
}

// Map epochs a point-in-time restore may need survive collection: every
// epoch from the oldest backup's on stays, however old; once that backup
// is deleted, its epochs go up to the next one's; with no backup, all but
// the newest few go.
func TestCollectionKeepsTheEpochsOfTheBackups(t *testing.T) {
	ctx := context.Background()
	b, err := blob.Open(ctx, "file://"+t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	initial, _ := regionmap.Initial([][]byte{[]byte("m")})
	m, err := regionmap.Bootstrap(ctx, b, initial)
	if err != nil {
		t.Fatal(err)
	}
	for m.Epoch < 60 {
		next, err := m.Split(m.Region[len(m.Region)-1].Name, []byte("z"+strings.Repeat("z", int(m.Epoch))), 1)
		if err != nil {
			t.Fatal(err)
		}
		if err := regionmap.Commit(ctx, b, m, &next); err != nil {
			t.Fatal(err)
		}
		m = next
	}
	record := func(id string, epoch uint64) {
		data, _ := json.Marshal(backup.Backup{ID: id, TS: epoch, MapEpoch: epoch})
		if err := b.WriteAll(ctx, backup.Prefix+id+"/backup.json", data, true); err != nil {
			t.Fatal(err)
		}
	}
	record("first", 25)
	record("second", 40)
	later := time.Now().Add(2 * contract.DefaultMapEpochRetention)
	collect := func(want int, from uint64) {
		t.Helper()
		if n, err := CollectMapEpochs(ctx, b, later, contract.DefaultMaxClockOffset); err != nil || n != want {
			t.Fatalf("collected %d epochs, %v; want %d", n, err, want)
		}
		if got := epochsKept(t, b); len(got) == 0 || got[0] != from || got[len(got)-1] != 60 {
			t.Fatalf("epochs kept: %v, want %d to 60", got, from)
		}
		if cur, err := regionmap.Load(ctx, b); err != nil || cur.Epoch != 60 {
			t.Fatalf("newest after collecting: %d, %v", cur.Epoch, err)
		}
	}
	collect(24, 25)
	if _, err := regionmap.LoadEpoch(ctx, b, 25); err != nil {
		t.Fatalf("the oldest backup's epoch: %v", err)
	}
	if _, err := backup.Delete(ctx, b, "first"); err != nil {
		t.Fatal(err)
	}
	collect(15, 40)
	if _, err := backup.Delete(ctx, b, "second"); err != nil {
		t.Fatal(err)
	}
	collect(60-contract.DefaultFencingLogKeep-39, 60-uint64(contract.DefaultFencingLogKeep)+1)
}

// The lease holder collects the lease's terms and every store's liveness
// records; so does the store of a one-store cluster, which takes no lease;
// any other store leaves them.
func TestTheLeaseHolderCollectsTheLeaseLogs(t *testing.T) {
	ctx := context.Background()
	b, err := blob.Open(ctx, "file://"+t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	// Store 2 was removed by a scale-down to two stores: its records are
	// collected too.
	for s := range 3 {
		var held liveness.Record
		for i := range 20 {
			if held, err = liveness.Renew(ctx, b, strconv.Itoa(s), "a", held, t0.Add(time.Duration(i)*time.Second), time.Second); err != nil {
				t.Fatal(err)
			}
		}
	}
	for i := range 20 {
		if _, ok, err := regionmap.AcquireLease(ctx, b, "x", t0.Add(time.Duration(i)*time.Second), time.Second, 0); !ok || err != nil {
			t.Fatal(ok, err)
		}
	}
	stores := 2
	bal := &Balancer{Stores: func() (int, bool) { return stores, true }}
	if _, ok := bal.collects(); ok {
		t.Fatal("a store without the lease collects")
	}
	bal.leaseHeld.Store(true)
	if n, ok := bal.collects(); !ok || n != 2 {
		t.Fatal("the lease holder does not collect")
	}
	bal.leaseHeld.Store(false)
	stores = 1
	if _, ok := bal.collects(); !ok {
		t.Fatal("the store of a one-store cluster does not collect")
	}
	n, err := CollectLeaseLogs(ctx, b, time.Now().Add(time.Minute), contract.DefaultMaxClockOffset)
	if want := 4 * (20 - contract.DefaultFencingLogKeep); err != nil || n != want {
		t.Fatalf("collected %d objects, %v; want %d", n, err, want)
	}
	for s := range 3 {
		if cur, err := liveness.Current(ctx, b, strconv.Itoa(s)); err != nil || cur.K != 20 {
			t.Fatalf("store %d's newest record after collecting: %v %v", s, cur, err)
		}
		if ok, _ := b.Exists(ctx, liveness.Object(strconv.Itoa(s), 20-uint64(contract.DefaultFencingLogKeep))); ok {
			t.Fatalf("store %d's old records stay", s)
		}
	}
	if l, err := regionmap.CurrentLease(ctx, b); err != nil || l.N != 20 {
		t.Fatalf("the lease after collecting: %+v %v", l, err)
	}
}
