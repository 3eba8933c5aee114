package backup

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/bellows-kv/bellows/bench/report"
	bk "github.com/bellows-kv/bellows/storage-engine/backup"
	"github.com/bellows-kv/bellows/storage-engine/blob"
)

// Goals are the issue's, stated before the run.
const (
	// GoalThroughput: a backup copies at least this share of what the
	// bucket's model allows the backup's parallel copies.
	GoalThroughput = 0.5
	// GoalP99: read and write p99 while a backup runs, at most this many
	// times the p99 without one.
	GoalP99 = 1.10
	// GoalRPOIntervals: the archive's lag stays within this many archive
	// intervals under steady writes.
	GoalRPOIntervals = 2.0
)

// copyStreams is how many copies a backup runs at once: one per region
// being checkpointed (backup.checkpointParallelism, at most the regions).
const copyStreams = regions

// Run is one latency run: the same workload for the same time, with a
// backup copying every file and without one.
type Run struct {
	BackupS         float64 `json:"backup_s"`
	CopiedBytes     int64   `json:"copied_bytes"`
	ThroughputBPS   float64 `json:"throughput_bps"`
	ReadP99With     float64 `json:"read_p99_with_ms"`
	ReadP99Without  float64 `json:"read_p99_without_ms"`
	WriteP99With    float64 `json:"write_p99_with_ms"`
	WriteP99Without float64 `json:"write_p99_without_ms"`
	Reads           int     `json:"reads_with"`
	Writes          int     `json:"writes_with"`
	// The latencies themselves, pooled across runs for the headline p99s.
	readsWith, readsWithout, writesWith, writesWithout []time.Duration
}

// Report is backup.json.
type Report struct {
	Command string `json:"command"`
	report.Provenance
	Regime string `json:"regime"`
	Runs   []Run  `json:"runs"`
	// ModelBPS is what the model allows the backup's copies together.
	ModelBPS float64 `json:"model_bps"`
	// Ratios: throughput over ModelBPS; p99 with a backup over without,
	// of every run's latencies pooled (PooledP99 ratios) and per run
	// (the spreads).
	ReadP99Pooled  float64 `json:"read_p99_ratio_pooled"`
	WriteP99Pooled float64 `json:"write_p99_ratio_pooled"`
	Throughput     Spread  `json:"throughput_ratio"`
	ReadP99        Spread  `json:"read_p99_ratio"`
	WriteP99       Spread  `json:"write_p99_ratio"`
	// RestoreSPerGiB: restores of the last backup into new buckets.
	RestoreSPerGiB Spread `json:"restore_s_per_gib"`
	// The archive's lag under steady writes, sampled every 100 ms.
	ArchiveIntervalS float64 `json:"archive_interval_s"`
	RPOMedianS       float64 `json:"rpo_median_s"`
	RPOP99S          float64 `json:"rpo_p99_s"`
	RPOMaxS          float64 `json:"rpo_max_s"`
	RPOWrittenBytes  int64   `json:"rpo_written_bytes"`
	RPOShippedBytes  int64   `json:"rpo_shipped_bytes"`
}

// Spread is a median and its range.
type Spread struct {
	Median float64 `json:"median"`
	Min    float64 `json:"min"`
	Max    float64 `json:"max"`
}

func spread(v []float64) Spread {
	s := Spread{Median: report.Median(v), Min: v[0], Max: v[0]}
	for _, x := range v {
		s.Min, s.Max = min(s.Min, x), max(s.Max, x)
	}
	return s
}

func ms(d time.Duration) float64 { return float64(d) / 1e6 }

