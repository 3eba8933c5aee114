package process

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bellows-kv/bellows/client"
	"github.com/bellows-kv/bellows/internal/sicheck"
)

// increments is the no-lost-update workload: clients increment counters,
// each increment a transaction run by RunTxn that reads its counter (by
// Get, or every other time by a transaction's scan) and writes count+1.
// Each value is "count:attempt", unique, so the recorded history is
// checked for snapshot isolation, also against the clients' real-time
// order (every attempt's instants on this process's monotonic clock).
type increments struct {
	c    *client.Client
	keys [][]byte

	origin  time.Time
	mu      sync.Mutex
	history []sicheck.Txn
	// committed and unknown count, per key, the increments acknowledged
	// and those whose commit's outcome was lost (a store killed under it).
	committed, unknown map[string]int
}

func newIncrements(c *client.Client, keys [][]byte) *increments {
	return &increments{c: c, keys: keys, origin: time.Now(), committed: map[string]int{}, unknown: map[string]int{}}
}

func (w *increments) now() time.Duration { return max(time.Since(w.origin), 1) }

func (w *increments) record(x sicheck.Txn) {
	w.mu.Lock()
	w.history = append(w.history, x)
	w.mu.Unlock()
}

func countOf(v []byte) (int, error) {
	n, _, _ := strings.Cut(string(v), ":")
	return strconv.Atoi(n)
}

// seed writes 0 to every counter in one transaction.
func (w *increments) seed(ctx context.Context, t *testing.T) {
	t.Helper()
	invoke := w.now()
	seed, err := w.c.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	rec := sicheck.Txn{ID: "seed", StartTS: seed.StartTS(), Writes: map[string]string{}, Invoke: invoke}
	for _, k := range w.keys {
		seed.Put(k, []byte("0:seed"))
		rec.Writes[string(k)] = "0:seed"
	}
	res, err := seed.Commit(ctx)
	if err != nil {
		t.Fatal(err)
	}
	rec.CommitTS, rec.Outcome, rec.Complete = res.CommitTS, sicheck.Committed, w.now()
	w.record(rec)
}

// run has clients each make perClient increments, client w's j-th of
// counter (w+j) mod len(keys). With crashes, an increment that failed
// before its commit was sent (nothing written) is made again, and one
// whose commit's outcome was lost counts as unknown; without, any error
// is returned.
func (w *increments) run(ctx context.Context, clients, perClient int, crashes bool) error {
	var wg sync.WaitGroup
	errs := make(chan error, clients)
	for cl := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < perClient; {
				key := w.keys[(cl+j)%len(w.keys)]
				err := w.increment(ctx, fmt.Sprintf("w%d-%d", cl, j), key, j%2 == 0)
				var lost *lostOutcome
				switch {
				case err == nil:
					j++
				case crashes && errors.As(err, &lost):
					j++
				case crashes && ctx.Err() == nil:
					// Refused before its commit: nothing was written.
					time.Sleep(10 * time.Millisecond) // pacing while a store restarts, not synchronisation
				default:
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// lostOutcome: the increment's commit was sent and its answer lost.
type lostOutcome struct{ err error }

func (e *lostOutcome) Error() string { return "commit outcome unknown: " + e.err.Error() }

// increment is one increment of key by RunTxn; every attempt is recorded.
// RunTxn runs an attempt again only after a conflict, a refused commit or
// a refused read, which wrote nothing: every attempt but the last aborted.
// An attempt's Begin was sent after the previous attempt's body returned
// (its Invoke), and its reads were done when its own body returned.
func (w *increments) increment(ctx context.Context, id string, key []byte, byGet bool) error {
	var last *sicheck.Txn
	attempt := 0
	invoke := w.now()
	committing := false
	res, err := w.c.RunTxn(ctx, func(ctx context.Context, x *client.Txn) (bodyErr error) {
		if last != nil {
			last.Outcome = sicheck.Aborted
			w.record(*last)
		}
		attempt++
		committing = false
		last = &sicheck.Txn{ID: fmt.Sprintf("%s-%d", id, attempt), StartTS: x.StartTS(),
			Reads: map[string]string{}, Writes: map[string]string{}, Invoke: invoke}
		defer func() {
			last.Complete = w.now()
			// A restart after an uncertain read keeps the first attempt's
			// uncertainty limit: it promises what committed before that
			// attempt began (docs/clock.md), so it is invoked then too.
			if !errors.Is(bodyErr, client.ErrReadUncertain) {
				invoke = last.Complete
			}
		}()
		var v []byte
		if byGet {
			got, _, err := x.Get(ctx, key)
			if err != nil {
				return err
			}
			v = got
			last.Reads[string(key)] = string(v)
		} else {
			end := append(slices.Clone(key), 0)
			rows, err := x.ScanAll(ctx, key, end, client.ScanOptions{})
			if err != nil {
				return err
			}
			scan := sicheck.Scan{Start: string(key), End: string(end), Rows: map[string]string{}}
			for _, kv := range rows {
				scan.Rows[string(kv.Key)] = string(kv.Value)
				v = kv.Value
			}
			last.Scans = append(last.Scans, scan)
		}
		n, err := countOf(v)
		if err != nil {
			return err
		}
		nv := fmt.Sprintf("%d:%s", n+1, last.ID)
		x.Put(key, []byte(nv))
		last.Writes[string(key)] = nv
		committing = true
		return nil
	})
	if last == nil {
		return err // Begin failed: no attempt ran
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case err == nil:
		last.Outcome, last.CommitTS, last.Complete = sicheck.Committed, res.CommitTS, w.now()
		w.committed[string(key)]++
	case committing && !errors.Is(err, client.ErrConflict) && !errors.Is(err, client.ErrTxnLost):
		// (Also a Begin refused after a conflict, which looks the same
		// from here: counted as unknown, which only widens the bound.)
		last.Outcome, last.Complete = sicheck.Unknown, w.now()
		w.unknown[string(key)]++
		err = &lostOutcome{err}
	default:
		last.Outcome = sicheck.Aborted
	}
	w.history = append(w.history, *last)
	return err
}

// check reads every counter and requires it to count every acknowledged
// increment and at most the unknown ones more, then checks the history.
func (w *increments) check(ctx context.Context, t *testing.T) {
	t.Helper()
	for _, k := range w.keys {
		v, _, err := w.c.Get(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		n, err := countOf(v)
		lo, hi := w.committed[string(k)], w.committed[string(k)]+w.unknown[string(k)]
		if err != nil || n < lo || n > hi {
			t.Errorf("counter %q = %q (%v); want %d acknowledged increments, and at most %d more whose outcome was lost", k, v, err, lo, hi-lo)
		}
	}
	checkHistory(t, w.history)
	if rep := sicheck.Analyze(w.history, 0); rep.RealTimeReads == 0 {
		t.Fatalf("no read was judged against the clients' real-time order: %v", rep)
	}
}
