package process

import (
	"cmp"
	"context"
	"fmt"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/metadata"

	kvpb "github.com/bellows-kv/bellows/proto/bellows/kv/v1"
	"github.com/bellows-kv/bellows/storage-engine/server"
)

var tookOverLine = regexp.MustCompile(`msg="took over the region's idempotency keys" (?:\S+ )*region=` + region0 + ` keys=1\b`)

// An idempotency key outlives a region's move: a keyed Put acknowledged by
// store A is retried at store B after A was SIGTERMed (releasing the
// region) and B claimed it, and B answers A's commit timestamp instead of
// applying it again, while a concurrent writer keeps writing the same key
// through the move: no read at any timestamp after the writer's first
// acknowledged write sees the retried value again, and the newest value is
// the writer's.
func TestKeyedPutRetriedAfterTheRegionMovedKeepsItsCommitTS(t *testing.T) {
	dir := t.TempDir()
	bucket := "file://" + filepath.Join(dir, "bucket")
	a := startNamedStore(t, "store-a", bucket, filepath.Join(dir, "wal-a"))
	key := []byte("dedupe-k")
	put := &kvpb.PutRequest{Key: key, Value: []byte("retried")}
	keyed := func() (context.Context, context.CancelFunc) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		return metadata.AppendToOutgoingContext(ctx, server.RequestIDHeader, "move-retry-1"), cancel
	}
	ctx, cancel := keyed()
	first, err := a.kv().Put(ctx, put)
	cancel()
	if err != nil {
		t.Fatal(err)
	}

	b := startNamedStore(t, "store-b", bucket, filepath.Join(dir, "wal-b"))
	if n := b.metric(t, "bellows_regions_waiting"); n != 1 {
		t.Fatalf("store-b: %v regions waiting, want 1", n)
	}
	// The concurrent writer: unkeyed puts of the same key, through the
	// move, recording what was acknowledged (and what failed: maybe
	// applied).
	type ack struct {
		ts    uint64
		value string
		atB   bool
	}
	var (
		mu     sync.Mutex
		acks   []ack
		failed = map[string]bool{}
		stop   atomic.Bool
		done   = make(chan struct{})
	)
	go func() {
		defer close(done)
		for i := 0; !stop.Load(); i++ {
			v := fmt.Sprintf("writer-%05d", i)
			// Store-a, else store-b (the one that answers).
			var (
				resp *kvpb.PutResponse
				err  error
				atB  bool
			)
			for i, s := range []*proc{a, b} {
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				resp, err = s.kv().Put(ctx, &kvpb.PutRequest{Key: key, Value: []byte(v)})
				cancel()
				if err == nil {
					atB = i == 1
					break
				}
			}
			mu.Lock()
			if err == nil {
				acks = append(acks, ack{resp.CommitTs, v, atB})
			} else {
				failed[v] = true
			}
			mu.Unlock()
			time.Sleep(2 * time.Millisecond) // pacing, not synchronisation
		}
	}()
	acked := func(atB bool) int {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for _, x := range acks {
			if !atB || x.atB {
				n++
			}
		}
		return n
	}
	waitFor(t, "the writer's puts acknowledged by store-a", func() bool { return acked(false) >= 20 })

	a.terminate()
	if !strings.Contains(a.stderr.String(), ` msg="released regions" `) {
		t.Fatalf("store-a did not release its region:\n%s", a.stderr.String())
	}
	waitFor(t, "store-b to claim the released region", func() bool {
		return b.metric(t, "bellows_regions_waiting") == 0 && b.metric(t, "bellows_regions") == 1
	})
	if !tookOverLine.MatchString(b.stderr.String()) {
		t.Fatalf("store-b did not take over store-a's idempotency key:\n%s", b.stderr.String())
	}
	waitFor(t, "the writer's puts acknowledged by store-b", func() bool { return acked(true) >= 20 })

	// The client's retry of its first put, now at the new owner.
	ctx, cancel = keyed()
	again, err := b.kv().Put(ctx, put)
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	if again.CommitTs != first.CommitTs || again.Region != first.Region {
		t.Fatalf("retry at store-b: commit_ts %d region %s; want store-a's answer, %d %s", again.CommitTs, again.Region, first.CommitTs, first.Region)
	}
	waitFor(t, "more of the writer's puts after the retry", func() bool { return acked(true) >= 40 })
	stop.Store(true)
	<-done
	atB := acked(true)

	get := func(ts uint64) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		req := &kvpb.GetRequest{Key: key}
		if ts != 0 {
			req.ReadTs = &ts
		}
		r, err := b.kv().Get(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		if !r.Found {
			return "(absent)"
		}
		return string(r.Value)
	}
	mu.Lock()
	defer mu.Unlock()
	slices.SortFunc(acks, func(x, y ack) int { return cmp.Compare(x.ts, y.ts) })
	if acks[0].ts <= first.CommitTs {
		t.Fatalf("the writer's first put (ts %d) is not after the keyed put (ts %d)", acks[0].ts, first.CommitTs)
	}
	if got := get(first.CommitTs); got != "retried" {
		t.Fatalf("at the keyed put's ts %d: %q, want retried", first.CommitTs, got)
	}
	// Between two acknowledged puts of the writer, the older one's value
	// (or a failed attempt's, which may have been applied) — never the
	// retried value.
	for i, x := range acks {
		if got := get(x.ts); got != x.value {
			t.Fatalf("at %d: %q, want the writer's %q", x.ts, got, x.value)
		}
		if i+1 < len(acks) {
			next := acks[i+1]
			if got := get(next.ts - 1); got != x.value && !failed[got] {
				t.Fatalf("just before the writer's put at %d: %q, want %q (the retry applied again?)", next.ts, got, x.value)
			}
		}
	}
	last := acks[len(acks)-1]
	if got := get(0); got != last.value && !failed[got] {
		t.Fatalf("newest value %q, want the writer's last, %q", got, last.value)
	}
	t.Logf("keyed put at %d; %d writer puts acknowledged (%d by store-b), %d failed during the move", first.CommitTs, len(acks), atB, len(failed))
}
