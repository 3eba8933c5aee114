// Package txn measures what snapshot-isolation transactions cost
// (bellows-bench txn): single-region transactions of 4 writes against plain
// batches of the same 4 writes, and aborts and commit rate as contention
// grows. It drives an in-process region (storage-engine/region) so that
// the numbers are the commit path's own: latches, validation against the
// newest versions, the WAL and the memstore, not gRPC.
//
// Regime: the WAL is asynchronous, so no fsync hides the transactions'
// extra work (validation reads every written key's newest version); keys
// are 16 bytes over 1M (low contention: two transactions rarely share a
// key), values 100 bytes; 200K keys are loaded and flushed first, so
// validation looks into a file as well as the memstore.
package txn

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bellows-kv/bellows/bench/report"
	"github.com/bellows-kv/bellows/storage-engine/blob"
	"github.com/bellows-kv/bellows/storage-engine/blockcache"
	"github.com/bellows-kv/bellows/storage-engine/region"
	"github.com/bellows-kv/bellows/storage-engine/wal"
)

// Config shapes a run.
type Config struct {
	Keys, Preload, Workers, Runs int
	Phase                        time.Duration
	HotKeys                      []int
	ContentionWorkers            int
	// Sections are the parts to run (Sections).
	Sections []string
	// CrossWorkers are the client goroutines of the crossregion and
	// writes sections.
	CrossWorkers int
	// BankCrashes is how many store crashes the bank section has, one
	// after every BankTransfersPerCrash committed transfers.
	BankCrashes, BankTransfersPerCrash int
	// Bellows is the bellows binary the bank section starts its stores from.
	Bellows string
	// RecoveryUptimes are how long each writer runs before its crash, in
	// both modes; RecoveryRate is its write rate in bytes/s.
	RecoveryUptimes []time.Duration
	RecoveryRate    int
	// Self is this benchmark's executable, which the recovery section
	// starts as its writer process (RecoveryWriterCommand).
	Self string
}

// Sections are the benchmark's parts, in the order they run.
var Sections = []string{"throughput", "contention", "crossregion", "writes", "serializable", "bank", "recovery"}

// Default is the full run: about 8 minutes on two idle cores.
func Default() Config {
	return Config{Keys: 1_000_000, Preload: 200_000, Workers: 4, Runs: 5, Phase: 3 * time.Second,
		HotKeys: []int{10_000, 100, 10}, ContentionWorkers: 8, Sections: Sections,
		BankCrashes: 10, BankTransfersPerCrash: 500, CrossWorkers: 16,
		RecoveryUptimes: []time.Duration{5 * time.Second, 15 * time.Second, 30 * time.Second, 60 * time.Second},
		RecoveryRate:    16 << 20}
}

// Throughput compares transactions with batches of the same writes.
type Throughput struct {
	TxnOpsPerS   float64   `json:"txn_ops_per_s"`
	BatchOpsPerS float64   `json:"batch_ops_per_s"`
	Ratio        float64   `json:"ratio"`
	RatioMin     float64   `json:"ratio_min"`
	RatioMax     float64   `json:"ratio_max"`
	TxnRuns      []float64 `json:"txn_runs"`
	BatchRuns    []float64 `json:"batch_runs"`
}

// Contention is read-modify-write transactions of 2 keys from a hot set.
type Contention struct {
	HotKeys     int     `json:"hot_keys"`
	AbortRate   float64 `json:"abort_rate"`
	CommitsPerS float64 `json:"commits_per_s"`
}

// Report is txn.json.
type Report struct {
	Command string `json:"command"`
	report.Provenance
	Regime              string        `json:"regime"`
	Throughput          Throughput    `json:"throughput"`
	Contention          []Contention  `json:"contention"`
	CrossRegion         *CrossRegion  `json:"crossregion,omitempty"`
	Writes              *Writes       `json:"writes,omitempty"`
	Serializable        *Serializable `json:"serializable,omitempty"`
	Bank                *BankResult   `json:"bank,omitempty"`
	RecoveryRegime      string        `json:"recovery_regime,omitempty"`
	MemstoreBudgetBytes int64         `json:"memstore_budget_bytes,omitempty"`
	Recovery            []Recovery    `json:"recovery,omitempty"`
}

// Recovery is one recovery measurement: a writer killed after UptimeS
// left WALBytes on disk; opening the store replayed ReplayedBytes of them
// (those not yet flushed) in a median RecoveryS over RecoveryOpens opens.
type Recovery struct {
	UptimeS       float64 `json:"uptime_s"`
	WALBytes      int64   `json:"wal_bytes"`
	ReplayedBytes int64   `json:"replayed_bytes"`
	RecoveryS     float64 `json:"recovery_s"`
	RecoveryMinS  float64 `json:"recovery_min_s"`
	RecoveryMaxS  float64 `json:"recovery_max_s"`
	Bounded       bool    `json:"bounded"`
}

