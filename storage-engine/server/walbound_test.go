package server

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/bellows-kv/bellows/storage-engine/blob"
	"github.com/bellows-kv/bellows/storage-engine/region"
	"github.com/bellows-kv/bellows/storage-engine/wal"
)

// fourRegionStore opens a store of four regions with 1 MiB memstores on a
// fresh bucket; reopen opens it again from the same WAL root (a restart).
func fourRegionStore(t *testing.T, o StoreOptions) (s *Store, reopen func() *Store) {
	t.Helper()
	dir := t.TempDir()
	b, err := blob.Open(context.Background(), "file://"+filepath.Join(dir, "bucket"))
	if err != nil {
		t.Fatal(err)
	}
	spans, err := SplitEvenly(4)
	if err != nil {
		t.Fatal(err)
	}
	o.WALRoot = filepath.Join(dir, "wal")
	retention := o.Region.Retention // the caller's, else every version
	o.Region = region.Options{Bucket: b, DisableAutoCompaction: true, MemstoreBytes: 1 << 20, WALMode: wal.ModeAsync, Retention: retention}
	open := func() *Store {
		s, err := OpenStore(context.Background(), spans, o)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s
	}
	return open(), open
}

// fill writes n bytes of values into the region named name.
func fill(t *testing.T, s *Store, name string, n int) {
	t.Helper()
	e, err := s.ByName(name).Engine()
	if err != nil {
		t.Fatal(err)
	}
	// Keys from the span's start (the first region's is empty, and a
	// key needs a first byte below the next region's).
	prefix := slices.Clone(s.ByName(name).Span.Start)
	if len(prefix) == 0 {
		prefix = []byte{1}
	}
	value := make([]byte, 1000)
	for i := 0; i*len(value) < n; i++ {
		key := append(slices.Clone(prefix), fmt.Sprintf("k%06d", i)...)
		if _, err := e.Put(key, value); err != nil {
			t.Fatal(err)
		}
	}
}

func walBytes(s *Store) map[string]int64 {
	out := map[string]int64{}
	s.Open(func(a *Assignment, e *region.Region) { out[a.Name()] = e.WALBytes() })
	return out
}

func TestWALFlushesTakeAgeThenOldestFirstUntilUnderTheCap(t *testing.T) {
	now := time.Unix(1000, 0)
	s, _ := fourRegionStore(t, StoreOptions{WALBoundInterval: time.Hour})
	var rs []walRegion
	for i, a := range s.Assignments() {
		e, _ := a.Engine()
		rs = append(rs, walRegion{e: e, bytes: 100, oldest: now.Add(-time.Duration(i+1) * time.Minute)})
	}
	// rs[3] is the oldest (4 min), rs[0] the newest (1 min).
	rs[1].oldest = time.Time{} // nothing unflushed: never chosen
	name := func(i int) string { return rs[i].e.Name() }
	for _, tc := range []struct {
		what           string
		maxAge         time.Duration
		limit          int64
		byAge, byCap   []string
		flushedRegions int
	}{
		{what: "under the cap, nothing old", maxAge: time.Hour, limit: 400},
		{what: "over the cap by one region: the oldest goes", maxAge: time.Hour, limit: 350, byCap: []string{name(3)}},
		{what: "over by two: the two oldest with writes", maxAge: time.Hour, limit: 250, byCap: []string{name(3), name(2)}},
		{what: "a region without writes does not count as relief", maxAge: time.Hour, limit: 0, byCap: []string{name(3), name(2), name(0)}},
		{what: "age first, and it counts against the cap", maxAge: 210 * time.Second, limit: 250, byAge: []string{name(3)}, byCap: []string{name(2)}},
	} {
		t.Run(tc.what, func(t *testing.T) {
			flush, byAge, byCap := walFlushes(rs, now, tc.maxAge, tc.limit)
			if !slices.Equal(byAge, tc.byAge) || !slices.Equal(byCap, tc.byCap) {
				t.Fatalf("by age %v, by cap %v; want %v, %v", byAge, byCap, tc.byAge, tc.byCap)
			}
			if len(flush) != len(tc.byAge)+len(tc.byCap) {
				t.Fatalf("flushes %d regions, named %d", len(flush), len(tc.byAge)+len(tc.byCap))
			}
		})
	}
}

