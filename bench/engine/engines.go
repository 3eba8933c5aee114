// Package engine benchmarks the Bellows engine against Pebble on the same
// workloads, with the same memory budget, in one run.
package engine

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/bloom"

	"github.com/bellows-kv/bellows/storage-engine/blob"
	"github.com/bellows-kv/bellows/storage-engine/blockcache"
	"github.com/bellows-kv/bellows/storage-engine/compaction"
	"github.com/bellows-kv/bellows/storage-engine/kv"
	"github.com/bellows-kv/bellows/storage-engine/region"
	"github.com/bellows-kv/bellows/storage-engine/sstable"
	"github.com/bellows-kv/bellows/storage-engine/wal"
)

// Engine is what a workload drives.
type Engine interface {
	Name() string
	Put(k, v []byte) error
	Get(k []byte) (found bool, err error)
	// Scan reads up to n live keys from start and returns how many it read.
	Scan(start []byte, n int) (int, error)
	// Flush writes the memtable out and waits for it.
	Flush() error
	// Reopen closes the engine and opens it again on the same files with a
	// cold block cache sized to the budget, acknowledging each write only
	// after an fsync if sync is set.
	Reopen(sync bool) error
	Close() error
}

// Budget is the memory both engines get. CacheBytes covers data blocks and
// the tables' index and filter blocks together: both engines keep all
// three in their block cache, except what Bellows pins outside it (a
// format 2 file's top-level index, a format 1 file's whole index and
// filter), so Bellows' cache gets CacheBytes less that memory (see
// Bellows.Reopen).
type Budget struct {
	MemtableBytes int64
	CacheBytes    int64
}

// Bellows is one region of the Bellows engine with local compaction.
type Bellows struct {
	r      *region.Region
	bucket *blob.Bucket
	dir    string
	budget Budget
	cache  *blockcache.Cache
	// Opens records every (re)open: the block cache it got and the index
	// and filter memory that was subtracted from the budget for it.
	Opens []CacheSizing
}

// CacheSizing is one open of the Bellows region.
type CacheSizing struct {
	WALMode    wal.Mode
	TableBytes int64 // SST index and filter memory pinned outside the cache when opened
	CacheBytes int64 // block cache: the budget less TableBytes
}

// OpenBellows opens a region in dir with WAL mode async (ack after write(2),
// fsync every 100ms), like Pebble with NoSync. Its block cache is the whole
// budget: the region holds no tables yet.
func OpenBellows(dir string, b Budget) (*Bellows, error) {
	bucket, err := blob.Open(context.Background(), "file://"+dir+"/bucket")
	if err != nil {
		return nil, err
	}
	e := &Bellows{bucket: bucket, dir: dir, budget: b}
	if err := e.open(wal.ModeAsync, 0); err != nil {
		bucket.Close()
		return nil, err
	}
	return e, nil
}

func (e *Bellows) open(mode wal.Mode, tableBytes int64) error {
	cacheBytes := e.budget.CacheBytes - tableBytes
	if cacheBytes < 1<<20 {
		return fmt.Errorf("bellows: pinned indexes (%d MiB) leave less than 1 MiB of the %d MiB cache budget: raise --cache-mib",
			tableBytes>>20, e.budget.CacheBytes>>20)
	}
	cache := blockcache.New(cacheBytes)
	r, err := region.Open(context.Background(), region.Options{
		Name:                  "bench",
		Bucket:                e.bucket,
		WALDir:                e.dir + "/wal",
		WALMode:               mode,
		MemstoreBytes:         e.budget.MemtableBytes,
		MaxImmutableMemstores: 1,
		BlockCache:            cache,
		SST:                   sstable.WriterOptions{BlockSize: 4 << 10, Compression: sstable.S2Compression},
		Retention:             compactionRetention,
	})
	if err != nil {
		return err
	}
	e.r, e.cache = r, cache
	e.Opens = append(e.Opens, CacheSizing{WALMode: mode, TableBytes: tableBytes, CacheBytes: cacheBytes})
	return nil
}

