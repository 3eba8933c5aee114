package client

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/bellows-kv/bellows/internal/contract"
	kvpb "github.com/bellows-kv/bellows/proto/bellows/kv/v1"
	"github.com/bellows-kv/bellows/storage-engine/server"
)

// splittingStore serves one store over a region map of two regions split
// at "m", which it can split and merge while it serves.
func splittingStore(t *testing.T) (*Client, *server.Store) {
	t.Helper()
	ctx := context.Background()
	b := openBucket(t)
	m := mapSplitAtM(t, b)
	s := openStore(t, b, (server.Owner{Ordinal: 0, Replicas: 1}).Owned(server.SpansOf(m)), server.StoreOptions{Map: &m,
		MapPollInterval: 5 * time.Millisecond, ReleasePollInterval: 5 * time.Millisecond})
	c, err := New(ctx, []string{serveKV(t, server.NewKV(s, nil, nil))}, Options{RetryInitial: time.Millisecond, RetryMax: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c, s
}

// acked is one acknowledged change: key, commit timestamp, value or delete.
type acked struct {
	key    string
	ts     uint64
	value  string
	delete bool
}

func (a acked) String() string {
	if a.delete {
		return fmt.Sprintf("%s@%d deleted", a.key, a.ts)
	}
	return fmt.Sprintf("%s@%d=%s", a.key, a.ts, a.value)
}

// watchUntil collects w's updates until its mark reaches ts, checking
// that each update's events are above the previous mark, at or below its
// own, in commit order.
func watchUntil(t *testing.T, w *Watcher, from, ts uint64) ([]acked, uint64) {
	t.Helper()
	var got []acked
	mark := from
	for mark < ts && w.Next() {
		u := w.Update()
		last := uint64(0)
		for _, e := range u.Events {
			if e.CommitTS <= mark || e.CommitTS > u.Resolved || e.CommitTS < last {
				t.Fatalf("event %s@%d: previous mark %d, this mark %d, previous event at %d", e.Key, e.CommitTS, mark, u.Resolved, last)
			}
			last = e.CommitTS
			got = append(got, acked{key: string(e.Key), ts: e.CommitTS, value: string(e.Value), delete: e.Delete})
		}
		mark = u.Resolved
	}
	if mark < ts {
		t.Fatalf("the watch ended at mark %d, before %d: %v", mark, ts, w.Err())
	}
	return got, mark
}

// Watches over a range of two regions, while writers put, delete, batch
// across the regions and commit transactions and the regions split and
// merge under them: every acknowledged change comes once, in commit order,
// nothing at or below a mark after it; a watch closed and resumed from its
// last mark gets the rest, nothing twice.
func TestWatchesDeliverEveryChangeOnceThroughSplitsAndMerges(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, s := splittingStore(t)
	opts := WatchOptions{ProgressInterval: 10 * time.Millisecond}
	whole := c.Watch(ctx, nil, nil, opts)
	defer whole.Close()
	part := c.Watch(ctx, []byte("f"), []byte("t"), opts)

	var mu sync.Mutex
	var history []acked
	wrote := make(chan struct{}, 1)
	record := func(a ...acked) {
		mu.Lock()
		history = append(history, a...)
		mu.Unlock()
		select {
		case wrote <- struct{}{}:
		default:
		}
	}
	// writes waits until n more changes have been acknowledged.
	writes := func(n int) {
		mu.Lock()
		target := len(history) + n
		mu.Unlock()
		for {
			mu.Lock()
			done := len(history) >= target
			mu.Unlock()
			if done || t.Failed() {
				return
			}
			<-wrote
		}
	}
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for w := 0; w < 3; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 1))
			key := func() string { return fmt.Sprintf("%c%02d", 'a'+rng.IntN(26), rng.IntN(20)) }
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				k, v := key(), fmt.Sprintf("w%d-%d", w, i)
				switch rng.IntN(4) {
				case 0:
					if r, err := c.Delete(ctx, []byte(k)); err == nil {
						record(acked{key: k, ts: r.CommitTS, delete: true})
					} else {
						t.Error(err)
						return
					}
				case 1:
					k2 := key()
					if k2 == k {
						continue
					}
					if r, err := c.Batch(ctx, []Mutation{{Key: []byte(k), Value: []byte(v)}, {Key: []byte(k2), Value: []byte(v)}}); err == nil {
						record(acked{key: k, ts: r.CommitTS, value: v}, acked{key: k2, ts: r.CommitTS, value: v})
					} else {
						t.Error(err)
						return
					}
				case 2:
					k2 := key()
					if k2 == k {
						continue
					}
					// Retried until the test's deadline, not the default 16
					// attempts (about 8 s): two cross-region commits whose
					// prewrites cross wait for each other until one's locks
					// expire (10 s; docs/transactions.md), and this test is
					// about the watches, not that wait.
					r, err := c.RunTxn(ctx, func(ctx context.Context, txn *Txn) error {
						txn.Put([]byte(k), []byte(v))
						txn.Put([]byte(k2), []byte(v))
						return nil
					}, WithTxnMaxAttempts(1<<20))
					if err != nil {
						t.Error(err)
						return
					}
					record(acked{key: k, ts: r.CommitTS, value: v}, acked{key: k2, ts: r.CommitTS, value: v})
				default:
					if r, err := c.Put(ctx, []byte(k), []byte(v)); err == nil {
						record(acked{key: k, ts: r.CommitTS, value: v})
					} else {
						t.Error(err)
						return
					}
				}
			}
		}()
	}

	// The part watch: one update, closed, resumed from its mark.
	var partGot []acked
	first, mark := watchUntil(t, part, 0, 1)
	partGot = append(partGot, first...)
	part.Close()
	part = c.Watch(ctx, []byte("f"), []byte("t"), WatchOptions{AfterTS: mark, ProgressInterval: opts.ProgressInterval})
	defer part.Close()

	writes(100)
	for _, name := range []string{"region-000", "region-001"} {
		if _, err := s.SplitAt(ctx, name, []byte(map[string]string{"region-000": "g", "region-001": "r"}[name])); err != nil {
			t.Fatalf("split %s: %v", name, err)
		}
		writes(100)
	}
	// Merge the two regions that meet at m.
	var left, right string
	if err := c.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	regions := c.Regions()
	for i := 0; i+1 < len(regions); i++ {
		if string(regions[i].End) == "m" {
			left, right = regions[i].Name, regions[i+1].Name
		}
	}
	if _, err := s.Merge(ctx, left, right); err != nil {
		t.Fatalf("merge %s and %s: %v", left, right, err)
	}
	writes(100)
	close(stop)
	wg.Wait()
	if t.Failed() {
		return
	}
	var newest uint64
	for _, a := range history {
		newest = max(newest, a.ts)
	}
	got, _ := watchUntil(t, whole, 0, newest)
	rest, _ := watchUntil(t, part, mark, newest)
	partGot = append(partGot, rest...)

	want := map[string]bool{}
	wantPart := map[string]bool{}
	for _, a := range history {
		want[a.String()] = true
		if a.key >= "f" && a.key < "t" {
			wantPart[a.String()] = true
		}
	}
	check := func(name string, got []acked, want map[string]bool) {
		seen := map[string]bool{}
		for _, a := range got {
			if a.ts > newest {
				continue
			}
			if seen[a.String()] {
				t.Errorf("%s: %s delivered twice", name, a)
			}
			seen[a.String()] = true
			if !want[a.String()] {
				t.Errorf("%s: %s delivered, not acknowledged", name, a)
			}
		}
		for a := range want {
			if !seen[a] {
				t.Errorf("%s: acknowledged %s not delivered", name, a)
			}
		}
		t.Logf("%s: %d changes", name, len(seen))
	}
	check("whole", got, want)
	check("part, resumed", partGot, wantPart)
}

