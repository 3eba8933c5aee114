// Package engine benchmarks the Bellows engine against Pebble on the same
// workloads, with the same memory budget, in one run.
package engine

import (
	"context"
	"errors"
	"fmt"

	"github.com/cockroachdb/pebble/v2"

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
	Close() error
}

// Budget is the memory both engines get.
type Budget struct {
	MemtableBytes int64
	CacheBytes    int64
}

// Bellows is one region of the Bellows engine with local compaction.
type Bellows struct{ r *region.Region }

// OpenBellows opens a region in dir with WAL mode async (ack after write(2),
// fsync every 100ms), like Pebble with NoSync.
func OpenBellows(dir string, b Budget) (*Bellows, error) {
	ctx := context.Background()
	bucket, err := blob.Open(ctx, "file://"+dir+"/bucket")
	if err != nil {
		return nil, err
	}
	r, err := region.Open(ctx, region.Options{
		Name:                  "bench",
		Bucket:                bucket,
		WALDir:                dir + "/wal",
		WALMode:               wal.ModeAsync,
		MemstoreBytes:         b.MemtableBytes,
		MaxImmutableMemstores: 1,
		BlockCache:            blockcache.New(b.CacheBytes),
		SST:                   sstable.WriterOptions{BlockSize: 4 << 10, Compression: sstable.S2Compression},
		Retention:             compactionRetention,
	})
	if err != nil {
		return nil, err
	}
	return &Bellows{r: r}, nil
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

// OutsideCacheBytes is what Bellows holds beyond the shared budget: SST
// indexes and bloom filters, which Pebble keeps inside its block cache.
func (e *Bellows) OutsideCacheBytes() int64 { return e.r.TableMemoryBytes() }
func (e *Bellows) Close() error             { return e.r.Close() }

// Pebble is Pebble configured as its users would with the same budget.
type Pebble struct {
	db *pebble.DB
	wo *pebble.WriteOptions
}

// OpenPebble opens Pebble in dir with the given budget and no WAL sync.
func OpenPebble(dir string, b Budget) (*Pebble, error) {
	cache := pebble.NewCache(b.CacheBytes)
	defer cache.Unref()
	opts := &pebble.Options{
		Cache:                       cache,
		MemTableSize:                uint64(b.MemtableBytes),
		MemTableStopWritesThreshold: 2,
	}
	opts.EnsureDefaults()
	db, err := pebble.Open(dir, opts)
	if err != nil {
		return nil, fmt.Errorf("pebble: %w", err)
	}
	return &Pebble{db: db, wo: pebble.NoSync}, nil
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
func (e *Pebble) Close() error { return e.db.Close() }

// Pebble keeps one version per key when no snapshot is open; so does this.
var compactionRetention = compaction.Retention{MaxVersions: 1}
