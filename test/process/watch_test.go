package process

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bellows-kv/bellows/client"
	"github.com/bellows-kv/bellows/storage-engine/blob"
	"github.com/bellows-kv/bellows/storage-engine/changefeed"
)

// watchWrite is one write a writer attempted: its value is unique, so an
// event names the write; ts is its commit timestamp once acknowledged (0:
// its outcome is unknown, it failed).
type watchWrite struct {
	key, value string
	delete     bool
	ts         uint64
}

// watchLog is every write attempted, by value (puts) and by key (deletes).
type watchLog struct {
	mu      sync.Mutex
	puts    map[string]*watchWrite
	deletes map[string][]*watchWrite
	all     []*watchWrite
}

func (l *watchLog) add(w *watchWrite) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if w.delete {
		l.deletes[w.key] = append(l.deletes[w.key], w)
	} else {
		l.puts[w.value] = w
	}
	l.all = append(l.all, w)
}

func (l *watchLog) acked(w *watchWrite, ts uint64) {
	l.mu.Lock()
	w.ts = ts
	l.mu.Unlock()
}

// watched is what one watcher received: every event, and its marks.
type watched struct {
	name       string
	start, end string
	events     []client.WatchEvent
	resumes    int
	resolved   uint64
}

// follow runs a watch of [w.start, w.end) from 0 until ctx ends; with
// resumeEvery > 0 it closes the watch after that many updates and resumes
// it from its last mark. Each update's events must lie above the previous
// mark, at or below its own, in commit order.
func (w *watched) follow(ctx context.Context, t *testing.T, c *client.Client, resumeEvery int, mu *sync.Mutex) {
	for ctx.Err() == nil {
		wt := c.Watch(ctx, []byte(w.start), []byte(w.end), client.WatchOptions{AfterTS: w.resolved, ProgressInterval: 20 * time.Millisecond})
		for n := 0; resumeEvery == 0 || n < resumeEvery; n++ {
			if !wt.Next() {
				if err := wt.Err(); err != nil {
					t.Errorf("%s: the watch ended: %v", w.name, err)
				}
				wt.Close()
				return
			}
			u := wt.Update()
			mu.Lock()
			last := uint64(0)
			for _, e := range u.Events {
				if e.CommitTS <= w.resolved || e.CommitTS > u.Resolved || e.CommitTS < last {
					t.Errorf("%s: %s at %d in the update to %d after the mark %d (previous event at %d)", w.name, e.Key, e.CommitTS, u.Resolved, w.resolved, last)
				}
				last = e.CommitTS
			}
			w.events = append(w.events, u.Events...)
			w.resolved = u.Resolved
			mu.Unlock()
		}
		wt.Close()
		mu.Lock()
		w.resumes++
		mu.Unlock()
	}
}

// followFeed follows the bucket's change feed (package changefeed) of
// [w.start, w.end) from the archive's start until ctx ends. A feed
// delivers a change before the mark that covers it, perhaps in an earlier
// update: each change must lie above the marks before it, and each key's
// changes come in commit order.
func (w *watched) followFeed(ctx context.Context, t *testing.T, bucketURL string, mu *sync.Mutex) {
	bucket, err := blob.Open(ctx, bucketURL)
	if err != nil {
		t.Errorf("%s: %v", w.name, err)
		return
	}
	defer bucket.Close()
	var end []byte
	if w.end != "" {
		end = []byte(w.end)
	}
	// AfterTS 1: every change the archive holds (0 would start at the
	// archive's mark when the feed starts).
	f := changefeed.New(bucket, changefeed.Options{Start: []byte(w.start), End: end, AfterTS: 1, PollInterval: 50 * time.Millisecond})
	last := map[string]uint64{}
	err = f.Run(ctx, func(u changefeed.Update) error {
		mu.Lock()
		defer mu.Unlock()
		for _, c := range u.Changes {
			if c.TS <= w.resolved || c.TS <= last[string(c.Key)] {
				t.Errorf("%s: %s at %d after the mark %d (the key's previous change at %d)", w.name, c.Key, c.TS, w.resolved, last[string(c.Key)])
			}
			last[string(c.Key)] = c.TS
			w.events = append(w.events, client.WatchEvent{Key: c.Key, Value: c.Value, CommitTS: c.TS, Delete: c.Delete, Expiry: c.Expiry})
		}
		if u.Resolved > 0 {
			w.resolved = u.Resolved
		}
		return nil
	})
	if err != nil && ctx.Err() == nil {
		t.Errorf("%s: the feed ended: %v", w.name, err)
	}
}