// Reopen closes the region and opens it again on the same files with a
// cold block cache of the budget less the index and filter memory the
// tables hold now, and with WAL mode sync (fsync before each write is
// acknowledged) if sync is set, else async.
func (e *Bellows) Reopen(sync bool) error {
	tableBytes := e.r.TableMemoryBytes()
	if err := e.r.Close(); err != nil {
		return err
	}
	mode := wal.ModeAsync
	if sync {
		mode = wal.ModeSync
	}
	return e.open(mode, tableBytes)
}

func (e *Bellows) Name() string { return "bellows" }
func (e *Bellows) Put(k, v []byte) error {
	_, err := e.r.Put(k, v)
	return err
}
func (e *Bellows) Get(k []byte) (bool, error) {
	_, ok, err := e.r.Get(k, kv.MaxTimestamp)
	return ok, err
}
func (e *Bellows) Scan(start []byte, n int) (int, error) {
	it, err := e.r.NewIterator(start, nil, kv.MaxTimestamp)
	if err != nil {
		return 0, err
	}
	c := 0
	for ok := it.First(); ok && c < n; ok = it.Next() {
		c++
	}
	return c, errors.Join(it.Err(), it.Close())
}
func (e *Bellows) Flush() error { return e.r.Flush(context.Background()) }

// CacheMisses is the block cache's misses since the region was opened
// (data blocks and index and filter partitions).
func (e *Bellows) CacheMisses() int64 {
	st := e.cache.Stats()
	return int64(st.Misses + st.MetaMisses)
}

// Layout says what a scan merges now: the region's SSTs (every one spans
// the key space under random writes, and sorted runs are what a scan
// seeks) and its memstore's segments.
func (e *Bellows) Layout() string {
	var sizes []string
	for _, f := range e.r.Manifest().Files {
		sizes = append(sizes, fmt.Sprintf("%.0f", float64(f.Size)/(1<<20)))
	}
	return fmt.Sprintf("%d SSTs (%s MiB, oldest first) + memstore of %d segments (active + %d in the pipeline)",
		len(sizes), strings.Join(sizes, ", "), 1+e.r.PipelineSegments(), e.r.PipelineSegments())
}

// TableMemoryBytes is what Bellows holds outside its block cache: its files'
// pinned top-level indexes (format 2), which Pebble keeps in its cache.
func (e *Bellows) TableMemoryBytes() int64 { return e.r.TableMemoryBytes() }
func (e *Bellows) Close() error {
	return errors.Join(e.r.Close(), e.bucket.Close())
}

// Pebble is Pebble configured as CockroachDB runs it, with the same budget.
type Pebble struct {
	db     *pebble.DB
	wo     *pebble.WriteOptions
	dir    string
	budget Budget
}

// PebbleCompactions is the compaction concurrency CockroachDB gives a store
// on this machine: min(GOMAXPROCS-1, 3), at least 1
// (getMaxConcurrentCompactions in cockroachdb/cockroach pkg/storage; Pebble's
// own production-like benchmark options use the same
// CompactionConcurrencyRange of 1 to min(3, max(GOMAXPROCS-1, 1))).
func PebbleCompactions() int { return min(3, max(runtime.GOMAXPROCS(0)-1, 1)) }

// PebbleMemTableStopWrites is CockroachDB's MemTableStopWritesThreshold.
const PebbleMemTableStopWrites = 4

// PebbleOptions is Pebble as CockroachDB configures it
// (cockroachdb/cockroach pkg/storage/pebble.go, DefaultPebbleOptions):
// L0CompactionThreshold 2, LBaseMaxBytes 64 MiB, MemTableStopWritesThreshold
// 4, a bloom filter of 10 bits per key on every level (FilterType
// TableFilter), and compaction concurrency for this machine's cores
// (PebbleCompactions). The memtable size and block cache come from the
// budget (CockroachDB's 64 MiB memtable would double Bellows'). Not taken
// from CockroachDB, deliberately: its L0StopWritesThreshold of 1000 relies on
// CockroachDB's admission control to throttle writes long before that, which
// this benchmark does not have, so Pebble keeps its default of 12; its 32 KiB
// data blocks, since both engines write 4 KiB blocks here; and its MVCC
// comparer, key schema and value blocks, which need CockroachDB's keys.
func PebbleOptions(b Budget, cache *pebble.Cache) *pebble.Options {
	opts := &pebble.Options{
		Cache:                       cache,
		MemTableSize:                uint64(b.MemtableBytes),
		MemTableStopWritesThreshold: PebbleMemTableStopWrites,
		L0CompactionThreshold:       2,
		LBaseMaxBytes:               64 << 20,
		CompactionConcurrencyRange:  func() (int, int) { return 1, PebbleCompactions() },
		Logger:                      quietLogger{},
	}
	for i := range opts.Levels {
		opts.Levels[i].FilterPolicy = bloom.FilterPolicy(10)
		opts.Levels[i].FilterType = pebble.TableFilter
	}
	opts.EnsureDefaults()
	return opts
}

