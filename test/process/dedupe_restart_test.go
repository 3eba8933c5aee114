package process

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc/metadata"

	kvpb "github.com/bellows-kv/bellows/proto/bellows/kv/v1"
	"github.com/bellows-kv/bellows/storage-engine/server"
)

// An idempotency key outlives a crash of the store that applied its write:
// a keyed one-shot transaction commit and a keyed Put, acknowledged and
// then retried after the store was SIGKILLed and restarted, are answered
// with their first commit timestamps, not applied again (the commit would
// otherwise meet its own write and abort, and a client running it again
// would apply it twice). Once with the keys' writes still in the WAL the
// restart replays, once with them flushed before the kill.
func TestKeyedWritesRetriedAfterACrashKeepTheirCommitTS(t *testing.T) {
	for _, flushFirst := range []bool{false, true} {
		name := "replayed from the WAL"
		if flushFirst {
			name = "flushed before the crash"
		}
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			bucket, walDir := "file://"+filepath.Join(dir, "bucket"), filepath.Join(dir, "wal")
			s := startStore(t, bucket, walDir, "Disabled")
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			keyed := func(id string) context.Context {
				return metadata.AppendToOutgoingContext(ctx, server.RequestIDHeader, id)
			}
			begin, err := s.kv().BeginTxn(ctx, &kvpb.BeginTxnRequest{})
			if err != nil {
				t.Fatal(err)
			}
			commit := &kvpb.CommitTxnRequest{StartTs: begin.StartTs, Mutations: []*kvpb.Mutation{
				{Op: kvpb.Mutation_OP_PUT, Key: []byte("txn-a"), Value: []byte("1")},
				{Op: kvpb.Mutation_OP_PUT, Key: []byte("txn-b"), Value: []byte("2")}}}
			put := &kvpb.PutRequest{Key: []byte("put"), Value: []byte("once")}
			first, err := s.kv().CommitTxn(keyed("commit-1"), commit)
			if err != nil {
				t.Fatal(err)
			}
			firstPut, err := s.kv().Put(keyed("put-1"), put)
			if err != nil {
				t.Fatal(err)
			}
			if flushFirst {
				if _, err := s.admin().Flush(ctx, &kvpb.FlushRequest{}); err != nil {
					t.Fatal(err)
				}
			}
			s.kill()
			s = startStore(t, bucket, walDir, "Disabled")
			again, err := s.kv().CommitTxn(keyed("commit-1"), commit)
			if err != nil || again.CommitTs != first.CommitTs {
				t.Fatalf("the commit retried after the crash: %v, %v; want the first commit at %d", again, err, first.CommitTs)
			}
			againPut, err := s.kv().Put(keyed("put-1"), put)
			if err != nil || againPut.CommitTs != firstPut.CommitTs {
				t.Fatalf("the put retried after the crash: %v, %v; want the first commit at %d", againPut, err, firstPut.CommitTs)
			}
			// A new request with a used key is still refused.
			if _, err := s.kv().Put(keyed("put-1"), &kvpb.PutRequest{Key: []byte("put"), Value: []byte("other")}); err == nil {
				t.Fatal("a different put under a used key was accepted after the crash")
			}
		})
	}
}
