package server

import (
	"context"
	"testing"
	"time"

	kvpb "github.com/bellows-kv/bellows/proto/bellows/kv/v1"
)

// storeSplitAtM is a store of two regions split at "m", and its KV API.
func storeSplitAtM(t *testing.T) (*Store, *KV) {
	c := newMapCluster(t)
	c.splitKeys = []string{"m"}
	s := c.open(t, 0)
	return s, NewKV(s, nil, nil)
}

// A cross-region commit that fails after its primary's prewrite rolls the
// primary back even when the primary's region split in between: the
// rollback follows the primary key to the successor region (from the
// background: the split waits for the failing request to end). Left in the
// successor, the primary lock would hold its key for the whole lock TTL
// (10 s), since no outcome says the transaction will never commit, and
// every transaction on that key would wait or give up meanwhile.
func TestACrossRegionRollbackFollowsItsPrimaryThroughASplit(t *testing.T) {
	ctx := context.Background()
	s, kv := storeSplitAtM(t)

	// A younger transaction still being committed holds "x" (region-001),
	// so the commit below waits at its secondary's prewrite.
	start := s.Clock().Now()
	blocker := s.Clock().Now()
	if _, err := kv.Prewrite(ctx, &kvpb.PrewriteRequest{StartTs: blocker, Primary: []byte("x"), TtlMs: 60_000,
		Mutations: []*kvpb.Mutation{{Op: kvpb.Mutation_OP_PUT, Key: []byte("x"), Value: []byte("blocker")}}}); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if _, err := kv.ResolveLocks(ctx, &kvpb.ResolveLocksRequest{StartTs: blocker, Keys: [][]byte{[]byte("x")}, Primary: true}); err != nil {
			t.Error(err)
		}
	}()

	commitCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	committed := make(chan error, 1)
	go func() {
		_, err := kv.CommitTxn(commitCtx, &kvpb.CommitTxnRequest{StartTs: start, Mutations: []*kvpb.Mutation{
			{Op: kvpb.Mutation_OP_PUT, Key: []byte("h"), Value: []byte("v")}, {Op: kvpb.Mutation_OP_PUT, Key: []byte("x"), Value: []byte("v")}}})
		committed <- err
	}()
	status := func() *kvpb.CheckTxnStatusResponse {
		st, err := kv.CheckTxnStatus(ctx, &kvpb.CheckTxnStatusRequest{Primary: []byte("h"), StartTs: start})
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	waitUntil(t, "the primary's prewrite", func() bool { return status().LockExpiresAtUnixNs != 0 })
	expires := time.Unix(0, status().LockExpiresAtUnixNs)

	// The primary's region splits under the waiting commit: "h" moves to
	// the successor [g, m).
	if _, err := s.SplitAt(ctx, "region-000", []byte("g")); err != nil {
		t.Fatal(err)
	}
	cancel()
	if err := <-committed; err == nil {
		t.Fatal("the commit succeeded while its secondary was locked")
	}
	// Rolled back well before the lock would expire (a lock past its TTL
	// reads as rolled back whatever the coordinator did).
	waitUntilBefore(t, "the failed commit's primary rolled back 5 s before its lock expires", expires.Add(-5*time.Second),
		func() bool { return status().RolledBack })
}
