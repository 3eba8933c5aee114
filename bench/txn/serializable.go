package txn

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"sync/atomic"

	"github.com/bellows-kv/bellows/bench/report"
	"github.com/bellows-kv/bellows/client"
)

// The serializable section: what serializable isolation costs against
// snapshot isolation, end to end through the Go client against the two
// store processes of the crossregion section (storePair). Each
// transaction reads 4 keys, each in a random region, and writes 2 of them
// (100 B values): the 2 read and not written are what a serializable
// commit validates (ValidateReads in their regions, after the prewrite);
// the writes fall in two regions but for one transaction in BankRegions,
// so both levels mostly commit in two phases.
//
//   - Throughput: keys uniform over 2^32 per region (no contention),
//     CrossWorkers goroutines, the levels' runs alternating, CrossRuns of
//     each, Phase long.
//   - Aborts: the same transactions over a hot set of SerialHotKeys[i]
//     keys (spread over the regions): the share of commits refused (write
//     conflicts under both levels; read conflicts too when serializable).
//
// Goal, stated before the run: serializable at least SerializableGoal of
// snapshot isolation's committed transactions per second at no contention.
const SerializableGoal = 0.8

// SerialHotKeys are the abort runs' hot sets: moderate and high contention.
var SerialHotKeys = []int{1024, 32}

// SerialLevel is one isolation level's runs.
type SerialLevel struct {
	Level       string    `json:"level"`
	TxnPerS     float64   `json:"txn_per_s"`
	Runs        []float64 `json:"runs"`
	AbortShare  float64   `json:"abort_share,omitempty"`
	AbortShares []float64 `json:"abort_shares,omitempty"`
}

// SerialAborts is one contention level's abort runs.
type SerialAborts struct {
	HotKeys int           `json:"hot_keys"`
	Levels  []SerialLevel `json:"levels"`
}

// Serializable is the serializable section of txn.json.
type Serializable struct {
	Throughput []SerialLevel  `json:"throughput"`
	Ratio      float64        `json:"ratio"`
	RatioMin   float64        `json:"ratio_min"`
	RatioMax   float64        `json:"ratio_max"`
	Goal       float64        `json:"goal"`
	Aborts     []SerialAborts `json:"aborts"`
	Workers    int            `json:"workers"`
	PhaseS     float64        `json:"phase_s"`
}

var serialLevels = []struct {
	name string
	opts []client.TxnOption
}{{"snapshot isolation", nil}, {"serializable", []client.TxnOption{client.Serializable()}}}

// serializableRuns runs the section in dir.
func serializableRuns(ctx context.Context, cfg Config, dir string, progress func(string)) (Serializable, error) {
	res := Serializable{Goal: SerializableGoal, Workers: cfg.CrossWorkers, PhaseS: cfg.Phase.Seconds()}
	s, err := startStorePair(ctx, cfg.Bellows, filepath.Join(dir, "serializable"))
	if err != nil {
		return res, err
	}
	defer s.stop()
	c, err := s.client()
	if err != nil {
		return res, err
	}
	defer c.Close()
	// A discarded phase first: the stores' first transactions open files
	// and fill caches, which would count against the first level run.
	progress("serializable warmup")
	if _, _, err := serialRun(ctx, c, cfg, 0, 1, nil); err != nil {
		return res, fmt.Errorf("warmup: %w", err)
	}
	levels := func(hot int, what string) ([]SerialLevel, []float64, error) {
		out := make([]SerialLevel, len(serialLevels))
		var ratios []float64
		for run := range cfg.Runs {
			for j, l := range serialLevels {
				progress(fmt.Sprintf("serializable %s run %d/%d, %s", what, run+1, cfg.Runs, l.name))
				rate, aborted, err := serialRun(ctx, c, cfg, hot, uint64(1000*hot+10*run+j), l.opts)
				if err != nil {
					return nil, nil, fmt.Errorf("%s: %w", l.name, err)
				}
				out[j].Level = l.name
				out[j].Runs = append(out[j].Runs, rate)
				out[j].AbortShares = append(out[j].AbortShares, aborted)
				if j == 1 {
					ratios = append(ratios, rate/out[0].Runs[run])
				}
			}
		}
		for j := range out {
			out[j].TxnPerS, out[j].AbortShare = report.Median(out[j].Runs), report.Median(out[j].AbortShares)
		}
		return out, ratios, nil
	}
	tp, ratios, err := levels(0, "throughput")
	if err != nil {
		return res, err
	}
	for j := range tp {
		tp[j].AbortShare, tp[j].AbortShares = 0, nil // none expected, not reported
	}
	res.Throughput = tp
	res.Ratio = tp[1].TxnPerS / tp[0].TxnPerS
	res.RatioMin, res.RatioMax = slices.Min(ratios), slices.Max(ratios)
	for _, hot := range SerialHotKeys {
		a, _, err := levels(hot, fmt.Sprintf("aborts over %d keys", hot))
		if err != nil {
			return res, err
		}
		res.Aborts = append(res.Aborts, SerialAborts{HotKeys: hot, Levels: a})
	}
	return res, nil
}

// serialKey is a key of the section: uniform over 2^32 in a random region
// (hot 0), or one of hot keys spread over the regions.
func serialKey(rng *rand.Rand, hot int) []byte {
	if hot == 0 {
		return regionKey(rng, rng.IntN(BankRegions))
	}
	i := rng.IntN(hot)
	return binary.BigEndian.AppendUint32([]byte{byte(64*(i%BankRegions) + 1), 'h'}, uint32(i))
}

// serialRun is one run of CrossWorkers goroutines for Phase (writeRun):
// committed transactions per second and the share of commits refused.
func serialRun(ctx context.Context, c *client.Client, cfg Config, hot int, seed uint64, opts []client.TxnOption) (float64, float64, error) {
	var aborted atomic.Int64
	rate, err := writeRun(ctx, c, cfg, func(ctx context.Context, c *client.Client, rng *rand.Rand) error {
		err := serialTxn(ctx, c, rng, hot, opts)
		if errors.Is(err, client.ErrConflict) {
			aborted.Add(1)
			return errNotCounted
		}
		return err
	}, seed)
	a := float64(aborted.Load()) / cfg.Phase.Seconds()
	share := 0.0
	if rate+a > 0 {
		share = a / (rate + a)
	}
	return rate, share, err
}

// serialTxn reads 4 keys and writes the first 2 of them.
func serialTxn(ctx context.Context, c *client.Client, rng *rand.Rand, hot int, opts []client.TxnOption) error {
	t, err := c.Begin(ctx, opts...)
	if err != nil {
		return err
	}
	keys := make([][]byte, 0, 4)
	for len(keys) < 4 {
		k := serialKey(rng, hot)
		if !slices.ContainsFunc(keys, func(x []byte) bool { return string(x) == string(k) }) {
			keys = append(keys, k)
		}
	}
	for _, k := range keys {
		if _, _, err := t.Get(ctx, k); err != nil {
			_ = t.Rollback(ctx)
			if errors.Is(err, client.ErrReadUncertain) {
				return client.ErrConflict // a restart, counted as an abort
			}
			return err
		}
	}
	t.Put(keys[0], value)
	t.Put(keys[1], value)
	_, err = t.Commit(ctx)
	return err
}
