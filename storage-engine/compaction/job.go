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
		iters = append(iters, r.NewIter())
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
	if keep {
		// The output is rarely larger than the inputs: one allocation.
		cw.tee = make([]byte, 0, res.InputBytes)
	}
	sw := sstable.NewWriter(cw, job.SST)
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
	if keep {
		if res.Kept, err = storedBlocks(cw.tee, job.Output); err != nil {
			return Result{}, err
		}
	}
	return res, nil
}

// storedBlocks cuts the data blocks out of file, the output's bytes as
// written. The index is parsed from memory; the blocks share one buffer
// holding just the data blocks (a prefix of the file, in key order).
func storedBlocks(file []byte, name string) ([]StoredBlock, error) {
	r, err := sstable.Open(bytes.NewReader(file), int64(len(file)), name, nil)
	if err != nil {
		return nil, fmt.Errorf("compaction: parsing the output as written: %w", err)
	}
	n := r.NumBlocks()
	if n == 0 {
		return nil, nil
	}
	// The trailer's size is a format constant: measure it on block 0
	// rather than restate it here.
	first, err := r.ReadStoredBlock(0)
	if err != nil {
		return nil, err
	}
	trailer := uint64(len(first)) - r.BlockHandle(0).Length
	last := r.BlockHandle(n - 1)
	data := file[:last.Offset+last.Length+trailer]
	if cap(file)-len(data) > len(data)/8 {
		// Filter, index and a buffer sized for the inputs would otherwise
		// stay in memory with the blocks.
		data = bytes.Clone(data)
	}
	out := make([]StoredBlock, n)
	for i := range out {
		h := r.BlockHandle(i)
		end := h.Offset + h.Length + trailer
		out[i] = StoredBlock{Handle: h, LastUserKey: bytes.Clone(r.BlockLastUserKey(i)), Stored: data[h.Offset:end:end]}
	}
	return out, nil
}

// countingWriter counts the bytes written and, when tee is not nil, keeps
// a copy of them.
type countingWriter struct {
	w   interface{ Write([]byte) (int, error) }
	n   int64
	tee []byte
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	if c.tee != nil {
		c.tee = append(c.tee, p[:n]...)
	}
	return n, err
}
