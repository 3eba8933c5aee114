package blob

import "context"

// ReadHook is called with the size of every read before it happens; an error
// fails the read. A compaction worker uses it to throttle its input reads (a
// real compaction rate limit, like Cassandra's compaction throughput) and to
// report progress.
type ReadHook func(ctx context.Context, n int) error

// WithReadHook returns a view of the bucket whose objects opened with
// OpenObject call hook before each read. The hook gets the context that
// OpenObject was called with, so cancelling the caller stops a throttled read.
func (b *Bucket) WithReadHook(hook ReadHook) *Bucket {
	c := *b
	c.onRead = hook
	return &c
}

type hookedObject struct {
	Object
	ctx  context.Context
	hook ReadHook
}

func (o *hookedObject) ReadAt(p []byte, off int64) (int, error) {
	if err := o.hook(o.ctx, len(p)); err != nil {
		return 0, err
	}
	return o.Object.ReadAt(p, off)
}
