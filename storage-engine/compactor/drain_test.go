package compactor

import (
	"context"
	"io"
	"testing"
	"time"

	compactionpb "github.com/bellows-kv/bellows/proto/bellows/compaction/v1"
	"github.com/bellows-kv/bellows/storage-engine/compaction/compactionwire"
)

// drainWithin reports whether Drain finished within d.
func drainWithin(w *Worker, d time.Duration) bool {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	return w.Drain(ctx)
}

// A draining worker waits not only for running jobs but for the outputs
// stores still have to stream (kept, or being fetched), so a scale-down
// loses no warmup; the drain timeout bounds the wait.
func TestDrainWaitsForOutputsBeingStreamed(t *testing.T) {
	ctx := context.Background()
	url, job := fixture(t, 3, 300, 100)
	w := New(Options{Name: "w", CacheBytes: 64 << 20})
	c := serve(t, w)
	if _, err := run(ctx, c, &compactionpb.CompactRequest{JobId: "j1", BucketUrl: url, Job: compactionwire.JobToProto(job), KeepOutput: true}); err != nil {
		t.Fatal(err)
	}
	// Kept, not fetched yet: the store will stream it.
	if drainWithin(w, 50*time.Millisecond) {
		t.Fatal("drain finished while an output was kept")
	}
	// Slow enough (after the limiter's 64 KiB burst) that the stream is
	// open while the store releases the output and the drain looks.
	s, err := c.FetchBlocks(ctx, &compactionpb.FetchBlocksRequest{JobId: "j1", RateBytesPerSecond: 32 << 10})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Recv(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Release(ctx, &compactionpb.ReleaseRequest{JobId: "j1"}); err != nil {
		t.Fatal(err)
	}
	if drainWithin(w, 50*time.Millisecond) {
		t.Fatal("drain finished while an output was being streamed")
	}
	drained := make(chan bool, 1)
	go func() { drained <- drainWithin(w, 20*time.Second) }()
	ended := make(chan error, 1)
	go func() {
		for {
			if _, err := s.Recv(); err != nil {
				ended <- err
				return
			}
		}
	}()
	// The rest of the output takes about a second at this rate. (Once the
	// worker sent the last block the drain may end while the client still
	// reads buffered ones: nothing is lost then.)
	select {
	case <-drained:
		t.Fatal("drain finished while the stream was still sending")
	case <-time.After(200 * time.Millisecond):
	}
	if err := <-ended; err != io.EOF {
		t.Fatal(err)
	}
	if !<-drained {
		t.Fatal("drain did not finish after the stream ended")
	}
}