// Under the store-wide cap, the regions written first are flushed first,
// and only as many as bring the store's WAL under the cap; a region whose
// writes are old enough is flushed however little it holds. Rounds are run
// directly (the loop's interval is an hour), so the test decides when.
func TestStoreWALBoundFlushesOldestRegionsFirstAndOldWrites(t *testing.T) {
	s, _ := fourRegionStore(t, StoreOptions{WALBoundInterval: time.Hour, MaxStoreWALBytes: 2 << 20, MaxWALAge: time.Minute})
	as := s.Assignments()
	// 600 KB each, in order: together 2.4 MB, over the 2 MiB cap, each
	// under its own 1 MiB memstore; less one region, under the cap.
	for _, a := range as {
		fill(t, s, a.Name(), 600_000)
	}
	before := walBytes(s)
	byAge, byCap := s.boundWAL(context.Background(), time.Now())
	if len(byAge) != 0 || !slices.Equal(byCap, []string{as[0].Name()}) {
		t.Fatalf("round flushed by age %v, by cap %v; want only the first written, %s, by cap", byAge, byCap, as[0].Name())
	}
	after := walBytes(s)
	if after[as[0].Name()] >= before[as[0].Name()]/2 {
		t.Fatalf("%s's WAL went from %d to %d bytes; its flush should have truncated it", as[0].Name(), before[as[0].Name()], after[as[0].Name()])
	}
	for _, a := range as[1:] {
		if after[a.Name()] != before[a.Name()] {
			t.Fatalf("%s's WAL changed (%d → %d) though the first flush brought the store under its cap", a.Name(), before[a.Name()], after[a.Name()])
		}
	}
	if got := s.WALBoundStats().CapFlushes.Load(); got != 1 {
		t.Fatalf("cap flushes = %d, want 1", got)
	}

	// A minute later every region still holding writes is due by age.
	byAge, byCap = s.boundWAL(context.Background(), time.Now().Add(time.Minute))
	want := []string{as[1].Name(), as[2].Name(), as[3].Name()}
	if !slices.Equal(byAge, want) || len(byCap) != 0 {
		t.Fatalf("a minute on: by age %v, by cap %v; want by age %v", byAge, byCap, want)
	}
	s.Open(func(a *Assignment, e *region.Region) {
		if !e.OldestUnflushed().IsZero() {
			t.Errorf("%s still has unflushed writes after its age flush", a.Name())
		}
	})
}

// The store's loop keeps its WAL under the cap while it is written, with no
// one calling it; a restart then replays at most the cap, and the metrics
// say how much each region replayed.
func TestStoreWALStaysUnderItsCapAndRestartsReplayIt(t *testing.T) {
	// Each region stays under its 1 MiB memstore, so only the store's cap
	// flushes anything.
	const limit = 3 << 19
	s, reopen := fourRegionStore(t, StoreOptions{WALBoundInterval: 5 * time.Millisecond, MaxStoreWALBytes: limit})
	as := s.Assignments()
	for round := 0; round < 6; round++ {
		for _, a := range as {
			fill(t, s, a.Name(), 100_000)
		}
	}
	total := func() int64 {
		var n int64
		for _, b := range walBytes(s) {
			n += b
		}
		return n
	}
	waitUntil(t, "the store's WAL to fall under its cap", func() bool { return total() <= limit })
	if s.WALBoundStats().CapFlushes.Load() == 0 {
		t.Fatal("under the cap with no flush forced by it: the test wrote too little")
	}
	left := total()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = reopen()
	var replayed int64
	s.Open(func(a *Assignment, e *region.Region) { replayed += e.Recovery().ReplayedBytes })
	if replayed == 0 || replayed > limit {
		t.Fatalf("the restart replayed %d bytes; want some, and at most the cap %d (the WAL held %d at close)", replayed, int64(limit), left)
	}
	if s.Recovered() <= 0 {
		t.Fatal("the store reports no recovery time")
	}
}
