// Package backup measures backups, restores and the WAL archive
// (bellows-bench backup): how fast a backup copies against the bucket's
// bandwidth model, what a running backup does to read and write latency,
// how long a restore takes per GiB, and how old the writes a lost volume
// would take with it get under steady writes (the RPO).
//
// Regime: four in-process regions (storage-engine/region) over a file
// bucket with a cost model (every read and copy waits its latency plus its
// bytes over the bandwidth, as a remote object store makes it), holding
// Data bytes of incompressible 1 KiB values, flushed into SSTs, with a
// block cache of an eighth of it, so reads go to the bucket. The WAL is
// archived every ArchiveInterval, as a store does by default. Each backup
// of the throughput and latency runs copies every file (the previous one
// is deleted first), the most a backup ever copies.
package backup

import (
	"context"
	crand "crypto/rand"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	bk "github.com/bellows-kv/bellows/storage-engine/backup"
	"github.com/bellows-kv/bellows/storage-engine/blob"
	"github.com/bellows-kv/bellows/storage-engine/blockcache"
	"github.com/bellows-kv/bellows/storage-engine/hlc"
	"github.com/bellows-kv/bellows/storage-engine/kv"
	"github.com/bellows-kv/bellows/storage-engine/region"
	"github.com/bellows-kv/bellows/storage-engine/regionmap"
	"github.com/bellows-kv/bellows/storage-engine/sstable"
	"github.com/bellows-kv/bellows/storage-engine/wal"
)

// Config shapes a run.
type Config struct {
	// Data is the bytes of values loaded before the runs.
	Data int64
	// Model is the bucket's cost model.
	Model blob.CostModel
	// Runs are the interleaved runs with and without a backup.
	Runs int
	// Workers run the read/write workload during the latency runs, Rate
	// operations per second between them: a steady load, not one that
	// saturates the cores (where every latency is the scheduler's).
	Workers int
	Rate    int
	// ArchiveInterval is the regions' --wal-archive-interval.
	ArchiveInterval time.Duration
	// RPOPhase is how long the steady writes of the RPO section run;
	// RPORate their bytes per second.
	RPOPhase time.Duration
	RPORate  int
}

// Default is the full run: a few minutes on two idle cores.
func Default() Config {
	return Config{Data: 256 << 20, Model: blob.CostModel{Latency: 5 * time.Millisecond, Bandwidth: 100e6},
		Runs: 7, Workers: 4, Rate: 4000, ArchiveInterval: 5 * time.Second, RPOPhase: 30 * time.Second, RPORate: 2 << 20}
}

const (
	regions   = 4
	valueSize = 1024
)

// bench is the regions under test.
type bench struct {
	cfg     Config
	dir     string
	bucket  *blob.Bucket
	cluster *bk.LocalCluster
	spans   []regionmap.Region
	keys    int
	// lastBackup is how long the previous latency run's backup took.
	lastBackup time.Duration
}

func key(i int) []byte { return fmt.Appendf(nil, "k%09d", i) }

// values makes incompressible values: each one new random bytes, so that
// no two blocks share any and S2 cannot shrink the files.
type values struct{ rng *rand.ChaCha8 }

func newValues() values {
	var seed [32]byte
	_, _ = crand.Read(seed[:])
	return values{rand.NewChaCha8(seed)}
}

func (v values) next() []byte {
	b := make([]byte, valueSize)
	_, _ = v.rng.Read(b)
	return b
}

func open(ctx context.Context, cfg Config, dir string) (*bench, error) {
	url, err := blob.WithCostModel("file://"+filepath.Join(dir, "bucket"), cfg.Model)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Join(dir, "bucket"), 0o755); err != nil {
		return nil, err
	}
	bucket, err := blob.Open(ctx, url)
	if err != nil {
		return nil, err
	}
	b := &bench{cfg: cfg, dir: dir, bucket: bucket, keys: int(cfg.Data / valueSize)}
	var bounds [][]byte
	for i := 1; i < regions; i++ {
		bounds = append(bounds, key(i*b.keys/regions))
	}
	initial, err := regionmap.Initial(bounds)
	if err != nil {
		return nil, err
	}
	m, err := regionmap.Bootstrap(ctx, bucket, initial)
	if err != nil {
		return nil, err
	}
	b.spans = m.Region
	b.cluster = &bk.LocalCluster{Bucket: bucket, Clock: hlc.New(nil, 0), Regions: map[string]*region.Region{}}
	cache := blockcache.New(cfg.Data / 8)
	for _, sp := range m.Region {
		r, err := region.Open(ctx, region.Options{
			Name: sp.Name, Bucket: bucket, WALDir: filepath.Join(dir, "wal", sp.Name), WALMode: wal.ModeAsync,
			Clock: b.cluster.Clock, BlockCache: cache, MemstoreBytes: 16 << 20,
			SST:                sstable.WriterOptions{Compression: sstable.S2Compression},
			WALArchiveInterval: cfg.ArchiveInterval,
		})
		if err != nil {
			b.close()
			return nil, err
		}
		b.cluster.Regions[sp.Name] = r
	}
	return b, nil
}

func (b *bench) close() {
	for _, r := range b.cluster.Regions {
		_ = r.Close()
	}
	_ = b.bucket.Close()
}

func (b *bench) regionOf(k []byte) *region.Region {
	for _, sp := range b.spans {
		if sp.Contains(k) {
			return b.cluster.Regions[sp.Name]
		}
	}
	panic(fmt.Sprintf("no region holds %q", k))
}

// load writes every key once and flushes.
func (b *bench) load(ctx context.Context) error {
	vals := newValues()
	for i := range b.keys {
		k := key(i)
		if _, err := b.regionOf(k).Put(k, vals.next()); err != nil {
			return err
		}
	}
	for _, r := range b.cluster.Regions {
		if err := r.Flush(ctx); err != nil {
			return err
		}
	}
	return nil
}

// workload runs Workers goroutines of random reads and writes (half each)
// until stop is closed, and returns each kind's latencies.
func (b *bench) workload(stop <-chan struct{}) (reads, writes []time.Duration, err error) {
	var mu sync.Mutex
	var wg sync.WaitGroup
	var errs []error
	for w := range b.cfg.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), uint64(time.Now().UnixNano())))
			vals := newValues()
			var rs, ws []time.Duration
			every := time.Duration(float64(time.Second) * float64(b.cfg.Workers) / float64(b.cfg.Rate))
			next := time.Now()
			for {
				next = next.Add(every)
				if d := time.Until(next); d > 0 {
					select {
					case <-stop:
					case <-time.After(d):
					}
				}
				select {
				case <-stop:
					mu.Lock()
					reads, writes = append(reads, rs...), append(writes, ws...)
					mu.Unlock()
					return
				default:
				}
				k := key(rng.IntN(b.keys))
				r := b.regionOf(k)
				start := time.Now()
				var err error
				if rng.IntN(2) == 0 {
					var found bool
					_, found, err = r.Get(k, kv.MaxTimestamp)
					if err == nil && !found {
						err = fmt.Errorf("key %q not found: the workload reads only loaded keys", k)
					}
					rs = append(rs, time.Since(start))
				} else {
					_, err = r.Put(k, vals.next())
					ws = append(ws, time.Since(start))
				}
				if err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
					return
				}
			}
		}()
	}
	wg.Wait()
	if len(errs) > 0 {
		return nil, nil, errs[0]
	}
	return reads, writes, nil
}

func quantile(d []time.Duration, q float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	slices.Sort(d)
	return d[min(len(d)-1, int(q*float64(len(d))))]
}