// An inverted range is refused.
func TestWatchRefusals(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := startOneStore(t)
	w := c.Watch(ctx, []byte("b"), []byte("a"), WatchOptions{})
	if w.Next() || w.Err() == nil {
		t.Fatalf("an inverted range: %v", w.Err())
	}
}

// A watcher that stops reading costs its store at most the watch buffer:
// the store's buffered bytes stay within contract.WatchBufferBytes while
// far more is written, and the stream, read again, ends with
// RESOURCE_EXHAUSTED; a watch resumed from its last mark gets every
// change after it.
func TestAWatcherThatStopsReadingIsCutOffAndResumes(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	spans, err := server.SplitEvenly(1)
	if err != nil {
		t.Fatal(err)
	}
	kv := server.NewKV(openStore(t, openBucket(t), spans, server.StoreOptions{}), nil, nil)
	reg := prometheus.NewRegistry()
	server.RegisterWatchMetrics(reg, kv)
	addr := serveKV(t, kv)
	c, err := New(ctx, []string{addr}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	buffered := func() float64 {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() == "bellows_watch_buffered_bytes" {
				return mf.GetMetric()[0].GetGauge().GetValue()
			}
		}
		t.Fatal("no bellows_watch_buffered_bytes")
		return 0
	}
	cc, err := c.conn(addr)
	if err != nil {
		t.Fatal(err)
	}
	sctx, stop := context.WithCancel(ctx)
	defer stop()
	stream, err := kvpb.NewKVClient(cc).Watch(sctx, &kvpb.WatchRequest{ProgressIntervalMs: 10})
	if err != nil {
		t.Fatal(err)
	}
	first, err := stream.Recv()
	if err != nil || first.ResolvedTs == 0 {
		t.Fatalf("the first answer: %v, %v; want a resolved mark", first, err)
	}
	value := bytes.Repeat([]byte("v"), 64<<10)
	const puts = 3 * contract.WatchBufferBytes / (64 << 10)
	var most float64
	commits := map[string]uint64{}
	var last uint64
	for i := 0; i < puts; i++ {
		k := fmt.Sprintf("k%04d", i)
		r, err := c.Put(ctx, []byte(k), value)
		if err != nil {
			t.Fatal(err)
		}
		commits[k], last = r.CommitTS, r.CommitTS
		most = max(most, buffered())
	}
	if most > contract.WatchBufferBytes {
		t.Fatalf("the store buffered %.0f bytes for a watcher that does not read, past its bound %d", most, contract.WatchBufferBytes)
	}
	mark := first.ResolvedTs
	for {
		resp, err := stream.Recv()
		if err != nil {
			if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "resume from resolved_ts") {
				t.Fatalf("the stream, read again, ended with %v; want RESOURCE_EXHAUSTED naming where to resume", err)
			}
			break
		}
		mark = max(mark, resp.ResolvedTs)
	}
	w := c.Watch(ctx, nil, nil, WatchOptions{AfterTS: mark, ProgressInterval: 10 * time.Millisecond})
	defer w.Close()
	seen := map[string]bool{}
	for resolved := mark; resolved < last; {
		if !w.Next() {
			t.Fatalf("the resumed watch ended at %d, before the last put at %d: %v", resolved, last, w.Err())
		}
		u := w.Update()
		for _, e := range u.Events {
			if e.CommitTS <= mark || seen[string(e.Key)] || commits[string(e.Key)] != e.CommitTS {
				t.Fatalf("resumed after %d: %s at %d", mark, e.Key, e.CommitTS)
			}
			seen[string(e.Key)] = true
		}
		resolved = u.Resolved
	}
	for k, ts := range commits {
		if ts > mark && !seen[k] {
			t.Fatalf("resumed after %d: the put of %s at %d did not come", mark, k, ts)
		}
	}
	t.Logf("most buffered %.0f bytes of %d written; resumed after %d", most, puts*len(value), mark)
}
