package server

import (
	"context"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	kvpb "github.com/bellows-kv/bellows/proto/bellows/kv/v1"
	"github.com/bellows-kv/bellows/storage-engine/kv"
	"github.com/bellows-kv/bellows/storage-engine/server/route"
)

func ifValue(v string) *kvpb.Condition {
	return &kvpb.Condition{Expect: &kvpb.Condition_Value{Value: []byte(v)}}
}

// A compare-and-set forwarded to its region's owner: a retry under its
// idempotency key gets the first answer even after the key changed (it is
// not judged again and reported failed, nor applied twice); one that did
// not hold is judged again when retried, and names what the key holds.
func TestCompareAndSetIsForwardedAndItsRetryGetsTheFirstAnswer(t *testing.T) {
	p := newPair(t, route.Options{})
	withID := func(id string) context.Context {
		return metadata.NewIncomingContext(context.Background(), metadata.Pairs(RequestIDHeader, id))
	}
	put, err := p.a.Put(context.Background(), &kvpb.PutRequest{Key: []byte("n"), Value: []byte("v1")})
	if err != nil {
		t.Fatal(err)
	}
	if g, err := p.a.Get(context.Background(), &kvpb.GetRequest{Key: []byte("n")}); err != nil || g.Version != put.CommitTs {
		t.Fatalf("a read's version: %v, %v; want the put's commit_ts %d", g, err, put.CommitTs)
	}
	req := &kvpb.CompareAndSetRequest{Key: []byte("n"), Condition: ifValue("v1"), Value: []byte("v2")}
	first, err := p.a.CompareAndSet(withID("cas-1"), req)
	if err != nil || !first.Succeeded || first.CommitTs <= put.CommitTs {
		t.Fatalf("compare-and-set of v1: %v, %v", first, err)
	}
	if _, err := p.b.kv.Put(context.Background(), &kvpb.PutRequest{Key: []byte("n"), Value: []byte("v3")}); err != nil {
		t.Fatal(err)
	}
	again, err := p.a.CompareAndSet(withID("cas-1"), req)
	if err != nil || !again.Succeeded || again.CommitTs != first.CommitTs {
		t.Fatalf("the retry: %v, %v; want the first answer, commit_ts %d", again, err, first.CommitTs)
	}
	if got := p.b.get(t, "n", kv.MaxTimestamp); got != "v3" {
		t.Fatalf("n = %q after the retry, want the later writer's v3", got)
	}
	req2 := &kvpb.CompareAndSetRequest{Key: []byte("n"), Condition: ifValue("v1"), Value: []byte("v4")}
	failed, err := p.a.CompareAndSet(withID("cas-2"), req2)
	if err != nil || failed.Succeeded || !failed.Found || string(failed.Value) != "v3" || failed.Version == 0 {
		t.Fatalf("compare-and-set of a stale value: %v, %v; want not succeeded, holding v3", failed, err)
	}
	// It wrote nothing, so its retry is judged again: it holds now.
	if _, err := p.b.kv.Put(context.Background(), &kvpb.PutRequest{Key: []byte("n"), Value: []byte("v1")}); err != nil {
		t.Fatal(err)
	}
	ok, err := p.a.CompareAndSet(withID("cas-2"), req2)
	if err != nil || !ok.Succeeded {
		t.Fatalf("the retry once the condition holds: %v, %v", ok, err)
	}
	del, err := p.a.CompareAndSet(context.Background(), &kvpb.CompareAndSetRequest{Key: []byte("n"),
		Condition: &kvpb.Condition{Expect: &kvpb.Condition_Version{Version: ok.CommitTs}}, Delete: true})
	if err != nil || !del.Succeeded {
		t.Fatalf("delete if version %d: %v, %v", ok.CommitTs, del, err)
	}
	if got := p.b.get(t, "n", kv.MaxTimestamp); got != "<none>" {
		t.Fatalf("n = %q after the conditional delete", got)
	}
	for name, r := range map[string]*kvpb.CompareAndSetRequest{
		"no condition":     {Key: []byte("n"), Value: []byte("v")},
		"absent false":     {Key: []byte("n"), Condition: &kvpb.Condition{Expect: &kvpb.Condition_Absent{}}},
		"version 0":        {Key: []byte("n"), Condition: &kvpb.Condition{Expect: &kvpb.Condition_Version{}}},
		"delete and value": {Key: []byte("n"), Condition: ifValue("x"), Delete: true, Value: []byte("v")},
		"empty key":        {Condition: ifValue("x")},
	} {
		if _, err := p.a.CompareAndSet(context.Background(), r); status.Code(err) != codes.InvalidArgument {
			t.Errorf("%s: %v, want INVALID_ARGUMENT", name, err)
		}
	}
}
