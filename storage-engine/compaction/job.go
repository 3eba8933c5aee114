package compaction

import (
	"bytes"
	"context"
	"errors"
	"fmt"

	"github.com/bellows-kv/bellows/storage-engine/blob"
	"github.com/bellows-kv/bellows/storage-engine/iterator"
	"github.com/bellows-kv/bellows/storage-engine/sstable"
)

// Job is one compaction, described so that any process with access to the
// bucket can run it.
type Job struct {
	Region string
	// Inputs are the bucket keys of the input SSTs, oldest first.
	Inputs []string
	// Output is the bucket key the merged SST is written to.
	Output string
	Merge  MergeOptions
	SST    sstable.WriterOptions
	// Start and End bound the keys merged, [Start, End) (nil End:
	// unbounded): a region's range, when its inputs include files it
	// shares by reference with a split sibling, whose keys it drops.
	Start, End []byte
}

// Result describes the merged output.
type Result struct {
	// Empty: every version was dropped and no output object was written.
	Empty bool
	Size  int64
	Props sstable.Properties
	Stats MergeStats
	// InputBytes is the total size of the inputs.
	InputBytes int64
	// Blocks serves the output's blocks from the memory of the worker that
	// ran the job; nil when the job ran locally.
	Blocks BlockSource
	// Kept is every data block of the output as written, in key order,
	// when Execute was asked to keep them (a worker serving warmup).
	Kept []StoredBlock
	// CacheFileID, when not 0, is the block cache ID under which the
	// output's blocks were cached as they were written (write-through): the
	// output's reader must be opened with it (sstable.OpenWithFileID).
	CacheFileID uint64
}

// StoredBlock is one data block of an output exactly as the file stores it
// (compressed, with its checksummed trailer): what a worker serves.
type StoredBlock struct {
	Handle      sstable.Handle
	LastUserKey []byte
	Stored      []byte
}

// BlockSource serves the stored (compressed, checksummed) data blocks of a
// finished job's output, as a compaction worker keeps them in memory.
type BlockSource interface {
	// Fetch streams blocks from index from on, in key order, at most
	// rateBytes per second (0: unlimited), calling fn for each.
	Fetch(ctx context.Context, from int, rateBytes int64, fn func(i int, stored []byte) error) error
	// Block returns one block: a remote-cache read.
	Block(ctx context.Context, i int) ([]byte, error)
	// Release lets the worker free the job's memory.
	Release(ctx context.Context) error
}

// Executor runs compaction jobs: in the storage pod's process, or on a
// compaction worker.
type Executor interface {
	Execute(ctx context.Context, job Job) (Result, error)
}

// Placer is an Executor that may run a job elsewhere than in the store
// (offload.Executor), and can say where a region's job runs: what the
// Regions RPC reports as a region's compaction state.
type Placer interface {
	// Where is the job of region in flight: ok false when there is none;
	// location "" while it waits to start (for a slot or a worker), else
	// where it runs, with the worker's address when remote.
	Where(region string) (location, worker string, ok bool)
}

// Local runs jobs in this process against the bucket.
type Local struct{ Bucket *blob.Bucket }

// Execute implements Executor.
func (l Local) Execute(ctx context.Context, job Job) (Result, error) {
	return Execute(ctx, l.Bucket, job, false)
}

// Execute reads the job's inputs from b, merges them and writes the output
// to b. Input blocks are not cached: a compaction reads each once. With keep
// set, Result.Kept holds every data block of the output, captured as it was
// written (the worker caches what it writes, Ahmad & Kemme §5.3.2): keeping
// costs memory, never a read of the output back from the bucket.
func Execute(ctx context.Context, b *blob.Bucket, job Job, keep bool) (res Result, err error) {
	if len(job.Inputs) == 0 {
		return Result{}, errors.New("compaction: job has no inputs")
	}
	var iters []iterator.Iterator
	for _, key := range job.Inputs {
		obj, err := b.OpenObject(ctx, key)
		if err != nil {
			return Result{}, fmt.Errorf("compaction: opening input %s: %w", key, err)
		}
		defer obj.Close()
		r, err := sstable.Open(obj, obj.Size(), key, nil)
		if err != nil {
			return Result{}, err
		}
		res.InputBytes += obj.Size()
		iters = append(iters, r.NewStreamingIter())
	}
	in := iterator.Bounded(iterator.NewMerging(iters...), job.Start, job.End)
	defer in.Close()

	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w, err := b.NewWriter(wctx, job.Output)
	if err != nil {
		return Result{}, err
	}
	cw := &countingWriter{w: w}
	opts := job.SST
	var kept blockKeeper
	if keep {
		opts.OnStoredDataBlock = kept.add
	}
	sw := sstable.NewWriter(cw, opts)
	st, err := Merge(ctx, in, job.Merge, sw)
	res.Stats = st
	if err == nil && st.OutputVersions == 0 {
		cancel() // abandon the upload: nothing survived
		_ = w.Close()
		res.Empty = true
		return res, nil
	}
	if err == nil {
		res.Props, _, err = sw.Finish()
	}
	if err != nil {
		cancel()
		_ = w.Close()
		return Result{}, err
	}
	if err := w.Close(); err != nil {
		return Result{}, fmt.Errorf("compaction: writing output %s: %w", job.Output, err)
	}
	res.Size = cw.n
	res.Kept = kept.blocks
	return res, nil
}

// keepChunk is the size of the buffers a job's kept blocks are copied into.
const keepChunk = 1 << 20

// blockKeeper keeps a job's output data blocks as the writer stores them
// (the worker serves them for warmup), copied into chunks of keepChunk: the
// memory grows with the output's data blocks only. A copy of the whole file
// sized to the inputs, then cut and cloned, took up to twice the job's
// bytes b, outside the ⌊m/b⌋ accounting of a worker's memory m.
type blockKeeper struct {
	chunk  []byte
	blocks []StoredBlock
}

func (k *blockKeeper) add(h sstable.Handle, stored, trailer, lastUserKey []byte) {
	n := len(stored) + len(trailer)
	if cap(k.chunk)-len(k.chunk) < n {
		k.chunk = make([]byte, 0, max(keepChunk, n))
	}
	start := len(k.chunk)
	k.chunk = append(append(k.chunk, stored...), trailer...)
	end := len(k.chunk)
	k.blocks = append(k.blocks, StoredBlock{Handle: h, LastUserKey: bytes.Clone(lastUserKey), Stored: k.chunk[start:end:end]})
}

// countingWriter counts the bytes written.
type countingWriter struct {
	w interface{ Write([]byte) (int, error) }
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}