// quietLogger drops Pebble's informational messages (WAL replay on every
// reopen) and keeps its errors.
type quietLogger struct{}

func (quietLogger) Infof(string, ...any)              {}
func (quietLogger) Errorf(format string, args ...any) { pebble.DefaultLogger.Errorf(format, args...) }
func (quietLogger) Fatalf(format string, args ...any) { pebble.DefaultLogger.Fatalf(format, args...) }

// OpenPebble opens Pebble in dir with the given budget (its block cache is
// the whole cache budget: index and filter blocks live in it) and no WAL
// sync.
func OpenPebble(dir string, b Budget) (*Pebble, error) {
	e := &Pebble{dir: dir, budget: b}
	if err := e.open(false); err != nil {
		return nil, err
	}
	return e, nil
}

func (e *Pebble) open(sync bool) error {
	cache := pebble.NewCache(e.budget.CacheBytes)
	defer cache.Unref()
	db, err := pebble.Open(e.dir, PebbleOptions(e.budget, cache))
	if err != nil {
		return fmt.Errorf("pebble: %w", err)
	}
	e.db, e.wo = db, pebble.NoSync
	if sync {
		e.wo = pebble.Sync
	}
	return nil
}

// Reopen closes the database and opens it again with a cold block cache of
// the same budget, and with an fsync per write if sync is set.
func (e *Pebble) Reopen(sync bool) error {
	db := e.db
	e.db = nil
	if err := db.Close(); err != nil {
		return err
	}
	return e.open(sync)
}

func (e *Pebble) Name() string          { return "pebble" }
func (e *Pebble) Put(k, v []byte) error { return e.db.Set(k, v, e.wo) }
func (e *Pebble) Get(k []byte) (bool, error) {
	_, closer, err := e.db.Get(k)
	if errors.Is(err, pebble.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return true, closer.Close()
}
func (e *Pebble) Scan(start []byte, n int) (int, error) {
	it, err := e.db.NewIter(&pebble.IterOptions{LowerBound: start})
	if err != nil {
		return 0, err
	}
	c := 0
	for ok := it.First(); ok && c < n; ok = it.Next() {
		_ = it.Value()
		c++
	}
	return c, errors.Join(it.Error(), it.Close())
}
func (e *Pebble) Flush() error { return e.db.Flush() }

// CacheMisses is the block cache's misses since the database was opened
// (data, index and filter blocks: all three live in it).
func (e *Pebble) CacheMisses() int64 { return e.db.Metrics().BlockCache.Misses }

// Layout says what a scan merges now: Pebble's read amplification (L0
// sublevels plus non-empty levels, each a sorted run) and its memtables.
func (e *Pebble) Layout() string {
	m := e.db.Metrics()
	var lv []string
	for i, l := range m.Levels {
		if l.TablesCount > 0 {
			lv = append(lv, fmt.Sprintf("L%d %d files/%d sublevels %.0f MiB", i, l.TablesCount, l.Sublevels, float64(l.TablesSize)/(1<<20)))
		}
	}
	return fmt.Sprintf("read amplification %d (%s) + %d memtables", m.ReadAmp(), strings.Join(lv, ", "), m.MemTable.Count)
}
func (e *Pebble) Close() error {
	if e.db == nil { // a failed Reopen
		return nil
	}
	return e.db.Close()
}

// Pebble keeps one version per key when no snapshot is open; so does this.
var compactionRetention = compaction.Retention{MaxVersions: 1}
