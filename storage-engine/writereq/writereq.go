// Package writereq turns the KV API's writes (puts, mutations, their times
// to live) into engine batches: the plain write path (package server) and
// the transaction path (package txn) share it, so both take and refuse the
// same requests with the same errors.
package writereq

import (
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	kvpb "github.com/bellows-kv/bellows/proto/bellows/kv/v1"
	"github.com/bellows-kv/bellows/storage-engine/kv"
	"github.com/bellows-kv/bellows/storage-engine/region"
)

// MaxTTLMs is the longest time to live a request may give: what a
// timestamp (nanoseconds) can add.
const MaxTTLMs = uint64(kv.MaxTTL / time.Millisecond)

// TTL is a request's time to live (ttl_ms; 0: none), or INVALID_ARGUMENT
// naming what (what) carries one too long.
func TTL(what string, ms uint64) (time.Duration, error) {
	if ms > MaxTTLMs {
		return 0, status.Errorf(codes.InvalidArgument, "%s: ttl_ms %d is longer than the longest time to live, %d ms (292 years)", what, ms, MaxTTLMs)
	}
	return time.Duration(ms) * time.Millisecond, nil
}

// Put adds a put of value under key to b, expiring after ttl when it is
// not 0.
func Put(b *region.Batch, key, value []byte, ttl time.Duration) *region.Batch {
	if ttl > 0 {
		return b.PutExpiring(key, value, ttl)
	}
	return b.Put(key, value)
}

// Batch is the engine batch of mutations, or INVALID_ARGUMENT naming the
// first mutation that is not a put or delete, or whose ttl_ms is invalid.
func Batch(muts []*kvpb.Mutation) (*region.Batch, error) {
	size := 0
	for _, m := range muts {
		size += len(m.Key) + len(m.Value)
	}
	b := new(region.Batch).Grow(len(muts), size)
	for i, m := range muts {
		ttl, err := TTL(fmt.Sprintf("mutation %d", i), m.TtlMs)
		if err != nil {
			return nil, err
		}
		switch {
		case m.Op == kvpb.Mutation_OP_PUT:
			Put(b, m.Key, m.Value, ttl)
		case m.Op == kvpb.Mutation_OP_DELETE && ttl != 0:
			return nil, status.Errorf(codes.InvalidArgument, "mutation %d: a delete takes no ttl_ms", i)
		case m.Op == kvpb.Mutation_OP_DELETE:
			b.Delete(m.Key)
		default:
			return nil, status.Errorf(codes.InvalidArgument, "mutation %d: op %v is neither OP_PUT nor OP_DELETE", i, m.Op)
		}
	}
	return b, nil
}
