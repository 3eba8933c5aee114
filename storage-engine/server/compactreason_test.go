package server

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	compactionpb "github.com/bellows-kv/bellows/proto/bellows/compaction/v1"
	kvpb "github.com/bellows-kv/bellows/proto/bellows/kv/v1"
	"github.com/bellows-kv/bellows/storage-engine/blob"
	"github.com/bellows-kv/bellows/storage-engine/compaction"
	"github.com/bellows-kv/bellows/storage-engine/compactor"
	"github.com/bellows-kv/bellows/storage-engine/offload"
	"github.com/bellows-kv/bellows/storage-engine/region"
)

// offloadStore opens a one-region store whose compactions go, in Required
// mode, to one worker. The region has two flushed files.
func offloadStore(t *testing.T, worker compactionpb.CompactorServer) (*Store, string) {
	t.Helper()
	ctx := context.Background()
	url := "file://" + filepath.Join(t.TempDir(), "bucket")
	b, err := blob.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	compactionpb.RegisterCompactorServer(srv, worker)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	var s *Store
	opts := offload.Options{Mode: offload.Required, Workers: offload.Static{lis.Addr().String()}, BucketURL: url,
		Local: compaction.Local{Bucket: b}, RetryInitial: 20 * time.Millisecond, RetryMax: 50 * time.Millisecond,
		InputBytes: func(j compaction.Job) int64 { return s.JobInputBytes(j) }}
	exec, err := offload.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = exec.Close() })
	spans, err := SplitEvenly(1)
	if err != nil {
		t.Fatal(err)
	}
	s, err = OpenStore(ctx, spans, StoreOptions{WALRoot: t.TempDir(),
		Region: region.Options{Bucket: b, DisableAutoCompaction: true, Executor: exec}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	e := engine(t, s)
	for i := range 2 {
		if _, err := e.Put([]byte(fmt.Sprint(i)), []byte("v")); err != nil {
			t.Fatal(err)
		}
		if err := e.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	return s, s.Assignments()[0].Name()
}

// fullWorker refuses every job for lack of room, without saying whether the
// job would fit its empty cache (as workers before JOB_LARGER_THAN_CACHE);
// its Status says how large the cache is.
type fullWorker struct {
	compactionpb.UnimplementedCompactorServer
	capacity int64
}

func (fullWorker) Compact(*compactionpb.CompactRequest, compactionpb.Compactor_CompactServer) error {
	return status.Error(codes.ResourceExhausted, "compactor full: cache full: job needs 1 KiB, 0 B of 1 GiB free")
}

func (w fullWorker) Status(context.Context, *compactionpb.StatusRequest) (*compactionpb.StatusResponse, error) {
	return &compactionpb.StatusResponse{CacheCapacityBytes: w.capacity, CacheUsedBytes: w.capacity}, nil
}

// Required mode, every worker's cache full: with start_timeout_ms the call
// answers RESOURCE_EXHAUSTED with the reason CACHE_FULL instead of waiting,
// and installs nothing.
func TestAdminCompactSaysWhyItCannotStart(t *testing.T) {
	s, name := offloadStore(t, fullWorker{capacity: 1 << 30})
	files := engine(t, s).FileCount()
	began := time.Now()
	_, err := NewKV(s, nil, nil).Compact(context.Background(), &kvpb.CompactRequest{Region: name, Major: true, StartTimeoutMs: 300})
	if took := time.Since(began); took < 300*time.Millisecond || took > 5*time.Second {
		t.Errorf("answered after %v; want just past the 300ms start timeout", took)
	}
	st := status.Convert(err)
	var reason string
	for _, d := range st.Details() {
		if ei, ok := d.(*errdetails.ErrorInfo); ok && ei.Domain == CompactErrorDomain {
			reason = ei.Reason
		}
	}
	if st.Code() != codes.ResourceExhausted || reason != offload.ReasonCacheFull || RegionOf(err) != name ||
		!strings.Contains(st.Message(), "cache full") {
		t.Fatalf("Compact: %v (reason %q, region %q); want RESOURCE_EXHAUSTED, CACHE_FULL, about %s, quoting the refusal", err, reason, RegionOf(err), name)
	}
	if n := engine(t, s).FileCount(); n != files {
		t.Fatalf("%d files after a compaction that did not start, want %d", n, files)
	}
}

// A job larger than every worker's whole cache runs in the store even in
// Required mode (it would wait forever, holding the region's compactions),
// and the answer says where and why.
func TestAdminCompactRunsOversizedJobLocally(t *testing.T) {
	for what, worker := range map[string]compactionpb.CompactorServer{
		"refusal says so": compactor.New(compactor.Options{Name: "small", CacheBytes: 1}),
		"Status says so":  fullWorker{capacity: 1},
	} {
		t.Run(what, func(t *testing.T) {
			s, name := offloadStore(t, worker)
			resp, err := NewKV(s, nil, nil).Compact(context.Background(), &kvpb.CompactRequest{Region: name, Major: true})
			if err != nil {
				t.Fatal(err)
			}
			if !resp.Compacted || resp.Location != offload.LocationLocal || resp.Worker != "" ||
				!strings.HasPrefix(resp.Note, offload.ReasonJobTooLarge+": ") || !strings.Contains(resp.Note, "larger than every worker's cache (largest 1 B)") {
				t.Fatalf("Compact: %+v; want compacted locally with a JOB_TOO_LARGE note", resp)
			}
			if n := engine(t, s).FileCount(); n != 1 {
				t.Fatalf("%d files after a major compaction", n)
			}
		})
	}
}
