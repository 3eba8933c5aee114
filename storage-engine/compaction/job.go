package compaction

import (
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

// Local runs jobs in this process against the bucket.
type Local struct{ Bucket *blob.Bucket }

// Execute implements Executor.
func (l Local) Execute(ctx context.Context, job Job) (Result, error) {
	return Execute(ctx, l.Bucket, job, nil)
}

// Execute reads the job's inputs from b, merges them and writes the output
// to b. Input blocks are not cached: a compaction reads each once. If keep is
// not nil it receives every stored data block of the output, in key order,
// after the output is complete (a worker keeps them to serve warmup).
func Execute(ctx context.Context, b *blob.Bucket, job Job, keep func(r *sstable.Reader) error) (res Result, err error) {
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
	in := iterator.NewMerging(iters...)
	defer in.Close()

	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w, err := b.NewWriter(wctx, job.Output)
	if err != nil {
		return Result{}, err
	}
	cw := &countingWriter{w: w}
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
	if keep != nil {
		obj, err := b.OpenObject(ctx, job.Output)
		if err != nil {
			return Result{}, err
		}
		defer obj.Close()
		r, err := sstable.Open(obj, obj.Size(), job.Output, nil)
		if err != nil {
			return Result{}, err
		}
		if err := keep(r); err != nil {
			return Result{}, err
		}
	}
	return res, nil
}

type countingWriter struct {
	w interface{ Write([]byte) (int, error) }
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}