// Execute runs every section in dir, logging progress.
func Execute(ctx context.Context, cfg Config, dir string, log func(string)) (Report, error) {
	rep := Report{
		Regime: fmt.Sprintf("%d in-process regions, %d MiB of 1 KiB incompressible values flushed into SSTs, block cache %d MiB, "+
			"file bucket with cost model %s (reads and copies), %d workers of random reads and writes (half each) at %d operations/s in all, "+
			"WAL async and archived every %s; each backup copies every file",
			regions, cfg.Data>>20, cfg.Data>>23, cfg.Model, cfg.Workers, cfg.Rate, cfg.ArchiveInterval),
		ModelBPS:         cfg.Model.Bandwidth * copyStreams,
		ArchiveIntervalS: cfg.ArchiveInterval.Seconds(),
	}
	b, err := open(ctx, cfg, dir)
	if err != nil {
		return rep, err
	}
	defer b.close()
	log(fmt.Sprintf("loading %d keys", b.keys))
	if err := b.load(ctx); err != nil {
		return rep, err
	}
	var last bk.Backup
	for i := range cfg.Runs {
		run, rec, err := b.latencyRun(ctx, i)
		if err != nil {
			return rep, err
		}
		last = rec
		rep.Runs = append(rep.Runs, run)
		log(fmt.Sprintf("run %d: backup %.1fs (%.0f MB/s), read p99 %.2f/%.2f ms, write p99 %.2f/%.2f ms (with/without)",
			i, run.BackupS, run.ThroughputBPS/1e6, run.ReadP99With, run.ReadP99Without, run.WriteP99With, run.WriteP99Without))
	}
	var tp, rr, wr, restore []float64
	var rw, rwo, ww, wwo []time.Duration
	for _, r := range rep.Runs {
		tp = append(tp, r.ThroughputBPS/rep.ModelBPS)
		rr = append(rr, r.ReadP99With/r.ReadP99Without)
		wr = append(wr, r.WriteP99With/r.WriteP99Without)
		rw, rwo = append(rw, r.readsWith...), append(rwo, r.readsWithout...)
		ww, wwo = append(ww, r.writesWith...), append(wwo, r.writesWithout...)
	}
	rep.ReadP99Pooled = float64(quantile(rw, 0.99)) / float64(quantile(rwo, 0.99))
	rep.WriteP99Pooled = float64(quantile(ww, 0.99)) / float64(quantile(wwo, 0.99))
	rep.Throughput, rep.ReadP99, rep.WriteP99 = spread(tp), spread(rr), spread(wr)
	for i := range cfg.Runs {
		s, err := b.restore(ctx, last, i)
		if err != nil {
			return rep, err
		}
		restore = append(restore, s)
	}
	rep.RestoreSPerGiB = spread(restore)
	log(fmt.Sprintf("restore: %.1f s/GiB", rep.RestoreSPerGiB.Median))
	if err := b.rpo(ctx, &rep); err != nil {
		return rep, err
	}
	log(fmt.Sprintf("rpo: lag median %.1fs, p99 %.1fs, max %.1fs at a %s interval", rep.RPOMedianS, rep.RPOP99S, rep.RPOMaxS, cfg.ArchiveInterval))
	return rep, nil
}

