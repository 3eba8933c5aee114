package server

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

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
	// The coordinator routed by a map the region has since changed under
	// (a split): the transaction may run again (ABORTED), it is no caller's
	// mistake.
	if _, err := p.a.ValidateReads(ctx, &kvpb.ValidateReadsRequest{StartTs: start, CommitTs: start + 1, Primary: []byte("k3"), Reads: scan}); status.Code(err) != codes.Aborted {
		t.Fatalf("a validation whose span crosses a region's end: %v; want ABORTED", err)
	}
	if _, err := p.a.ValidateReads(ctx, &kvpb.ValidateReadsRequest{StartTs: start, CommitTs: start + 1, Reads: []*kvpb.KeySpan{oneKey("k")}}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("a validation without the transaction's primary key: %v; want INVALID_ARGUMENT", err)
	}
}

// A value a serializable transaction read live at its start and that
// expires before its commit refuses the commit (READ_CONFLICT, naming the
// expiry): a read at the commit would find nothing. Also when the
// transaction writes the key (its write conflict check sees no new
// version) and in the other store's region. Snapshot isolation commits.
func TestSerializableRefusesAValueThatExpiresBeforeItsCommit(t *testing.T) {
	ctx := context.Background()
	p := newPair(t, route.Options{})
	for _, key := range []string{"x", "y"} { // x in region-000 (store a), y in region-001 (store b)
		for _, writesIt := range []bool{false, true} {
			for _, serializable := range []bool{false, true} {
				put1 := &kvpb.PutRequest{Key: []byte(key), Value: []byte("on"), TtlMs: 1}
				resp, err := p.a.Put(ctx, put1)
				if err != nil {
					t.Fatal(err)
				}
				// Read at the put: live there, expired 1 ms later.
				start, expiry := resp.CommitTs, resp.CommitTs+uint64(time.Millisecond)
				for p.a.store.Clock().Now() <= expiry || p.b.store.Clock().Now() <= expiry {
					runtime.Gosched()
				}
				w := put("a", "elsewhere")
				if writesIt {
					w = put(key, "again")
				}
				_, err = p.a.CommitTxn(ctx, &kvpb.CommitTxnRequest{StartTs: start, Serializable: serializable, Reads: []*kvpb.KeySpan{oneKey(key)},
					Mutations: []*kvpb.Mutation{w}})
				name := fmt.Sprintf("key %s, written %t, serializable %t", key, writesIt, serializable)
				switch {
				case !serializable && err != nil:
					t.Fatalf("%s: %v", name, err)
				case serializable && (status.Code(err) != codes.Aborted || !hasReason(err, contract.ReadConflictReason) || !strings.Contains(err.Error(), "expires")):
					t.Fatalf("%s: %v; want ABORTED READ_CONFLICT naming the expiry", name, err)
				}
			}
		}
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
