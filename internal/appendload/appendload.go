// Package appendload is the list-append workload internal/sercheck checks:
// transactions that read keys and append an element to one of them (write
// skew's shape), and transactions that scan a range and append to one of
// its keys (a phantom's), recorded as a history. The client-level tests
// and the process tests run it against real stores.
package appendload

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/bellows-kv/bellows/client"
	"github.com/bellows-kv/bellows/internal/sercheck"
)

// Keys are the workload's keys: pairs are read two at a time (each
// transaction picks two at random and appends to one of them); range keys
// all lie in [RangeStart, RangeEnd), which the other transactions scan.
type Keys struct {
	Pairs                [][]byte
	RangeStart, RangeEnd []byte
	Range                [][]byte
}

// Options shape a run.
type Options struct {
	Workers int
	// PerWorker bounds each worker's transactions (0: until stop).
	PerWorker int
	Seed      uint64
	// Txn are the transactions' options (client.Serializable).
	Txn []client.TxnOption
	// Commits, when set, counts the commits as they happen (a test's
	// progress).
	Commits *atomic.Int64
}

// Stats count what happened.
type Stats struct {
	Committed, Conflicts, Unknown, ReadFailures int
}

// Run runs the workload until every worker ran PerWorker transactions or
// stop is closed (or ctx ends), and returns the history: every
// transaction that reached its commit, committed, refused (not
// committed) or of unknown outcome. A read that fails ends its
// transaction unrecorded (nothing of it was written).
func Run(ctx context.Context, c *client.Client, keys Keys, o Options, stop <-chan struct{}) ([]sercheck.Txn, Stats, error) {
	var (
		mu      sync.Mutex
		history []sercheck.Txn
		stats   Stats
		elem    atomic.Int64
		wg      sync.WaitGroup
	)
	stopped := func() bool {
		select {
		case <-stop:
			return true
		case <-ctx.Done():
			return true
		default:
			return false
		}
	}
	for w := range o.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(o.Seed, uint64(w)))
			for i := 0; (o.PerWorker == 0 || i < o.PerWorker) && !stopped(); i++ {
				rec, outcome := appendTxn(ctx, c, keys, rng, int(elem.Add(1)), fmt.Sprintf("w%d-%d", w, i), o.Txn)
				mu.Lock()
				switch outcome {
				case committed:
					stats.Committed++
					if o.Commits != nil {
						o.Commits.Add(1)
					}
				case conflict:
					stats.Conflicts++
				case unknown:
					stats.Unknown++
				case readFailed:
					stats.ReadFailures++
				}
				if outcome != readFailed {
					history = append(history, rec)
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if ctx.Err() != nil {
		return history, stats, ctx.Err()
	}
	return history, stats, nil
}

// Final reads every key of the workload in one transaction: the history's
// last, committed, reading what all the others left.
func Final(ctx context.Context, c *client.Client, keys Keys) (sercheck.Txn, error) {
	final := sercheck.Txn{ID: "final", Committed: true, Reads: map[string][]int{}}
	_, err := c.RunTxn(ctx, func(ctx context.Context, t *client.Txn) error {
		for _, k := range slices.Concat(keys.Pairs, keys.Range) {
			v, found, err := t.Get(ctx, k)
			if err != nil {
				return err
			}
			final.Reads[string(k)] = Decode(v, found)
		}
		return nil
	})
	return final, err
}

type outcome int

const (
	committed outcome = iota
	conflict
	unknown
	readFailed
)

// appendTxn runs one transaction, appending element e.
func appendTxn(ctx context.Context, c *client.Client, keys Keys, rng *rand.Rand, e int, id string, opts []client.TxnOption) (sercheck.Txn, outcome) {
	rec := sercheck.Txn{ID: id, Reads: map[string][]int{}, Appends: map[string]int{}}
	txn, err := c.Begin(ctx, opts...)
	if err != nil {
		return rec, readFailed
	}
	var target []byte
	if rng.IntN(2) == 0 {
		i := rng.IntN(len(keys.Pairs))
		j := (i + 1 + rng.IntN(len(keys.Pairs)-1)) % len(keys.Pairs)
		pair := [][]byte{keys.Pairs[i], keys.Pairs[j]}
		for _, k := range pair {
			v, found, err := txn.Get(ctx, k)
			if err != nil {
				_ = txn.Rollback(ctx)
				return rec, readFailed
			}
			rec.Reads[string(k)] = Decode(v, found)
		}
		target = pair[rng.IntN(2)]
	} else {
		rows, err := txn.ScanAll(ctx, keys.RangeStart, keys.RangeEnd, client.ScanOptions{})
		if err != nil {
			_ = txn.Rollback(ctx)
			return rec, readFailed
		}
		for _, k := range keys.Range {
			rec.Reads[string(k)] = nil
		}
		for _, r := range rows {
			rec.Reads[string(r.Key)] = Decode(r.Value, true)
		}
		target = keys.Range[rng.IntN(len(keys.Range))]
	}
	txn.Put(target, Encode(append(slices.Clone(rec.Reads[string(target)]), e)))
	rec.Appends[string(target)] = e
	_, err = txn.Commit(ctx)
	switch {
	case err == nil:
		rec.Committed = true
		return rec, committed
	case errors.Is(err, client.ErrConflict) || errors.Is(err, client.ErrTxnLost):
		// Refused, nothing written: not part of the history's graph.
		return rec, conflict
	}
	rec.Unknown = true
	return rec, unknown
}

// Decode is a stored list ("1,5,9"; absent or empty: none).
func Decode(v []byte, found bool) []int {
	if !found || len(v) == 0 {
		return nil
	}
	var out []int
	for _, f := range strings.Split(string(v), ",") {
		n, _ := strconv.Atoi(f)
		out = append(out, n)
	}
	return out
}

// Encode is Decode's inverse.
func Encode(l []int) []byte {
	parts := make([]string, len(l))
	for i, n := range l {
		parts[i] = strconv.Itoa(n)
	}
	return []byte(strings.Join(parts, ","))
}
