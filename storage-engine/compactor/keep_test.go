package compactor

import (
	"context"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	compactionpb "github.com/bellows-kv/bellows/proto/bellows/compaction/v1"
	"github.com/bellows-kv/bellows/storage-engine/compaction/compactionwire"
)

// serverStream is a server stream whose Send is a function: a test acts
// at the exact moment the worker sends an event, with no network between.
type serverStream[T any] struct {
	grpc.ServerStream
	ctx  context.Context
	send func(*T) error
}

func (s *serverStream[T]) Send(m *T) error          { return s.send(m) }
func (s *serverStream[T]) Context() context.Context { return s.ctx }

// Done only after the output is registered: a FetchBlocks issued the
// moment Done is sent (before the worker's Send even returns) streams
// every block of the output instead of answering NOT_FOUND.
func TestDoneOnlyAfterTheOutputIsRegistered(t *testing.T) {
	ctx := context.Background()
	url, job := fixture(t, 3, 300, 100)
	w := New(Options{Name: "w", CacheBytes: 64 << 20})
	defer w.Close()
	var done *compactionpb.CompactEvent_Done
	var fetched int
	var fetchErr error
	compact := &serverStream[compactionpb.CompactEvent]{ctx: ctx, send: func(ev *compactionpb.CompactEvent) error {
		if done = ev.GetDone(); done != nil {
			fetch := &serverStream[compactionpb.Block]{ctx: ctx, send: func(*compactionpb.Block) error { fetched++; return nil }}
			fetchErr = w.FetchBlocks(&compactionpb.FetchBlocksRequest{JobId: "j"}, fetch)
		}
		return nil
	}}
	err := w.Compact(&compactionpb.CompactRequest{JobId: "j", BucketUrl: url, Job: compactionwire.JobToProto(job), KeepOutput: true}, compact)
	if err != nil || done == nil {
		t.Fatalf("compact: done %v err %v", done, err)
	}
	if fetchErr != nil || fetched != int(done.OutputBlocks) || fetched < 2 {
		t.Fatalf("FetchBlocks at Done: %d of %d blocks, err %v", fetched, done.OutputBlocks, fetchErr)
	}
}

// A Done the caller never received leaves nothing kept: its output would
// otherwise hold memory until the TTL.
func TestUndeliveredDoneKeepsNothing(t *testing.T) {
	ctx := context.Background()
	url, job := fixture(t, 2, 200, 100)
	w := New(Options{Name: "w", CacheBytes: 64 << 20})
	defer w.Close()
	compact := &serverStream[compactionpb.CompactEvent]{ctx: ctx, send: func(ev *compactionpb.CompactEvent) error {
		if ev.GetDone() != nil {
			return context.Canceled
		}
		return nil
	}}
	if err := w.Compact(&compactionpb.CompactRequest{JobId: "j", BucketUrl: url, Job: compactionwire.JobToProto(job), KeepOutput: true}, compact); err == nil {
		t.Fatal("compact succeeded though Done was not delivered")
	}
	st, _ := w.Status(ctx, nil)
	if st.KeptOutputs != 0 || st.CacheUsedBytes != 0 || st.InflightJobs != 0 {
		t.Fatalf("status: %+v", st)
	}
}

// A store's new session releases what its previous incarnation kept, before
// admission: with a cache that holds one output, the restarted store's job
// is admitted instead of refused until the TTL. Other stores' outputs stay.
func TestNewStoreSessionReleasesTheOldSessionsOutputs(t *testing.T) {
	ctx := context.Background()
	url, job := fixture(t, 3, 300, 100)
	size, err := inputBytes(ctx, mustOpen(t, url), job.Inputs)
	if err != nil {
		t.Fatal(err)
	}
	// Room for one job beside one kept output, not two outputs and a job.
	w := New(Options{Name: "w", CacheBytes: 2*size + size/2})
	c := serve(t, w)
	req := func(id, store, session string) *compactionpb.CompactRequest {
		return &compactionpb.CompactRequest{JobId: id, BucketUrl: url, Job: compactionwire.JobToProto(job), KeepOutput: true, Store: store, Session: session}
	}
	if _, err := run(ctx, c, req("a1", "a", "1")); err != nil {
		t.Fatal(err)
	}
	if _, err := run(ctx, c, req("b1", "b", "1")); err != nil {
		t.Fatal(err)
	}
	// Store a restarted: its first job frees a1 and is admitted.
	if _, err := run(ctx, c, req("a2", "a", "2")); err != nil {
		t.Fatalf("job of store a's new session: %v", err)
	}
	if st := status0(t, c); st.KeptOutputs != 2 || st.Rejections != 0 {
		t.Fatalf("status: %+v", st)
	}
	for id, want := range map[string]codes.Code{"a1": codes.NotFound, "b1": codes.OK, "a2": codes.OK} {
		s, err := c.FetchBlocks(ctx, &compactionpb.FetchBlocksRequest{JobId: id, MaxBlocks: 1})
		if err == nil {
			_, err = s.Recv()
		}
		if status.Code(err) != want {
			t.Errorf("fetch %s: %v, want %v", id, err, want)
		}
	}
}

// An output that finishes after its store announced a newer session is not
// kept: nobody alive will fetch or release it.
func TestOutputOfASupersededSessionIsNotKept(t *testing.T) {
	ctx := context.Background()
	url, job := fixture(t, 2, 200, 100)
	w := New(Options{Name: "w", CacheBytes: 64 << 20})
	defer w.Close()
	compact := &serverStream[compactionpb.CompactEvent]{ctx: ctx, send: func(ev *compactionpb.CompactEvent) error {
		if ev.GetAccepted() != nil {
			w.announce("a", "2") // the store restarted while its job ran
		}
		return nil
	}}
	err := w.Compact(&compactionpb.CompactRequest{JobId: "j", BucketUrl: url, Job: compactionwire.JobToProto(job), KeepOutput: true, Store: "a", Session: "1"}, compact)
	if err != nil {
		t.Fatal(err)
	}
	st, _ := w.Status(ctx, nil)
	if st.KeptOutputs != 0 || st.CacheUsedBytes != 0 {
		t.Fatalf("status: %+v", st)
	}
}