// Watchers follow the key space while writers put and delete under load
// splits, merges of cooled regions, moves between three store processes
// and a SIGKILL of one of them; one watcher is closed and resumed from its
// mark every few updates. Each watcher's events are checked against the
// writes: every acknowledged change of its range comes once, with its
// commit timestamp; nothing comes that no writer attempted (a write whose
// call failed may have committed, and may come); no change twice.
func TestWatchesThroughSplitsMergesMovesAndAKill(t *testing.T) {
	// The archive ships often, so the bucket's change feed follows within
	// the test's waits (a region idle for 12 intervals refreshes its
	// frontier).
	stores, args, sum, bucketURL := startElasticStores(t, archiveEvery)
	c := newClient(t, stores...)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	log := &watchLog{puts: map[string]*watchWrite{}, deletes: map[string][]*watchWrite{}}
	const keys = 32
	var hot atomic.Int64
	hot.Store(keys)
	wctx, stopWriters := context.WithCancel(ctx)
	var writers sync.WaitGroup
	for wr := 0; wr < 4; wr++ {
		writers.Add(1)
		go func() {
			defer writers.Done()
			rng := rand.New(rand.NewPCG(uint64(wr), 7))
			for i := 0; wctx.Err() == nil; i++ {
				w := &watchWrite{key: fmt.Sprintf("k%02d", rng.IntN(int(hot.Load()))), value: fmt.Sprintf("w%d-%d", wr, i), delete: rng.IntN(5) == 0}
				log.add(w)
				cctx, done := context.WithTimeout(wctx, 5*time.Second)
				var r client.WriteResult
				var err error
				if w.delete {
					r, err = c.Delete(cctx, []byte(w.key))
				} else {
					r, err = c.Put(cctx, []byte(w.key), []byte(w.value))
				}
				done()
				if err == nil {
					log.acked(w, r.CommitTS)
				}
			}
		}()
	}
	var mu sync.Mutex
	watchers := []*watched{
		{name: "whole", start: "", end: ""},
		{name: "whole, resumed every 20 updates", start: "", end: ""},
		{name: "k08-k24", start: "k08", end: "k24"},
	}
	var following sync.WaitGroup
	fctx, stopWatchers := context.WithCancel(ctx)
	defer stopWatchers()
	// The bucket's change feed, from the start, beside the watchers: the
	// same checks, on what it reads from the WAL archive alone.
	feed := &watched{name: "bucket change feed", start: "", end: ""}
	following.Add(1)
	go func() {
		defer following.Done()
		feed.followFeed(fctx, t, bucketURL, &mu)
	}()
	for i, w := range watchers {
		following.Add(1)
		go func() {
			defer following.Done()
			every := 0
			if i == 1 {
				every = 20
			}
			w.follow(fctx, t, newClient(t, stores...), every, &mu)
		}()
	}

	waitFor(t, "2 splits by load and a move", func() bool {
		return sum(`bellows_region_splits_total{reason="load"}`) >= 2 && sum("bellows_region_moves_total") >= 1
	})
	stores[1].kill()
	stores[1] = start(t, "store-1", args(1)...)
	hot.Store(2) // the other keys cool: their regions come together and merge
	waitFor(t, "a merge of cooled regions", func() bool { return sum("bellows_region_merges_total") >= 1 })
	stopWriters()
	writers.Wait()

	var newest uint64
	for _, w := range log.all {
		newest = max(newest, w.ts)
	}
	waitFor(t, "every watcher's mark past the last acknowledged write", func() bool {
		mu.Lock()
		defer mu.Unlock()
		for _, w := range append(watchers, feed) {
			if w.resolved < newest {
				return false
			}
		}
		return true
	})
	stopWatchers()
	following.Wait()

	mu.Lock()
	defer mu.Unlock()
	for _, w := range append(watchers, feed) {
		in := func(k string) bool { return k >= w.start && (w.end == "" || k < w.end) }
		seen := map[string]bool{}
		for _, e := range w.events {
			id := fmt.Sprintf("%s@%d", e.Key, e.CommitTS)
			if seen[id] {
				t.Errorf("%s: %s delivered twice", w.name, id)
			}
			seen[id] = true
			if !in(string(e.Key)) {
				t.Errorf("%s: %s is outside its range", w.name, id)
			}
			if e.Delete {
				ok := false
				for _, d := range log.deletes[string(e.Key)] {
					ok = ok || d.ts == e.CommitTS || d.ts == 0
				}
				if !ok {
					t.Errorf("%s: a delete of %s at %d that no writer attempted", w.name, e.Key, e.CommitTS)
				}
				continue
			}
			p := log.puts[string(e.Value)]
			if p == nil || p.key != string(e.Key) || (p.ts != 0 && p.ts != e.CommitTS) {
				t.Errorf("%s: %s=%s, which no writer wrote at that timestamp (%+v)", w.name, id, e.Value, p)
			}
		}
		acked := 0
		var missed []string
		for _, a := range log.all {
			if a.ts == 0 || !in(a.key) {
				continue
			}
			acked++
			if id := fmt.Sprintf("%s@%d", a.key, a.ts); !seen[id] {
				t.Errorf("%s: the acknowledged %+v did not come", w.name, *a)
				missed = append(missed, id)
			}
		}
		if len(missed) > 0 && w == feed {
			whereInArchive(t, bucketURL, missed)
		}
		t.Logf("%s: %d events, %d acknowledged writes in its range, resumed %d times", w.name, len(w.events), acked, w.resumes)
	}
	t.Logf("%d writes attempted; %.0f load splits, %.0f merges, %.0f moves (counted by the stores running at the end)", len(log.all),
		sum(`bellows_region_splits_total{reason="load"}`), sum("bellows_region_merges_total"), sum("bellows_region_moves_total"))
}