func key(i int) []byte {
	k := make([]byte, 16)
	copy(k, "txnbench")
	binary.BigEndian.PutUint64(k[8:], uint64(i))
	return k
}

var value = make([]byte, 100)

func open(ctx context.Context, dir string) (*region.Region, error) {
	b, err := blob.Open(ctx, "file://"+filepath.Join(dir, "bucket"))
	if err != nil {
		return nil, err
	}
	return region.Open(ctx, region.Options{Name: "txn", Bucket: b, WALDir: filepath.Join(dir, "wal"),
		WALMode: wal.ModeAsync, BlockCache: blockcache.New(64 << 20)})
}

// Run runs the benchmark in work (a scratch directory).
func Run(ctx context.Context, cfg Config, work string, progress func(string)) (Report, error) {
	rep := Report{Regime: fmt.Sprintf("in-process region, async WAL, %d workers, 16 B keys uniform over %d (%d preloaded and flushed), 100 B values, %d interleaved runs of %s per mode",
		cfg.Workers, cfg.Keys, cfg.Preload, cfg.Runs, cfg.Phase)}
	for _, sec := range cfg.Sections {
		if !slices.Contains(Sections, sec) {
			return rep, fmt.Errorf("section %q: want some of %v", sec, Sections)
		}
	}
	if slices.Contains(cfg.Sections, "throughput") {
		if err := throughput(ctx, cfg, work, progress, &rep.Throughput); err != nil {
			return rep, err
		}
	}
	if slices.Contains(cfg.Sections, "contention") {
		for _, hot := range cfg.HotKeys {
			progress(fmt.Sprintf("contention over %d hot keys", hot))
			c, err := contentionRun(ctx, cfg, filepath.Join(work, fmt.Sprintf("hot-%d", hot)), hot)
			if err != nil {
				return rep, err
			}
			rep.Contention = append(rep.Contention, c)
		}
	}
	if slices.Contains(cfg.Sections, "crossregion") {
		x, err := crossRegionRuns(ctx, cfg, work, progress)
		if err != nil {
			return rep, err
		}
		rep.CrossRegion = &x
	}
	if slices.Contains(cfg.Sections, "writes") {
		w, err := writesRuns(ctx, cfg, work, progress)
		if err != nil {
			return rep, err
		}
		rep.Writes = &w
	}
	if slices.Contains(cfg.Sections, "serializable") {
		sr, err := serializableRuns(ctx, cfg, work, progress)
		if err != nil {
			return rep, err
		}
		rep.Serializable = &sr
	}
	if slices.Contains(cfg.Sections, "bank") {
		progress("bank")
		b, err := bankRun(ctx, cfg.Bellows, filepath.Join(work, "bank"), cfg.BankCrashes, cfg.BankTransfersPerCrash, progress)
		if err != nil {
			return rep, err
		}
		rep.Bank = &b
	}
	if slices.Contains(cfg.Sections, "recovery") {
		rep.RecoveryRegime = fmt.Sprintf("a store of %d regions with %d MiB Eager memstores keeping 1 version (budget %d MiB), async WAL; a writer process overwrites %d hot keys per region (1 KB values) at %d MiB/s after writing one cold key per region, and is SIGKILLed after the uptime; the store is then opened %d times from its WAL (median, min–max). Unbounded: memstore.maxWALBytes, memstore.maxStoreWALBytes and memstore.maxWALAge out of reach; bounded: their defaults (2 × memstore.bytes, the budget, 1 h)",
			RecoveryRegions, RecoveryMemstoreBytes>>20, RecoveryRegions*RecoveryMemstoreBytes>>20, RecoveryHotKeys, cfg.RecoveryRate>>20, RecoveryOpens)
		rep.MemstoreBudgetBytes = RecoveryRegions * RecoveryMemstoreBytes
		for _, unbounded := range []bool{true, false} {
			for _, up := range cfg.RecoveryUptimes {
				progress(fmt.Sprintf("recovery after %s, bounded %v", up, !unbounded))
				r, err := recoveryRun(ctx, cfg.Self, filepath.Join(work, fmt.Sprintf("recovery-%v-%s", unbounded, up)), unbounded, up, cfg.RecoveryRate)
				if err != nil {
					return rep, err
				}
				rep.Recovery = append(rep.Recovery, r)
			}
		}
	}
	return rep, nil
}

