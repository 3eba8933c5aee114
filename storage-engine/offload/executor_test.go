package offload

import (
	"context"
	"fmt"
	"net"
	"testing"

	"google.golang.org/grpc"

	compactionpb "github.com/bellows-kv/bellows/proto/bellows/compaction/v1"
	"github.com/bellows-kv/bellows/storage-engine/blob"
	"github.com/bellows-kv/bellows/storage-engine/compaction"
	"github.com/bellows-kv/bellows/storage-engine/compactor"
	"github.com/bellows-kv/bellows/storage-engine/region"
)

func listen(t *testing.T) net.Listener {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return lis
}

func startWorker(t *testing.T, lis net.Listener, cache int64) (string, *compactor.Worker) {
	t.Helper()
	w := compactor.New(compactor.Options{Name: fmt.Sprint("cache-", cache), CacheBytes: cache})
	s := grpc.NewServer()
	compactionpb.RegisterCompactorServer(s, w)
	go func() { _ = s.Serve(lis) }()
	t.Cleanup(s.Stop)
	return lis.Addr().String(), w
}

// A worker without room refuses with RESOURCE_EXHAUSTED and the job runs on
// the next one; the region installs the remote output and reads through it.
func TestRefusedJobGoesToNextWorker(t *testing.T) {
	ctx := context.Background()
	url := "file://" + t.TempDir()
	b, err := blob.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	// The region's first worker in rendezvous order gets no room.
	l1, l2 := listen(t), listen(t)
	order := Rendezvous("r", []string{l1.Addr().String(), l2.Addr().String()})
	if order[0] != l1.Addr().String() {
		l1, l2 = l2, l1
	}
	small, smallW := startWorker(t, l1, 1)
	big, bigW := startWorker(t, l2, 64<<20)
	exec, err := New(Options{Mode: Required, Workers: Static{small, big}, BucketURL: url, Local: compaction.Local{Bucket: b}})
	if err != nil {
		t.Fatal(err)
	}
	defer exec.Close()
	r, err := region.Open(ctx, region.Options{Name: "r", Bucket: b, WALDir: t.TempDir(), DisableAutoCompaction: true, Executor: exec})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	for f := range 3 {
		for i := range 50 {
			if _, err := r.Put(fmt.Appendf(nil, "k%02d-%03d", f, i), []byte("value")); err != nil {
				t.Fatal(err)
			}
		}
		if err := r.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := r.Compact(ctx, true); err != nil {
		t.Fatal(err)
	}
	if r.FileCount() != 1 {
		t.Fatalf("%d files after a major compaction", r.FileCount())
	}
	small0, _ := smallW.Status(ctx, nil)
	big0, _ := bigW.Status(ctx, nil)
	if small0.Rejections != 1 || big0.CompactionRateBytesPerSecond <= 0 {
		t.Fatalf("small worker %+v, big worker %+v", small0, big0)
	}
	if v, ok, err := r.Get([]byte("k01-007"), ^uint64(0)); err != nil || !ok || string(v) != "value" {
		t.Fatalf("read after remote compaction: %q %v %v", v, ok, err)
	}
}