// latencyRun takes a backup copying every file under the workload, then
// runs the workload as long again without one (the order alternates).
func (b *bench) latencyRun(ctx context.Context, i int) (Run, bk.Backup, error) {
	var run Run
	id := fmt.Sprintf("run-%d", i)
	with := func() error {
		stop := make(chan struct{})
		type result struct {
			reads, writes []time.Duration
			err           error
		}
		done := make(chan result, 1)
		go func() {
			r, w, err := b.workload(stop)
			done <- result{r, w, err}
		}()
		start := time.Now()
		rec, err := bk.Create(ctx, b.bucket, b.cluster, id)
		run.BackupS = time.Since(start).Seconds()
		close(stop)
		res := <-done
		if err != nil {
			return err
		}
		if res.err != nil {
			return res.err
		}
		run.CopiedBytes = rec.CopiedBytes
		run.ThroughputBPS = float64(rec.CopiedBytes) / run.BackupS
		run.readsWith, run.writesWith = res.reads, res.writes
		run.ReadP99With, run.WriteP99With = ms(quantile(res.reads, 0.99)), ms(quantile(res.writes, 0.99))
		run.Reads, run.Writes = len(res.reads), len(res.writes)
		return nil
	}
	without := func(d time.Duration) error {
		stop := make(chan struct{})
		t := time.AfterFunc(d, func() { close(stop) })
		defer t.Stop()
		reads, writes, err := b.workload(stop)
		if err != nil {
			return err
		}
		run.readsWithout, run.writesWithout = reads, writes
		run.ReadP99Without, run.WriteP99Without = ms(quantile(reads, 0.99)), ms(quantile(writes, 0.99))
		return nil
	}
	// The previous run's backup goes first, so this one copies every file.
	if i > 0 {
		if _, err := bk.Delete(ctx, b.bucket, fmt.Sprintf("run-%d", i-1)); err != nil {
			return run, bk.Backup{}, err
		}
	}
	var err error
	if i%2 == 0 {
		if err = with(); err == nil {
			err = without(time.Duration(run.BackupS * float64(time.Second)))
		}
	} else {
		// Without first: as long as the previous run's backup took.
		if err = without(b.lastBackup); err == nil {
			err = with()
		}
	}
	b.lastBackup = time.Duration(run.BackupS * float64(time.Second))
	if err != nil {
		return run, bk.Backup{}, err
	}
	rec, err := bk.Load(ctx, b.bucket, id)
	return run, rec, err
}

// restore restores rec into a new bucket and returns seconds per GiB.
func (b *bench) restore(ctx context.Context, rec bk.Backup, i int) (float64, error) {
	path := filepath.Join(b.dir, fmt.Sprintf("restore-%d", i))
	if err := os.MkdirAll(path, 0o755); err != nil {
		return 0, err
	}
	dst, err := blob.Open(ctx, "file://"+path)
	if err != nil {
		return 0, err
	}
	defer dst.Close()
	start := time.Now()
	if _, err := bk.Restore(ctx, b.bucket, rec.ID, dst); err != nil {
		return 0, err
	}
	return time.Since(start).Seconds() / (float64(rec.Bytes()) / (1 << 30)), nil
}

// rpo writes RPORate bytes per second for RPOPhase and samples the
// largest archive lag of the regions every 100 ms.
func (b *bench) rpo(ctx context.Context, rep *Report) error {
	var lags []float64
	var shipped0 int64
	for _, r := range b.cluster.Regions {
		shipped0 += r.ArchiveStatus().ShippedTotal
	}
	vals := newValues()
	perTick := max(1, b.cfg.RPORate/valueSize/100) // writes per 10 ms
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	end := time.Now().Add(b.cfg.RPOPhase)
	next := 0
	lastSample := time.Now()
	for time.Now().Before(end) {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
		for range perTick {
			k := key(next % b.keys)
			next++
			if _, err := b.regionOf(k).Put(k, vals.next()); err != nil {
				return err
			}
			rep.RPOWrittenBytes += valueSize
		}
		if now := time.Now(); now.Sub(lastSample) >= 100*time.Millisecond {
			lastSample = now
			worst := 0.0
			for _, r := range b.cluster.Regions {
				worst = max(worst, r.ArchiveStatus().Lag(now).Seconds())
			}
			lags = append(lags, worst)
		}
	}
	for _, r := range b.cluster.Regions {
		rep.RPOShippedBytes += r.ArchiveStatus().ShippedTotal
	}
	rep.RPOShippedBytes -= shipped0
	d := make([]time.Duration, len(lags))
	for i, l := range lags {
		d[i] = time.Duration(l * float64(time.Second))
	}
	rep.RPOMedianS, rep.RPOP99S = quantile(d, 0.5).Seconds(), quantile(d, 0.99).Seconds()
	rep.RPOMaxS = quantile(d, 1).Seconds()
	return nil
}
