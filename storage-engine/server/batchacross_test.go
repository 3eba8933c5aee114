package server

import (
	"context"
	"testing"

	"google.golang.org/grpc/metadata"

	kvpb "github.com/bellows-kv/bellows/proto/bellows/kv/v1"
	"github.com/bellows-kv/bellows/storage-engine/kv"
	"github.com/bellows-kv/bellows/storage-engine/region"
	"github.com/bellows-kv/bellows/storage-engine/server/route"
	"github.com/bellows-kv/bellows/storage-engine/txn"
)

func put(key, value string) *kvpb.Mutation {
	return &kvpb.Mutation{Op: kvpb.Mutation_OP_PUT, Key: []byte(key), Value: []byte(value)}
}

// A batch whose keys fall in two stores' regions commits in both at one
// timestamp, coordinated by mutation 0's owner; its retry under the same idempotency key gets the
// first answer, not a second commit over a later writer's value.
func TestABatchAcrossRegionsCommitsEverywhereOnce(t *testing.T) {
	p := newPair(t, route.Options{})
	withID := func(id string) context.Context {
		return metadata.NewIncomingContext(context.Background(), metadata.Pairs(RequestIDHeader, id))
	}
	req := &kvpb.BatchRequest{Mutations: []*kvpb.Mutation{put("a", "1"), put("z", "1"), {Op: kvpb.Mutation_OP_DELETE, Key: []byte("y")}}}
	if _, err := p.b.kv.Put(context.Background(), &kvpb.PutRequest{Key: []byte("y"), Value: []byte("0")}); err != nil {
		t.Fatal(err)
	}
	first, err := p.a.Batch(withID("across-1"), req)
	if err != nil || first.Region != "region-000" {
		t.Fatalf("batch across region-000 and region-001: %v, %v", first, err)
	}
	for _, k := range []string{"a", "z"} {
		g, err := p.a.Get(context.Background(), &kvpb.GetRequest{Key: []byte(k)})
		if err != nil || !g.Found || string(g.Value) != "1" || g.Version != first.CommitTs {
			t.Fatalf("%s after the batch: %v, %v; want 1 at the batch's commit %d", k, g, err, first.CommitTs)
		}
	}
	if got := p.b.get(t, "y", kv.MaxTimestamp); got != "<none>" {
		t.Fatalf("y = %q after the batch's delete", got)
	}
	if got := p.b.get(t, "z", first.CommitTs-1); got != "<none>" {
		t.Fatalf("z just before the batch's commit = %q, want none: the batch is visible at one timestamp", got)
	}
	if _, err := p.b.kv.Put(context.Background(), &kvpb.PutRequest{Key: []byte("z"), Value: []byte("2")}); err != nil {
		t.Fatal(err)
	}
	again, err := p.a.Batch(withID("across-1"), req)
	if err != nil || again.CommitTs != first.CommitTs {
		t.Fatalf("the retry: %v, %v; want the first commit %d", again, err, first.CommitTs)
	}
	if got := p.b.get(t, "z", kv.MaxTimestamp); got != "2" {
		t.Fatalf("z = %q after the retries, want the later writer's 2", got)
	}
}

// A write conflict is the one failure a batch across regions commits
// again after; other failures are returned.
func TestOnlyAWriteConflictIsRetried(t *testing.T) {
	conflict := txn.ConflictStatus(&region.ConflictError{Key: []byte("k"), StartTS: 1, CommittedTS: 2})
	if !isWriteConflict(conflict) {
		t.Fatalf("%v is not taken for a write conflict", conflict)
	}
	for _, err := range []error{nil, context.Canceled, region.ErrTxnRolledBack, toStatus(region.ErrClosed)} {
		if isWriteConflict(err) {
			t.Errorf("%v is taken for a write conflict", err)
		}
	}
}
