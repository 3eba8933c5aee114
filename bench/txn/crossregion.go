package txn

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"

	"github.com/bellows-kv/bellows/bench/report"
	"github.com/bellows-kv/bellows/client"
)

// The crossregion section: what a commit across regions costs against a
// commit in one region, end to end, through the Go client against the two
// store processes of the bank section (storePair: real gRPC, forwarding,
// each store's WAL synced as shipped). CrossWorkers goroutines commit
// transactions of two blind writes of 100 B: "local" puts both keys in one
// region (one WAL record, at the region's owner); "cross" puts them in two
// regions owned by different stores (a two-phase commit: a lock record in
// each region, then the primary's commit record, the secondary's after the
// answer). Keys are uniform over 2^32 per region (no contention). Runs
// alternate, local first, CrossRuns of each, Phase long.
//
// Goal, stated before the run: cross-region commits at least
// CrossRegionGoal of the region-local commits' rate (three durable records
// and two more round trips against one record).
const CrossRegionGoal = 0.33

// CrossRegion compares commits across regions with commits in one region.
type CrossRegion struct {
	LocalTxnPerS float64   `json:"local_txn_per_s"`
	CrossTxnPerS float64   `json:"cross_txn_per_s"`
	Ratio        float64   `json:"ratio"`
	RatioMin     float64   `json:"ratio_min"`
	RatioMax     float64   `json:"ratio_max"`
	LocalRuns    []float64 `json:"local_runs"`
	CrossRuns    []float64 `json:"cross_runs"`
	Workers      int       `json:"workers"`
	PhaseS       float64   `json:"phase_s"`
}

// crossRegionRuns runs the section in dir.
func crossRegionRuns(ctx context.Context, cfg Config, dir string, progress func(string)) (CrossRegion, error) {
	res := CrossRegion{Workers: cfg.CrossWorkers, PhaseS: cfg.Phase.Seconds()}
	s, err := startStorePair(ctx, cfg.Bellows, filepath.Join(dir, "crossregion"))
	if err != nil {
		return res, err
	}
	defer s.stop()
	c, err := s.client()
	if err != nil {
		return res, err
	}
	defer c.Close()
	var ratios []float64
	for run := range cfg.Runs {
		for _, cross := range []bool{false, true} {
			progress(fmt.Sprintf("crossregion run %d/%d, cross %v", run+1, cfg.Runs, cross))
			r, err := crossRegionRun(ctx, c, cfg, cross, uint64(2*run)+map[bool]uint64{false: 0, true: 1}[cross])
			if err != nil {
				return res, err
			}
			if cross {
				res.CrossRuns = append(res.CrossRuns, r)
				ratios = append(ratios, r/res.LocalRuns[run])
			} else {
				res.LocalRuns = append(res.LocalRuns, r)
			}
		}
	}
	res.LocalTxnPerS, res.CrossTxnPerS = report.Median(res.LocalRuns), report.Median(res.CrossRuns)
	res.Ratio = res.CrossTxnPerS / res.LocalTxnPerS
	res.RatioMin, res.RatioMax = slices.Min(ratios), slices.Max(ratios)
	return res, nil
}

// regionKey is a random key of region r (the first byte, as bankKey).
func regionKey(rng *rand.Rand, r int) []byte {
	k := []byte{byte(64*r + 1), 'x', 0, 0, 0, 0}
	binary.BigEndian.PutUint32(k[2:], rng.Uint32())
	return k
}

// otherStoresRegion is a random region of the store that does not own
// region a: regions 0 and 2 are store 0's, 1 and 3 store 1's.
func otherStoresRegion(rng *rand.Rand, a int) int {
	return (a + 1 + 2*rng.IntN(BankRegions/2)) % BankRegions
}

// crossRegionRun is one run: committed transactions per second.
func crossRegionRun(ctx context.Context, c *client.Client, cfg Config, cross bool, seed uint64) (float64, error) {
	return writeRun(ctx, c, cfg, func(ctx context.Context, c *client.Client, rng *rand.Rand) error {
		a := rng.IntN(BankRegions)
		b := a
		if cross {
			b = otherStoresRegion(rng, a)
		}
		x, err := c.Begin(ctx)
		if err == nil {
			x.Put(regionKey(rng, a), value)
			x.Put(regionKey(rng, b), value)
			_, err = x.Commit(ctx)
		}
		if errors.Is(err, client.ErrConflict) {
			return errNotCounted // two random keys of 2^32: not expected
		}
		return err
	}, seed)
}
