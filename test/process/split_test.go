package process

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/bellows-kv/bellows/client"
)

// A store started with one region splits it as a client loads data, and
// keeps every acknowledged write through SIGKILLs in the middle of the load
// (of which some land mid-split: a split takes a flush and three bucket
// writes, and the store splits whenever a region passes 1 MiB). The client
// retries what a split or a restart refuses (UNAVAILABLE), so writers see
// no error; afterwards every acknowledged write reads back, and the
// regions the client learns tile the key space.
func TestRegionsSplitAsDataGrowsThroughCrashes(t *testing.T) {
	dir := t.TempDir()
	bucket, wal, addr := "file://"+dir+"/bucket", dir+"/wal", freeAddr(t)
	args := append(storeArgs(t, bucket, wal, "Disabled", ""), "--split-bytes=1MiB", "--listen="+addr, "--create-bucket")
	s := start(t, "store", args...)
	c := newClient(t, s)

	w := startUserWriters(c, 2)
	regions := func() int {
		if err := c.Refresh(context.Background()); err != nil {
			return 0
		}
		return len(c.Regions())
	}
	for crash, want := range []int{2, 4, 6} {
		waitFor(t, fmt.Sprintf("%d regions before crash %d", want, crash+1), func() bool { return regions() >= want })
		s.kill()
		s = start(t, "store", args...)
	}
	waitFor(t, "8 regions after the last restart", func() bool { return regions() >= 8 })
	w.halt(t)
	w.checkAcked(t, context.Background(), c)
	rs := c.Regions()
	for i, r := range rs {
		if i == 0 && len(r.Start) != 0 || i > 0 && string(rs[i-1].End) != string(r.Start) || i == len(rs)-1 && len(r.End) != 0 {
			t.Fatalf("regions do not tile the key space at %d: %+v", i, rs)
		}
	}
	t.Logf("%d acknowledged writes in %d regions through 3 SIGKILLs", len(w.acked), len(rs))
}

// userWriters are n clients writing 2 KB values under keys spread over the
// range the way user ids do, each stopping at its first failure (a split,
// a move or a restart must only cost the client retries).
type userWriters struct {
	mu    sync.Mutex
	acked map[string]string
	errs  []error
	stop  chan struct{}
	wg    sync.WaitGroup
}

func startUserWriters(c *client.Client, n int) *userWriters {
	w := &userWriters{acked: map[string]string{}, stop: make(chan struct{})}
	for id := range n {
		w.wg.Add(1)
		go func() {
			defer w.wg.Done()
			for i := 0; ; i++ {
				select {
				case <-w.stop:
					return
				default:
				}
				k := fmt.Sprintf("user%07d", (i*7919+id*104729)%10_000_000)
				v := fmt.Sprintf("%d-%d-%02000d", id, i, i)
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				_, err := c.Put(ctx, []byte(k), []byte(v))
				cancel()
				w.mu.Lock()
				if err != nil {
					w.errs = append(w.errs, fmt.Errorf("put %s: %w", k, err))
				} else {
					w.acked[k] = v
				}
				w.mu.Unlock()
				if err != nil {
					return
				}
			}
		}()
	}
	return w
}

// failed reports whether a write failed.
func (w *userWriters) failed() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.errs) > 0
}

// checkAcked fails t unless every acknowledged write reads back through c.
func (w *userWriters) checkAcked(t *testing.T, ctx context.Context, c *client.Client) {
	t.Helper()
	for k, v := range w.acked {
		got, found, err := c.Get(ctx, []byte(k))
		if err != nil || !found || string(got) != v {
			t.Fatalf("acknowledged %s reads %q, %v, %v (of %d acknowledged writes)", k, trim(got), found, err, len(w.acked))
		}
	}
	t.Logf("%d acknowledged plain writes read back", len(w.acked))
}

// halt stops the writers and fails t if any write failed.
func (w *userWriters) halt(t *testing.T) {
	t.Helper()
	close(w.stop)
	w.wg.Wait()
	if len(w.errs) > 0 {
		t.Fatalf("%d writes failed (a split, a move or a restart must only cost retries): %v", len(w.errs), w.errs[:min(3, len(w.errs))])
	}
}
