package server

import (
	"context"
	"testing"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/bellows-kv/bellows/internal/contract"
	kvpb "github.com/bellows-kv/bellows/proto/bellows/kv/v1"
	"github.com/bellows-kv/bellows/storage-engine/server/route"
)

func oneKey(k string) *kvpb.KeySpan {
	return &kvpb.KeySpan{Start: []byte(k), End: append([]byte(k), 0)}
}

// Write skew across two stores' regions: two transactions from one
// snapshot each read x (region-000, the first store) and y (region-001,
// the second) and write the other one. Snapshot isolation commits both;
// serializable commits the first and refuses the second with ABORTED
// READ_CONFLICT naming the key it read and the commit that overwrote it.
func TestSerializableRefusesWriteSkewAcrossStores(t *testing.T) {
	for _, serializable := range []bool{false, true} {
		ctx := context.Background()
		p := newPair(t, route.Options{})
		for _, k := range []string{"x", "y"} {
			if _, err := p.a.Put(ctx, &kvpb.PutRequest{Key: []byte(k), Value: []byte("on")}); err != nil {
				t.Fatal(err)
			}
		}
		start := p.a.store.Clock().Now()
		reads := []*kvpb.KeySpan{oneKey("x"), oneKey("y")}
		first, err := p.a.CommitTxn(ctx, &kvpb.CommitTxnRequest{StartTs: start, Serializable: serializable, Reads: reads,
			Mutations: []*kvpb.Mutation{put("x", "off")}})
		if err != nil {
			t.Fatalf("serializable %t: the first: %v", serializable, err)
		}
		_, err = p.a.CommitTxn(ctx, &kvpb.CommitTxnRequest{StartTs: start, Serializable: serializable, Reads: reads,
			Mutations: []*kvpb.Mutation{put("y", "off")}})
		switch {
		case !serializable && err != nil:
			t.Fatalf("snapshot isolation refused the write skew: %v", err)
		case serializable && (status.Code(err) != codes.Aborted || !hasReason(err, contract.ReadConflictReason)):
			t.Fatalf("serializable: the second commit: %v; want ABORTED READ_CONFLICT", err)
		}
		if serializable {
			if got := p.b.get(t, "y", first.CommitTs+1<<40); got != "on" {
				t.Fatalf("y = %q after the refused commit, want on", got)
			}
		}
	}
}

// A range a serializable transaction scanned refuses its commit once
// another transaction inserted a key into it (a phantom), in either
// store's region; a write of its own, and a write outside its reads, do
// not.
func TestSerializableRefusesPhantomsAndPassesItsOwnWrites(t *testing.T) {
	ctx := context.Background()
	p := newPair(t, route.Options{})
	start := p.a.store.Clock().Now()
	scan := []*kvpb.KeySpan{{Start: []byte("k"), End: []byte("q")}} // over both regions ("m" splits them)
	if _, err := p.a.CommitTxn(ctx, &kvpb.CommitTxnRequest{StartTs: start, Serializable: true, Reads: scan,
		Mutations: []*kvpb.Mutation{put("k1", "mine"), put("a", "outside")}}); err != nil {
		t.Fatalf("a transaction that read what it writes: %v", err)
	}
	start = p.a.store.Clock().Now()
	if _, err := p.a.Put(ctx, &kvpb.PutRequest{Key: []byte("zz"), Value: []byte("outside the range")}); err != nil {
		t.Fatal(err)
	}
	if _, err := p.a.CommitTxn(ctx, &kvpb.CommitTxnRequest{StartTs: start, Serializable: true, Reads: scan,
		Mutations: []*kvpb.Mutation{put("k2", "mine")}}); err != nil {
		t.Fatalf("a write outside the scanned range refused the commit: %v", err)
	}
	start = p.a.store.Clock().Now()
	if _, err := p.a.Put(ctx, &kvpb.PutRequest{Key: []byte("p"), Value: []byte("phantom")}); err != nil {
		t.Fatal(err)
	}
	_, err := p.a.CommitTxn(ctx, &kvpb.CommitTxnRequest{StartTs: start, Serializable: true, Reads: scan,
		Mutations: []*kvpb.Mutation{put("k3", "mine")}})
	if status.Code(err) != codes.Aborted || !hasReason(err, contract.ReadConflictReason) {
		t.Fatalf("a commit over a phantom in region-001: %v; want ABORTED READ_CONFLICT", err)
	}
	if _, err := p.a.ValidateReads(ctx, &kvpb.ValidateReadsRequest{StartTs: start, CommitTs: start + 1, Reads: scan}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("a validation whose span crosses a region's end: %v; want INVALID_ARGUMENT", err)
	}
}

// hasReason reports whether err is a status with an ErrorInfo of reason.
func hasReason(err error, reason string) bool {
	for _, d := range status.Convert(err).Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.Reason == reason {
			return true
		}
	}
	return false
}
