package server

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	kvpb "github.com/bellows-kv/bellows/proto/bellows/kv/v1"
	"github.com/bellows-kv/bellows/storage-engine/blob"
	"github.com/bellows-kv/bellows/storage-engine/region"
)

// twoStores opens two stores over one file:// bucket with two regions
// (region-000 [,0x80), region-001 [0x80,)): the first assigned firstSpans,
// the second secondSpans, each polling for releases every 10ms.
func twoStores(t *testing.T, first, second func([]Span) []Span) (spans []Span, a, b *Store) {
	t.Helper()
	dir := t.TempDir()
	bk, err := blob.Open(context.Background(), "file://"+filepath.Join(dir, "bucket"))
	if err != nil {
		t.Fatal(err)
	}
	spans, err = SplitEvenly(2)
	if err != nil {
		t.Fatal(err)
	}
	open := func(wal string, sp []Span) *Store {
		s, err := OpenStore(context.Background(), sp, StoreOptions{
			WALRoot:             filepath.Join(dir, wal),
			Region:              region.Options{Bucket: bk, DisableAutoCompaction: true},
			ReleasePollInterval: 10 * time.Millisecond,
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s
	}
	return spans, open("wal-a", first(spans)), open("wal-b", second(spans))
}

func isOpen(s *Store, name string) bool {
	a := s.ByName(name)
	if a == nil {
		return false
	}
	e, _ := a.Engine()
	return e != nil
}

// A running store is re-assigned so that region-001 moves to another
// running store while writers run: the moved region's writes go to
// whichever store accepts them (the old owner answers UNAVAILABLE from the
// release on, the new one until it claimed it); every acknowledged write is
// readable at the new owner; the writes to the region that stays never
// fail.
func TestReassignMovesARegionBetweenRunningStores(t *testing.T) {
	spans, a, b := twoStores(t, func(s []Span) []Span { return s }, func([]Span) []Span { return nil })
	kvA, kvB := NewKV(a, nil, nil), NewKV(b, nil, nil)
	ctx := context.Background()

	stop := make(chan struct{})
	var wg sync.WaitGroup
	var (
		mu       sync.Mutex
		acked    []string
		unavail  atomic.Int64
		stayFail atomic.Value
	)
	wg.Add(2)
	go func() { // the moving region
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			k := fmt.Sprintf("\x90-%06d", i)
			for _, s := range []*KV{kvA, kvB} {
				_, err := s.Put(ctx, &kvpb.PutRequest{Key: []byte(k), Value: []byte("v" + k)})
				if err == nil {
					mu.Lock()
					acked = append(acked, k)
					mu.Unlock()
					break
				}
				switch status.Code(err) {
				case codes.Unavailable:
					unavail.Add(1)
				case codes.OutOfRange:
				default:
					stayFail.Store(fmt.Errorf("moving region: %s: %v", k, err))
				}
			}
		}
	}()
	var stayed atomic.Int64
	go func() { // the region that stays
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			k := fmt.Sprintf("\x10-%06d", i)
			if _, err := kvA.Put(ctx, &kvpb.PutRequest{Key: []byte(k), Value: []byte("v")}); err != nil {
				stayFail.Store(fmt.Errorf("unaffected region: %s: %v", k, err))
				return
			}
			stayed.Add(1)
		}
	}()
	ackedCount := func() int { mu.Lock(); defer mu.Unlock(); return len(acked) }
	waitUntil(t, "writes to both regions before the move", func() bool { return ackedCount() >= 20 && stayed.Load() >= 20 })
	if added, _, err := b.Reassign(ctx, spans[1:]); err != nil || len(added) != 1 {
		t.Fatalf("b.Reassign = %v, %v", added, err)
	}
	before := stayed.Load()
	_, released, err := a.Reassign(ctx, spans[:1])
	if err != nil || len(released) != 1 || released[0] != "region-001" {
		t.Fatalf("a.Reassign released %v, %v", released, err)
	}
	// A released region answers UNAVAILABLE at its old owner.
	if _, err := kvA.Get(ctx, &kvpb.GetRequest{Key: []byte("\x90")}); status.Code(err) != codes.Unavailable {
		t.Fatalf("get at the old owner after the release: %v, want UNAVAILABLE", err)
	}
	waitUntil(t, "the new owner to claim region-001", func() bool { return isOpen(b, "region-001") })
	movedBefore := ackedCount()
	waitUntil(t, "writes to the moved region at its new owner", func() bool { return ackedCount() >= movedBefore+20 })
	close(stop)
	wg.Wait()
	if err, _ := stayFail.Load().(error); err != nil {
		t.Fatal(err)
	}
	if stayed.Load() == before {
		t.Fatal("no write to the unaffected region during the move")
	}
	if len(a.Assignments()) != 1 || len(b.Assignments()) != 1 {
		t.Fatalf("assignments: a %d, b %d", len(a.Assignments()), len(b.Assignments()))
	}
	for _, k := range acked {
		res, err := kvB.Get(ctx, &kvpb.GetRequest{Key: []byte(k)})
		if err != nil || !res.Found || string(res.Value) != "v"+k {
			t.Fatalf("acknowledged %q at the new owner: %v, %v", k, res, err)
		}
	}
	t.Logf("%d acknowledged writes to the moved region, %d UNAVAILABLE answers, %d writes to the other region", len(acked), unavail.Load(), stayed.Load())

	// And back: the old owner claims it again from the same WAL root.
	if _, _, err := a.Reassign(ctx, spans); err != nil {
		t.Fatal(err)
	}
	if _, _, err := b.Reassign(ctx, nil); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the old owner to claim region-001 back", func() bool { return isOpen(a, "region-001") })
	res, err := kvA.Get(ctx, &kvpb.GetRequest{Key: []byte(acked[len(acked)-1])})
	if err != nil || !res.Found {
		t.Fatalf("last acknowledged write after moving back: %v, %v", res, err)
	}
}

