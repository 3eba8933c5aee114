package server

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	kvpb "github.com/bellows-kv/bellows/proto/bellows/kv/v1"
	"github.com/bellows-kv/bellows/storage-engine/blob"
	"github.com/bellows-kv/bellows/storage-engine/compaction"
	"github.com/bellows-kv/bellows/storage-engine/kv"
	"github.com/bellows-kv/bellows/storage-engine/region"
)

// oneRegionStore opens a one-region store on a fresh bucket and returns it
// and a function that opens another store assigned the same region (a next
// owner: another WAL root) polling for its release every poll.
func oneRegionStore(t *testing.T, exec compaction.Executor) (*Store, func(poll time.Duration) *Store) {
	t.Helper()
	dir := t.TempDir()
	b, err := blob.Open(context.Background(), "file://"+filepath.Join(dir, "bucket"))
	if err != nil {
		t.Fatal(err)
	}
	spans, err := SplitEvenly(1)
	if err != nil {
		t.Fatal(err)
	}
	open := func(wal string, poll time.Duration) *Store {
		s, err := OpenStore(context.Background(), spans, StoreOptions{
			WALRoot:             filepath.Join(dir, wal),
			Region:              region.Options{Bucket: b, DisableAutoCompaction: true, Executor: exec},
			ReleasePollInterval: poll,
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s
	}
	next := 0
	return open("wal-owner", 0), func(poll time.Duration) *Store {
		next++
		return open(fmt.Sprintf("wal-next-%d", next), poll)
	}
}

func engine(t *testing.T, s *Store) *region.Region {
	t.Helper()
	e, err := s.Assignments()[0].Engine()
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	waitUntilBefore(t, what, time.Now().Add(20*time.Second), cond)
}

// waitUntilBefore is waitUntil with its own deadline.
func waitUntilBefore(t *testing.T, what string, deadline time.Time, cond func() bool) {
	t.Helper()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond) // polling interval, not synchronisation
	}
}

// A store assigned a region another store owns watches the owner's manifest
// commits: each one it sees (flushes here) it checks, and it stays waiting,
// naming the newest manifest, until the commit that releases the region,
// which it claims with every acknowledged write. The releasing store
// answers for the region as released from the start of Release.
func TestWaitingStoreClaimsTheRegionAtTheReleaseCommit(t *testing.T) {
	ctx := context.Background()
	owner, nextOwner := oneRegionStore(t, nil)
	e := engine(t, owner)
	put := func(k string) {
		if _, err := e.Put([]byte(k), []byte("v-"+k)); err != nil {
			t.Fatal(err)
		}
	}
	put("before")
	waiting := nextOwner(5 * time.Millisecond)
	a := waiting.Assignments()[0]
	owned := func() uint64 {
		_, err := a.Engine()
		return ownedManifest(err)
	}
	first := owned()
	if first == 0 {
		t.Fatalf("next owner is not waiting for the owner: %v", func() error { _, err := a.Engine(); return err }())
	}
	for i := range 3 {
		put(fmt.Sprintf("flushed-%d", i))
		if err := e.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		want := first + uint64(i) + 1
		waitUntil(t, fmt.Sprintf("the waiting store to see manifest %d", want), func() bool { return owned() == want })
	}
	put("unflushed")
	if err := owner.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := owner.Assignments()[0].Engine(); !errors.Is(err, region.ErrReleasing) {
		t.Fatalf("released store's assignment: %v, want ErrReleasing", err)
	}
	waitUntil(t, "the waiting store to claim the released region", func() bool {
		_, err := a.Engine()
		return err == nil
	})
	claimed := engine(t, waiting)
	for _, k := range []string{"before", "flushed-0", "flushed-2", "unflushed"} {
		v, ok, err := claimed.Get([]byte(k), kv.MaxTimestamp)
		if err != nil || !ok || string(v) != "v-"+k {
			t.Fatalf("%s at the next owner: %q %v %v", k, v, ok, err)
		}
	}
}

// blockingExecutor is a compaction that runs until its context ends.
type blockingExecutor struct{ started chan struct{} }

func (e blockingExecutor) Execute(ctx context.Context, _ compaction.Job) (compaction.Result, error) {
	close(e.started)
	<-ctx.Done()
	return compaction.Result{}, ctx.Err()
}

// An Admin Compact running when the store releases the region answers at
// once, ABORTED, saying that nothing was installed.
func TestAdminCompactAnswersAbortedWhenTheRegionIsReleased(t *testing.T) {
	ctx := context.Background()
	exec := blockingExecutor{started: make(chan struct{})}
	s, _ := oneRegionStore(t, exec)
	e := engine(t, s)
	for i := range 2 {
		if _, err := e.Put([]byte(fmt.Sprint(i)), []byte("v")); err != nil {
			t.Fatal(err)
		}
		if err := e.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	name := s.Assignments()[0].Name()
	done := make(chan error, 1)
	go func() {
		_, err := NewKV(s, nil, nil).Compact(ctx, &kvpb.CompactRequest{Region: name, Major: true})
		done <- err
	}()
	<-exec.started
	if err := s.Release(ctx); err != nil {
		t.Fatal(err)
	}
	err := <-done
	says := name + " was released by this store while its compaction ran; nothing was installed"
	if status.Code(err) != codes.Aborted || RegionOf(err) != name || !strings.Contains(status.Convert(err).Message(), says) {
		t.Fatalf("Compact: %v (region %q); want ABORTED about %s saying %q", err, RegionOf(err), name, says)
	}
}
