package server

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	kvpb "github.com/bellows-kv/bellows/proto/bellows/kv/v1"
	"github.com/bellows-kv/bellows/storage-engine/blob"
	"github.com/bellows-kv/bellows/storage-engine/server/route"
)

// localKV serves every region of the key space split at m, in one store.
func localKV(t *testing.T) *KV {
	t.Helper()
	all, err := SplitAt([]string{"m"})
	if err != nil {
		t.Fatal(err)
	}
	bucket, err := blob.Open(context.Background(), "file://"+t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = bucket.Close() })
	return NewKV(openStore(t, all, bucket), nil, nil)
}

func putKV(t *testing.T, s *KV, key, value string) uint64 {
	t.Helper()
	r, err := s.Put(context.Background(), &kvpb.PutRequest{Key: []byte(key), Value: []byte(value)})
	if err != nil {
		t.Fatalf("put %s: %v", key, err)
	}
	return r.CommitTs
}

func byteKeys(ks ...string) [][]byte {
	out := make([][]byte, len(ks))
	for i, k := range ks {
		out[i] = []byte(k)
	}
	return out
}

// results renders a BatchGet answer as k=v or k=- (absent), in order.
func results(keys [][]byte, resp *kvpb.BatchGetResponse) string {
	var out []string
	for i, r := range resp.Results {
		v := "-"
		if r.Found {
			v = string(r.Value)
		}
		out = append(out, fmt.Sprintf("%s=%s", keys[i], v))
	}
	return strings.Join(out, " ")
}

func TestBatchGetReadsTheKeysOfOneRegion(t *testing.T) {
	s := localKV(t)
	ctx := context.Background()
	ts1 := putKV(t, s, "a", "1")
	putKV(t, s, "b", "2")
	putKV(t, s, "a", "3")
	putKV(t, s, "n", "4")

	_, err := s.BatchGet(ctx, &kvpb.BatchGetRequest{Keys: byteKeys("a", "x")})
	if status.Code(err) != codes.OutOfRange || !strings.Contains(status.Convert(err).Message(), `key 1 ("x") is not in region-000`) {
		t.Fatalf("a BatchGet across regions: %v, want OUT_OF_RANGE naming key 1", err)
	}
	keys := byteKeys("b", "a", "c", "a")
	resp, err := s.BatchGet(ctx, &kvpb.BatchGetRequest{Keys: keys})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := results(keys, resp), "b=2 a=3 c=- a=3"; got != want || resp.Region != "region-000" {
		t.Fatalf("BatchGet = %s in %s, want %s in region-000", got, resp.Region, want)
	}
	resp, err = s.BatchGet(ctx, &kvpb.BatchGetRequest{Keys: keys, ReadTs: &ts1})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := results(keys, resp), "b=- a=1 c=- a=1"; got != want {
		t.Fatalf("BatchGet at %d = %s, want %s", ts1, got, want)
	}
	resp, err = s.BatchGet(ctx, &kvpb.BatchGetRequest{Keys: byteKeys("n", "q")})
	if err != nil || results(byteKeys("n", "q"), resp) != "n=4 q=-" || resp.Region != "region-001" {
		t.Fatalf("BatchGet in region-001: %v, %v", resp, err)
	}
	for _, req := range []*kvpb.BatchGetRequest{{}, {Keys: byteKeys("a", "")}, {Keys: byteKeys("")}} {
		if _, err := s.BatchGet(ctx, req); status.Code(err) != codes.InvalidArgument {
			t.Fatalf("BatchGet %q: %v, want INVALID_ARGUMENT", req.Keys, err)
		}
	}

	// Past the answer's size bound, the first keys' results only, and at
	// least one even when that one alone passes it.
	defer func(n int) { batchGetBytes = n }(batchGetBytes)
	batchGetBytes = 20
	resp, err = s.BatchGet(ctx, &kvpb.BatchGetRequest{Keys: keys})
	if err != nil || len(resp.Results) != 2 {
		t.Fatalf("BatchGet under a 20-byte bound: %d results (%v), want 2", len(resp.GetResults()), err)
	}
	batchGetBytes = 1
	resp, err = s.BatchGet(ctx, &kvpb.BatchGetRequest{Keys: keys})
	if err != nil || len(resp.Results) != 1 {
		t.Fatalf("BatchGet under a 1-byte bound: %d results (%v), want 1", len(resp.GetResults()), err)
	}
}

