package server

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	kvpb "github.com/bellows-kv/bellows/proto/bellows/kv/v1"
	"github.com/bellows-kv/bellows/storage-engine/server/route"
	"github.com/bellows-kv/bellows/storage-engine/writereq"
)

// Puts, compare-and-sets and batches with a time to live — served here,
// forwarded, and committed across regions through the transaction path —
// read as their value before commit + ttl and as nothing from then on.
func TestWritesWithATimeToLiveExpireEverywhere(t *testing.T) {
	ctx := context.Background()
	p := newPair(t, route.Options{})
	ttl := uint64(time.Millisecond.Nanoseconds())
	readAt := func(key string, ts uint64) (string, bool) {
		t.Helper()
		g, err := p.a.Get(ctx, &kvpb.GetRequest{Key: []byte(key), ReadTs: &ts})
		if err != nil {
			t.Fatalf("get %s at %d: %v", key, ts, err)
		}
		return string(g.Value), g.Found
	}
	wantExpiry := func(what, key, value string, commit uint64) {
		t.Helper()
		if v, ok := readAt(key, commit+ttl-1); !ok || v != value {
			t.Fatalf("%s: %s just before its expiry = %q, %t; want %q", what, key, v, ok, value)
		}
		if v, ok := readAt(key, commit+ttl); ok {
			t.Fatalf("%s: %s at its expiry = %q; want nothing", what, key, v)
		}
	}
	for _, key := range []string{"a", "z"} { // here, and forwarded to the other store
		put, err := p.a.Put(ctx, &kvpb.PutRequest{Key: []byte(key), Value: []byte("p"), TtlMs: 1})
		if err != nil {
			t.Fatal(err)
		}
		wantExpiry("put", key, "p", put.CommitTs)
		cas, err := p.a.CompareAndSet(ctx, &kvpb.CompareAndSetRequest{Key: []byte(key + "2"), Condition: &kvpb.Condition{Expect: &kvpb.Condition_Absent{Absent: true}}, Value: []byte("c"), TtlMs: 1})
		if err != nil || !cas.Succeeded {
			t.Fatalf("compare-and-set: %v, %v", cas, err)
		}
		wantExpiry("compare-and-set", key+"2", "c", cas.CommitTs)
	}
	across, err := p.a.Batch(ctx, &kvpb.BatchRequest{Mutations: []*kvpb.Mutation{
		{Op: kvpb.Mutation_OP_PUT, Key: []byte("b"), Value: []byte("x"), TtlMs: 1}, put("c", "kept"),
		{Op: kvpb.Mutation_OP_PUT, Key: []byte("y"), Value: []byte("x"), TtlMs: 1},
	}})
	if err != nil {
		t.Fatal(err)
	}
	wantExpiry("a batch across regions", "b", "x", across.CommitTs)
	wantExpiry("a batch across regions", "y", "x", across.CommitTs)
	if v, ok := readAt("c", across.CommitTs+ttl); !ok || v != "kept" {
		t.Fatalf("the batch's put with no ttl reads %q, %t after the others expired", v, ok)
	}
}

// A time to live the engine cannot hold, or one on a delete, is refused
// with INVALID_ARGUMENT naming it, and nothing is written.
func TestAnInvalidTimeToLiveIsRefused(t *testing.T) {
	ctx := context.Background()
	p := newPair(t, route.Options{})
	for name, call := range map[string]func() error{
		"put": func() error {
			_, err := p.a.Put(ctx, &kvpb.PutRequest{Key: []byte("a"), Value: []byte("v"), TtlMs: writereq.MaxTTLMs + 1})
			return err
		},
		"batch delete": func() error {
			_, err := p.a.Batch(ctx, &kvpb.BatchRequest{Mutations: []*kvpb.Mutation{put("a", "v"), {Op: kvpb.Mutation_OP_DELETE, Key: []byte("b"), TtlMs: 5}}})
			return err
		},
		"compare-and-set delete": func() error {
			_, err := p.a.CompareAndSet(ctx, &kvpb.CompareAndSetRequest{Key: []byte("a"), Condition: ifValue("v"), Delete: true, TtlMs: 5})
			return err
		},
	} {
		if err := call(); status.Code(err) != codes.InvalidArgument {
			t.Errorf("%s: %v; want INVALID_ARGUMENT", name, err)
		}
	}
	if g, err := p.a.Get(ctx, &kvpb.GetRequest{Key: []byte("a")}); err != nil || g.Found {
		t.Fatalf("a after the refusals: %v, %v; want nothing", g, err)
	}
}