// throughput runs the interleaved transaction and batch runs.
func throughput(ctx context.Context, cfg Config, work string, progress func(string), t *Throughput) error {
	for run := range cfg.Runs {
		for _, mode := range []string{"batch", "txn"} {
			progress(fmt.Sprintf("run %d/%d: %s", run+1, cfg.Runs, mode))
			ops, err := throughputRun(ctx, cfg, filepath.Join(work, fmt.Sprintf("%s-%d", mode, run)), mode == "txn")
			if err != nil {
				return err
			}
			if mode == "txn" {
				t.TxnRuns = append(t.TxnRuns, ops)
			} else {
				t.BatchRuns = append(t.BatchRuns, ops)
			}
		}
	}
	t.TxnOpsPerS, t.BatchOpsPerS = report.Median(t.TxnRuns), report.Median(t.BatchRuns)
	t.Ratio = t.TxnOpsPerS / t.BatchOpsPerS
	ratios := make([]float64, len(t.TxnRuns))
	for i := range ratios {
		ratios[i] = t.TxnRuns[i] / t.BatchRuns[i]
	}
	t.RatioMin, t.RatioMax = slices.Min(ratios), slices.Max(ratios)
	return nil
}

// throughputRun: Workers goroutines commit 4 random writes each, as a
// transaction (snapshot, then CommitTxn) or as a batch, for Phase;
// operations (transactions or batches) per second.
func throughputRun(ctx context.Context, cfg Config, dir string, asTxn bool) (float64, error) {
	defer os.RemoveAll(dir)
	r, err := open(ctx, dir)
	if err != nil {
		return 0, err
	}
	defer r.Close()
	for i := 0; i < cfg.Preload; i += 1000 {
		b := new(region.Batch)
		for j := i; j < i+1000; j++ {
			b.Put(key(j*(cfg.Keys/cfg.Preload)), value)
		}
		if _, err := r.Apply(b); err != nil {
			return 0, err
		}
	}
	if err := r.Flush(ctx); err != nil {
		return 0, err
	}
	var ops atomic.Int64
	var firstErr error
	var once sync.Once
	deadline := time.Now().Add(cfg.Phase)
	var wg sync.WaitGroup
	for w := range cfg.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			for time.Now().Before(deadline) {
				b := new(region.Batch)
				for range 4 {
					b.Put(key(rng.IntN(cfg.Keys)), value)
				}
				var err error
				if asTxn {
					var s *region.Snapshot
					if s, err = r.Snapshot(); err == nil {
						_, err = r.CommitTxn(ctx, s.TS(), b)
						s.Close()
					}
					if errors.Is(err, region.ErrConflict) {
						continue // rare at this contention; not counted
					}
				} else {
					_, err = r.Apply(b)
				}
				if err != nil {
					once.Do(func() { firstErr = err })
					return
				}
				ops.Add(1)
			}
		}()
	}
	wg.Wait()
	return float64(ops.Load()) / cfg.Phase.Seconds(), firstErr
}

// contentionRun: ContentionWorkers goroutines each increment 2 keys of a
// hot set in one transaction (read both at the snapshot, write both),
// retrying aborts, for Phase.
func contentionRun(ctx context.Context, cfg Config, dir string, hot int) (Contention, error) {
	defer os.RemoveAll(dir)
	r, err := open(ctx, dir)
	if err != nil {
		return Contention{}, err
	}
	defer r.Close()
	var commits, aborts atomic.Int64
	var firstErr error
	var once sync.Once
	deadline := time.Now().Add(cfg.Phase)
	var wg sync.WaitGroup
	for w := range cfg.ContentionWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 11))
			for time.Now().Before(deadline) {
				a := rng.IntN(hot)
				b := (a + 1 + rng.IntN(hot-1)) % hot
				s, err := r.Snapshot()
				if err != nil {
					once.Do(func() { firstErr = err })
					return
				}
				batch := new(region.Batch)
				for _, k := range []int{a, b} {
					v, _, err := s.Get(key(k))
					if err != nil {
						once.Do(func() { firstErr = err })
						s.Close()
						return
					}
					n := uint64(0)
					if len(v) == 8 {
						n = binary.BigEndian.Uint64(v)
					}
					batch.Put(key(k), binary.BigEndian.AppendUint64(nil, n+1))
				}
				_, err = r.CommitTxn(ctx, s.TS(), batch)
				s.Close()
				switch {
				case errors.Is(err, region.ErrConflict):
					aborts.Add(1)
				case err != nil:
					once.Do(func() { firstErr = err })
					return
				default:
					commits.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if firstErr != nil {
		return Contention{}, firstErr
	}
	// No lost update: the counters add up to two increments per commit.
	var sum uint64
	for k := range hot {
		v, _, err := r.Get(key(k), ^uint64(0))
		if err != nil {
			return Contention{}, err
		}
		if len(v) == 8 {
			sum += binary.BigEndian.Uint64(v)
		}
	}
	if sum != 2*uint64(commits.Load()) {
		return Contention{}, fmt.Errorf("%d hot keys: the counters sum to %d after %d committed increments of 2 keys: a lost update", hot, sum, commits.Load())
	}
	c, a := float64(commits.Load()), float64(aborts.Load())
	return Contention{HotKeys: hot, AbortRate: a / max(c+a, 1), CommitsPerS: c / cfg.Phase.Seconds()}, nil
}
