package txn

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bellows-kv/bellows/bench/report"
	"github.com/bellows-kv/bellows/client"
)

// The writes section: what a compare-and-set costs against a plain put, and
// a batch whose keys fall in two regions against one whose keys fall in
// one, end to end, through the Go client against the two store processes of
// the crossregion section (storePair). CrossWorkers goroutines write 100 B
// values to keys uniform over 2^32 per region (no contention):
//
//   - put: Put of a random key; cas: CompareAndSet IfAbsent of a random
//     key of 64 bits (it holds: the key is new), which the region judges under the
//     key's latch with one lookup of its newest version before the commit.
//   - batch: Batch of two keys in one region (the fast path: one WAL
//     record); batch across: two keys in regions of different stores (a
//     two-phase commit the first key's owner coordinates).
//
// Runs alternate within each pair, CrossRuns of each, Phase long.
//
// Goals, stated before the run: compare-and-set at least CASGoal of the
// puts' rate (a lookup beside a commit); batches across regions at least
// CrossRegionGoal of the one-region batches' rate (as transactions across
// regions against those in one).
const CASGoal = 0.8

// WritePair is one comparison of the writes section: the base mode's and
// the compared mode's operations per second.
type WritePair struct {
	Base            string    `json:"base"`
	Compared        string    `json:"compared"`
	BaseOpsPerS     float64   `json:"base_ops_per_s"`
	ComparedOpsPerS float64   `json:"compared_ops_per_s"`
	Ratio           float64   `json:"ratio"`
	RatioMin        float64   `json:"ratio_min"`
	RatioMax        float64   `json:"ratio_max"`
	BaseRuns        []float64 `json:"base_runs"`
	ComparedRuns    []float64 `json:"compared_runs"`
	Goal            float64   `json:"goal"`
}

// Writes is the writes section of txn.json.
type Writes struct {
	Pairs   []WritePair `json:"pairs"`
	Workers int         `json:"workers"`
	PhaseS  float64     `json:"phase_s"`
}

// writeOp is one write of a mode, with keys from rng.
type writeOp func(ctx context.Context, c *client.Client, rng *rand.Rand) error

var writeModes = map[string]writeOp{
	"put": func(ctx context.Context, c *client.Client, rng *rand.Rand) error {
		_, err := c.Put(ctx, regionKey(rng, rng.IntN(BankRegions)), value)
		return err
	},
	"cas": func(ctx context.Context, c *client.Client, rng *rand.Rand) error {
		// 64 random bits: over the section's millions of writes, 32 would
		// meet an earlier key (which the condition then finds present).
		key := binary.BigEndian.AppendUint64([]byte{byte(64*rng.IntN(BankRegions) + 1), 'c'}, rng.Uint64())
		r, err := c.CompareAndSet(ctx, key, client.IfAbsent(), value)
		if err == nil && !r.Succeeded {
			err = fmt.Errorf("compare-and-set if absent of a new random key found it present: %+v", r)
		}
		return err
	},
	"batch": func(ctx context.Context, c *client.Client, rng *rand.Rand) error {
		a := rng.IntN(BankRegions)
		_, err := c.Batch(ctx, []client.Mutation{{Key: regionKey(rng, a), Value: value}, {Key: regionKey(rng, a), Value: value}})
		return err
	},
	"batch across": func(ctx context.Context, c *client.Client, rng *rand.Rand) error {
		a := rng.IntN(BankRegions)
		b := otherStoresRegion(rng, a)
		_, err := c.Batch(ctx, []client.Mutation{{Key: regionKey(rng, a), Value: value}, {Key: regionKey(rng, b), Value: value}})
		return err
	},
}

// writesRuns runs the section in dir.
func writesRuns(ctx context.Context, cfg Config, dir string, progress func(string)) (Writes, error) {
	res := Writes{Workers: cfg.CrossWorkers, PhaseS: cfg.Phase.Seconds()}
	s, err := startStorePair(ctx, cfg.Bellows, filepath.Join(dir, "writes"))
	if err != nil {
		return res, err
	}
	defer s.stop()
	c, err := s.client()
	if err != nil {
		return res, err
	}
	defer c.Close()
	for i, pair := range []WritePair{{Base: "put", Compared: "cas", Goal: CASGoal}, {Base: "batch", Compared: "batch across", Goal: CrossRegionGoal}} {
		var ratios []float64
		for run := range cfg.Runs {
			for j, mode := range []string{pair.Base, pair.Compared} {
				progress(fmt.Sprintf("writes run %d/%d, %s", run+1, cfg.Runs, mode))
				r, err := writeRun(ctx, c, cfg, writeModes[mode], uint64(100*i+2*run+j))
				if err != nil {
					return res, fmt.Errorf("%s: %w", mode, err)
				}
				if j == 0 {
					pair.BaseRuns = append(pair.BaseRuns, r)
				} else {
					pair.ComparedRuns = append(pair.ComparedRuns, r)
					ratios = append(ratios, r/pair.BaseRuns[run])
				}
			}
		}
		pair.BaseOpsPerS, pair.ComparedOpsPerS = report.Median(pair.BaseRuns), report.Median(pair.ComparedRuns)
		pair.Ratio = pair.ComparedOpsPerS / pair.BaseOpsPerS
		pair.RatioMin, pair.RatioMax = slices.Min(ratios), slices.Max(ratios)
		res.Pairs = append(res.Pairs, pair)
	}
	return res, nil
}

// errNotCounted: an operation that neither counts nor ends the run.
var errNotCounted = errors.New("not counted")

// writeRun is one run of op by CrossWorkers goroutines for Phase:
// operations per second. The first error other than errNotCounted ends
// its goroutine and is returned.
func writeRun(ctx context.Context, c *client.Client, cfg Config, op writeOp, seed uint64) (float64, error) {
	var done atomic.Int64
	var firstErr error
	var once sync.Once
	deadline := time.Now().Add(cfg.Phase)
	var wg sync.WaitGroup
	for w := range cfg.CrossWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, uint64(w)))
			for time.Now().Before(deadline) {
				err := op(ctx, c, rng)
				if errors.Is(err, errNotCounted) {
					continue
				}
				if err != nil {
					once.Do(func() { firstErr = err })
					return
				}
				done.Add(1)
			}
		}()
	}
	wg.Wait()
	return float64(done.Load()) / cfg.Phase.Seconds(), firstErr
}