// scanKeys lists the live keys of the store's regions.
func scanKeys(t *testing.T, s *KV, ts *uint64) string {
	t.Helper()
	var keys []string
	for _, a := range s.store.Assignments() {
		e, err := a.Engine()
		if err != nil {
			t.Fatal(err)
		}
		rt := readTS(ts)
		it, err := e.NewIterator(nil, nil, rt)
		if err != nil {
			t.Fatal(err)
		}
		for ok := it.First(); ok; ok = it.Next() {
			keys = append(keys, string(it.Key()))
		}
		it.Close()
	}
	return strings.Join(keys, " ")
}

func TestDeleteRangeDeletesOneRegionsKeysAtOneTimestamp(t *testing.T) {
	s := localKV(t)
	ctx := context.Background()
	for _, k := range []string{"a", "b", "b1", "c", "d", "k", "m", "n"} {
		putKV(t, s, k, "v")
	}
	resp, err := s.DeleteRange(ctx, &kvpb.DeleteRangeRequest{Start: []byte("b"), End: []byte("d")})
	if err != nil {
		t.Fatal(err)
	}
	if resp.Deleted != 3 || len(resp.Resume) != 0 || resp.Region != "region-000" || resp.CommitTs == 0 {
		t.Fatalf("DeleteRange [b, d) = %v, want 3 deleted in region-000, no resume", resp)
	}
	if got := scanKeys(t, s, nil); got != "a d k m n" {
		t.Fatalf("after DeleteRange [b, d): %s", got)
	}
	// One commit timestamp: just below it every key is there.
	before := resp.CommitTs - 1
	if got := scanKeys(t, s, &before); got != "a b b1 c d k m n" {
		t.Fatalf("at %d, just before the delete: %s", before, got)
	}

	// A range past the region's end: this region's part, and resume at
	// the next region's start.
	resp, err = s.DeleteRange(ctx, &kvpb.DeleteRangeRequest{Start: []byte("c"), End: []byte("z")})
	if err != nil || resp.Deleted != 2 || string(resp.Resume) != "m" {
		t.Fatalf("DeleteRange [c, z) = %v, %v; want d and k deleted, resume m", resp, err)
	}
	resp, err = s.DeleteRange(ctx, &kvpb.DeleteRangeRequest{Start: resp.Resume, End: []byte("z")})
	if err != nil || resp.Deleted != 2 || len(resp.Resume) != 0 || resp.Region != "region-001" {
		t.Fatalf("DeleteRange [m, z) = %v, %v; want m and n deleted in region-001, no resume", resp, err)
	}
	// Nothing live: nothing written.
	resp, err = s.DeleteRange(ctx, &kvpb.DeleteRangeRequest{Start: []byte("m")})
	if err != nil || resp.Deleted != 0 || resp.CommitTs != 0 || len(resp.Resume) != 0 {
		t.Fatalf("DeleteRange of an empty range = %v, %v", resp, err)
	}
	// Empty start: from the first key; empty end in a region with an end:
	// resume at its end.
	resp, err = s.DeleteRange(ctx, &kvpb.DeleteRangeRequest{})
	if err != nil || resp.Deleted != 1 || string(resp.Resume) != "m" {
		t.Fatalf("DeleteRange of everything = %v, %v; want a deleted, resume m", resp, err)
	}
	if got := scanKeys(t, s, nil); got != "" {
		t.Fatalf("left: %s", got)
	}
}

func TestDeleteRangeSplitsIntoBatches(t *testing.T) {
	s := localKV(t)
	ctx := context.Background()
	for i := range 10 {
		putKV(t, s, fmt.Sprintf("k%d", i), "v")
	}
	defer func(n int) { deleteRangeBytes = n }(deleteRangeBytes)
	deleteRangeBytes = 8 // four 2-byte keys a batch
	var commits []uint64
	from := []byte("k")
	for {
		resp, err := s.DeleteRange(ctx, &kvpb.DeleteRangeRequest{Start: from, End: []byte("l")})
		if err != nil {
			t.Fatal(err)
		}
		commits = append(commits, resp.CommitTs)
		if len(resp.Resume) == 0 {
			break
		}
		if want := fmt.Sprintf("k%d", 4*len(commits)); string(resp.Resume) != want || resp.Deleted != 4 {
			t.Fatalf("batch %d: %v, want 4 deleted, resume %s", len(commits), resp, want)
		}
		from = resp.Resume
	}
	if len(commits) != 3 || commits[0] >= commits[1] || commits[1] >= commits[2] {
		t.Fatalf("commits %v, want 3 batches at increasing timestamps", commits)
	}
	if got := scanKeys(t, s, nil); got != "" {
		t.Fatalf("left: %s", got)
	}
}