// On a scale-up (1 → 2 replicas) the old owner keeps serving the region
// that ordinal 1 now owns until ordinal 1 is ready, and releases it within
// a few intervals once it is; ordinal 1 then claims it.
func TestAssignerHoldsARegionUntilItsNewOwnerIsReady(t *testing.T) {
	spans, a, b := twoStores(t, func(s []Span) []Span { return s }, func([]Span) []Span { return nil })
	var replicas atomic.Int64
	replicas.Store(1)
	var ready1 atomic.Bool
	var asked atomic.Int64 // readiness questions about ordinal 1: the assigner's rounds while it holds
	n := func() (int, bool) { return int(replicas.Load()), true }
	ready := func(ord int) bool {
		if ord == 1 {
			asked.Add(1)
		}
		return ord == 0 || ready1.Load()
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	for ord, s := range []*Store{a, b} {
		as := &Assigner{Store: s, Spans: spans, Ordinal: ord, Replicas: n, Ready: ready, Interval: 5 * time.Millisecond}
		wg.Add(1)
		go func() { defer wg.Done(); as.Run(ctx) }()
	}
	defer wg.Wait()
	defer cancel()

	replicas.Store(2)
	waitUntil(t, "ordinal 1 to be assigned region-001", func() bool { return b.ByName("region-001") != nil })
	// Hold for many of the assigner's rounds, each of which asks whether
	// ordinal 1 is ready and must keep the region.
	from := asked.Load()
	waitUntil(t, "ten rounds of the assigner asking about ordinal 1", func() bool { return asked.Load() >= from+10 })
	if !isOpen(a, "region-001") || isOpen(b, "region-001") {
		t.Fatal("region-001 was released before its new owner was ready")
	}
	if _, err := NewKV(a, nil, nil).Put(ctx, &kvpb.PutRequest{Key: []byte("\x90held"), Value: []byte("v")}); err != nil {
		t.Fatalf("the held region does not serve: %v", err)
	}
	began := time.Now()
	ready1.Store(true)
	waitUntil(t, "ordinal 1 to claim region-001", func() bool { return isOpen(b, "region-001") })
	// Promptly, not after some other event: a few of the assigner's
	// rounds, with room for a loaded machine.
	if took := time.Since(began); took > 10*time.Second {
		t.Fatalf("the move took %v after the new owner was ready", took)
	}
	if isOpen(a, "region-001") || len(a.Assignments()) != 1 {
		t.Fatal("the old owner still holds region-001")
	}
	res, err := NewKV(b, nil, nil).Get(ctx, &kvpb.GetRequest{Key: []byte("\x90held")})
	if err != nil || !res.Found {
		t.Fatalf("write made while held, at the new owner: %v, %v", res, err)
	}

	// Scale down to 1: ordinal 1 (whose pod would be deleted) owns
	// nothing; ordinal 0 is ready, so it is released to it at once.
	replicas.Store(1)
	waitUntil(t, "ordinal 0 to claim region-001 back", func() bool { return isOpen(a, "region-001") })
	if len(b.Assignments()) != 0 {
		t.Fatalf("ordinal 1 still has %d regions", len(b.Assignments()))
	}
}
