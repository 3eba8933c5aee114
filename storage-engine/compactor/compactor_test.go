package compactor

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	compactionpb "github.com/bellows-kv/bellows/proto/bellows/compaction/v1"
	"github.com/bellows-kv/bellows/storage-engine/blob"
	"github.com/bellows-kv/bellows/storage-engine/blockcache"
	"github.com/bellows-kv/bellows/storage-engine/compaction"
	"github.com/bellows-kv/bellows/storage-engine/compaction/compactionwire"
	"github.com/bellows-kv/bellows/storage-engine/region"
	"github.com/bellows-kv/bellows/storage-engine/sstable"
)

// fixture writes files SSTs of a region into a file:// bucket and returns
// the URL and a job merging them.
func fixture(t *testing.T, files, keysPerFile, valueSize int) (string, compaction.Job) {
	t.Helper()
	ctx := context.Background()
	url := "file://" + t.TempDir()
	b, err := blob.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	r, err := region.Open(ctx, region.Options{Name: "r", Bucket: b, WALDir: t.TempDir(), DisableAutoCompaction: true})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	for f := range files {
		for k := range keysPerFile {
			v := make([]byte, valueSize)
			_, _ = rand.Read(v)
			if _, err := r.Put(fmt.Appendf(nil, "key-%05d", k*files+f), v); err != nil {
				t.Fatal(err)
			}
		}
		if err := r.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	job := compaction.Job{Region: "r", Output: region.ObjectKey("r", "sst/out.sst"), Merge: compaction.MergeOptions{Major: true},
		SST: sstable.WriterOptions{BlockSize: 4 << 10, Compression: sstable.S2Compression}}
	for _, f := range r.Manifest().Files {
		job.Inputs = append(job.Inputs, region.ObjectKey("r", f.Key))
	}
	return url, job
}

func serve(t *testing.T, w *Worker) compactionpb.CompactorClient {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	compactionpb.RegisterCompactorServer(s, w)
	go func() { _ = s.Serve(lis) }()
	t.Cleanup(s.Stop)
	c, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return compactionpb.NewCompactorClient(c)
}

// run reads a Compact stream to its end.
func run(ctx context.Context, c compactionpb.CompactorClient, req *compactionpb.CompactRequest) (*compactionpb.CompactEvent_Done, error) {
	s, err := c.Compact(ctx, req)
	if err != nil {
		return nil, err
	}
	for {
		ev, err := s.Recv()
		if err == io.EOF {
			return nil, fmt.Errorf("no Done")
		}
		if err != nil {
			return nil, err
		}
		if d := ev.GetDone(); d != nil {
			return d, nil
		}
	}
}

func status0(t *testing.T, c compactionpb.CompactorClient) *compactionpb.StatusResponse {
	t.Helper()
	st, err := c.Status(context.Background(), &compactionpb.StatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// waitFor polls cond: tests synchronise on observable state, not sleeps.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// FetchBlocks streams every stored block of the output in key order; each
// verifies (CRC) and caches on a reader of the output file, as a storage pod
// warming its cache would; Release frees the memory.
func TestCompactKeepAndFetchBlocks(t *testing.T) {
	ctx := context.Background()
	url, job := fixture(t, 3, 300, 100)
	w := New(Options{Name: "w", CacheBytes: 64 << 20, TransferRate: 50 << 20})
	c := serve(t, w)
	done, err := run(ctx, c, &compactionpb.CompactRequest{JobId: "j1", BucketUrl: url, Job: compactionwire.JobToProto(job), KeepOutput: true})
	if err != nil {
		t.Fatal(err)
	}
	res, err := compactionwire.ResultFromDone(done)
	if err != nil || res.Empty || res.Stats.OutputVersions != 900 || done.OutputBlocks < 2 {
		t.Fatalf("result %+v blocks %d err %v", res, done.OutputBlocks, err)
	}
	if st := status0(t, c); st.KeptOutputs != 1 || st.InflightJobs != 0 || st.CacheUsedBytes <= 0 || st.CompactionRateBytesPerSecond <= 0 {
		t.Fatalf("status after job: %+v", st)
	}

	b, _ := blob.Open(ctx, url)
	defer b.Close()
	obj, err := b.OpenObject(ctx, job.Output)
	if err != nil {
		t.Fatal(err)
	}
	defer obj.Close()
	cache := blockcache.New(64 << 20)
	rd, err := sstable.Open(obj, obj.Size(), job.Output, cache)
	if err != nil {
		t.Fatal(err)
	}
	s, err := c.FetchBlocks(ctx, &compactionpb.FetchBlocksRequest{JobId: "j1", FromBlock: 1})
	if err != nil {
		t.Fatal(err)
	}
	next := 1
	var prevLast []byte
	for {
		blk, err := s.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if int(blk.Index) != next || (prevLast != nil && bytes.Compare(blk.LastUserKey, prevLast) <= 0) {
			t.Fatalf("block %d (want %d) out of key order", blk.Index, next)
		}
		if err := rd.InsertStoredBlock(int(blk.Index), blk.Stored); err != nil {
			t.Fatalf("block %d does not verify: %v", blk.Index, err)
		}
		prevLast, next = blk.LastUserKey, next+1
	}
	if next != rd.NumBlocks() || rd.BlockCached(0) || !rd.BlockCached(rd.NumBlocks()-1) {
		t.Fatalf("got blocks 1..%d of %d", next-1, rd.NumBlocks())
	}
	// A corrupted block is refused by the store side.
	stored, _ := rd.ReadStoredBlock(0)
	stored[3] ^= 0xff
	if err := rd.InsertStoredBlock(0, stored); err == nil {
		t.Fatal("a corrupted block verified")
	}
	if st := status0(t, c); st.TransferRateBytesPerSecond <= 0 {
		t.Fatalf("transfer rate not measured: %+v", st)
	}
	rel, err := c.Release(ctx, &compactionpb.ReleaseRequest{JobId: "j1"})
	if err != nil || rel.FreedBytes <= 0 {
		t.Fatalf("release: %v %v", rel, err)
	}
	if st := status0(t, c); st.CacheUsedBytes != 0 || st.KeptOutputs != 0 {
		t.Fatalf("status after release: %+v", st)
	}
	s, err = c.FetchBlocks(ctx, &compactionpb.FetchBlocksRequest{JobId: "j1"})
	if err == nil {
		_, err = s.Recv()
	}
	if status.Code(err) != codes.NotFound {
		t.Fatalf("fetch after release: want NOT_FOUND, got %v", err)
	}
}

// Admission: a job that does not fit beside a running one is refused with
// RESOURCE_EXHAUSTED; a cancelled caller aborts its job and frees the memory.
func TestAdmissionAndAbort(t *testing.T) {
	url, job := fixture(t, 3, 200, 200)
	size, err := inputBytes(context.Background(), mustOpen(t, url), job.Inputs)
	if err != nil {
		t.Fatal(err)
	}
	// Room for one job, not two; slow enough that the first job is still
	// running while we look.
	w := New(Options{Name: "w", CacheBytes: size + size/2, CompactionRateLimit: 20 << 10, ProgressInterval: 10 * time.Millisecond})
	c := serve(t, w)

	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := run(ctx, c, &compactionpb.CompactRequest{JobId: "a", BucketUrl: url, Job: compactionwire.JobToProto(job)})
		errc <- err
	}()
	waitFor(t, "job a in flight", func() bool { return status0(t, c).InflightJobs == 1 })
	_, err = run(context.Background(), c, &compactionpb.CompactRequest{JobId: "b", BucketUrl: url, Job: compactionwire.JobToProto(job)})
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("second job: want RESOURCE_EXHAUSTED, got %v", err)
	}
	if st := status0(t, c); st.Rejections != 1 || st.CacheUsedBytes != size {
		t.Fatalf("status with one job: %+v (size %d)", st, size)
	}
	cancel()
	if err := <-errc; status.Code(err) != codes.Canceled {
		t.Fatalf("cancelled job: %v", err)
	}
	waitFor(t, "reservation freed", func() bool {
		st := status0(t, c)
		return st.InflightJobs == 0 && st.CacheUsedBytes == 0
	})
	// Draining refuses new jobs and returns at once when idle.
	if !w.Drain(context.Background()) {
		t.Fatal("drain of an idle worker did not finish")
	}
	_, err = run(context.Background(), c, &compactionpb.CompactRequest{JobId: "c", BucketUrl: url, Job: compactionwire.JobToProto(job)})
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("job while draining: %v", err)
	}
}

func mustOpen(t *testing.T, url string) *blob.Bucket {
	b, err := blob.Open(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b
}

// LinkLatency is the modelled network's latency: a FetchBlocks stream's
// first block arrives no sooner than that after the request.
func TestFetchBlocksWaitsTheLinkLatency(t *testing.T) {
	ctx := context.Background()
	url, job := fixture(t, 2, 100, 100)
	const latency = 150 * time.Millisecond
	c := serve(t, New(Options{Name: "w", CacheBytes: 64 << 20, LinkLatency: latency}))
	if _, err := run(ctx, c, &compactionpb.CompactRequest{JobId: "j1", BucketUrl: url, Job: compactionwire.JobToProto(job), KeepOutput: true}); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	s, err := c.FetchBlocks(ctx, &compactionpb.FetchBlocksRequest{JobId: "j1", MaxBlocks: 1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Recv(); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(began); d < latency {
		t.Fatalf("first block after %v, want at least the link latency %v", d, latency)
	}
}