// A retry of an applied DeleteRange (same request id) is not applied again:
// it answers the first commit timestamp and resume = start, so the caller
// goes on and deletes only what is live then.
func TestDeleteRangeRetryIsAnsweredOnce(t *testing.T) {
	s := localKV(t)
	for _, k := range []string{"a", "b"} {
		putKV(t, s, k, "v")
	}
	ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs(RequestIDHeader, "dr-1"))
	req := &kvpb.DeleteRangeRequest{Start: []byte("a"), End: []byte("c")}
	first, err := s.DeleteRange(ctx, req)
	if err != nil || first.Deleted != 2 {
		t.Fatalf("first: %v, %v", first, err)
	}
	putKV(t, s, "b", "written after")
	again, err := s.DeleteRange(ctx, req)
	if err != nil || again.CommitTs != first.CommitTs || again.Deleted != 0 || string(again.Resume) != "a" {
		t.Fatalf("retry: %v, %v; want commit_ts %d, 0 deleted, resume a", again, err, first.CommitTs)
	}
	if got := scanKeys(t, s, nil); got != "b" {
		t.Fatalf("the retry deleted again: left %q, want b", got)
	}
	if _, err := s.DeleteRange(ctx, &kvpb.DeleteRangeRequest{Start: []byte("a"), End: []byte("d")}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("the same id for another range: %v, want INVALID_ARGUMENT", err)
	}
}

// An idempotency key names one write, its time to live included: a retry
// is answered once, the same key on a put with another TTL, or with none,
// is refused as another request.
func TestARetryIsTheSameWriteOnlyWithTheSameTimeToLive(t *testing.T) {
	s := localKV(t)
	ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs(RequestIDHeader, "put-1"))
	req := &kvpb.PutRequest{Key: []byte("k"), Value: []byte("v"), TtlMs: 60_000}
	first, err := s.Put(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if again, err := s.Put(ctx, req); err != nil || again.CommitTs != first.CommitTs {
		t.Fatalf("retry: %v, %v; want commit_ts %d", again, err, first.CommitTs)
	}
	for _, other := range []uint64{1_000, 0} {
		if _, err := s.Put(ctx, &kvpb.PutRequest{Key: []byte("k"), Value: []byte("v"), TtlMs: other}); status.Code(err) != codes.InvalidArgument {
			t.Fatalf("the same id with ttl_ms %d: %v, want INVALID_ARGUMENT", other, err)
		}
	}
	bctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs(RequestIDHeader, "batch-1"))
	batch := func(ttl uint64) *kvpb.BatchRequest {
		return &kvpb.BatchRequest{Mutations: []*kvpb.Mutation{{Op: kvpb.Mutation_OP_PUT, Key: []byte("b"), Value: []byte("v"), TtlMs: ttl}}}
	}
	if _, err := s.Batch(bctx, batch(60_000)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Batch(bctx, batch(0)); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("the same batch id without its ttl: %v, want INVALID_ARGUMENT", err)
	}
}

// Through a store that forwards: both calls go whole to the region's owner.
func TestBatchGetAndDeleteRangeAreForwarded(t *testing.T) {
	p := newPair(t, route.Options{})
	ctx := context.Background()
	for _, k := range []string{"n", "o", "p"} {
		if _, err := p.a.Put(ctx, &kvpb.PutRequest{Key: []byte(k), Value: []byte("v" + k)}); err != nil {
			t.Fatal(err)
		}
	}
	keys := byteKeys("p", "n", "q")
	resp, err := p.a.BatchGet(ctx, &kvpb.BatchGetRequest{Keys: keys})
	if err != nil || results(keys, resp) != "p=vp n=vn q=-" || resp.Region != "region-001" {
		t.Fatalf("forwarded BatchGet: %v, %v", resp, err)
	}
	dr, err := p.a.DeleteRange(ctx, &kvpb.DeleteRangeRequest{Start: []byte("n"), End: []byte("p")})
	if err != nil || dr.Deleted != 2 || dr.Region != "region-001" {
		t.Fatalf("forwarded DeleteRange: %v, %v", dr, err)
	}
	resp, err = p.b.kv.BatchGet(ctx, &kvpb.BatchGetRequest{Keys: keys})
	if err != nil || results(keys, resp) != "p=vp n=- q=-" {
		t.Fatalf("at the owner after the delete: %v, %v", resp, err)
	}
}
