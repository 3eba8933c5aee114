package server

import (
	"context"
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	kvpb "github.com/bellows-kv/bellows/proto/bellows/kv/v1"
	"github.com/bellows-kv/bellows/storage-engine/region"
	"github.com/bellows-kv/bellows/storage-engine/writereq"
)

// CompareAndSet implements kvpb.KVServer: a Put or Delete that the region
// commits only if its condition holds (region.Condition). It is a write
// like a Put in every other way: routed, forwarded, deduplicated by its
// idempotency key, and retried past a cross-region transaction's lock.
func (s *KV) CompareAndSet(ctx context.Context, req *kvpb.CompareAndSetRequest) (*kvpb.CompareAndSetResponse, error) {
	cond, err := conditionOf(req)
	if err != nil {
		return nil, err
	}
	ttl, err := writereq.TTL("compare-and-set", req.TtlMs)
	if err != nil {
		return nil, err
	}
	if req.Delete && ttl != 0 {
		return nil, status.Error(codes.InvalidArgument, "compare-and-set: a delete takes no ttl_ms")
	}
	return writeKey(s, ctx, "compare-and-set", req.Key, req,
		func(ctx context.Context, c kvpb.KVClient) (*kvpb.CompareAndSetResponse, error) {
			return c.CompareAndSet(ctx, req)
		},
		func() *region.Batch {
			b := new(region.Batch)
			if req.Delete {
				b.Delete(req.Key)
			} else {
				writereq.Put(b, req.Key, req.Value, ttl)
			}
			return b.If(cond)
		},
		func(a *Assignment, ts uint64, err error) (*kvpb.CompareAndSetResponse, error) {
			var failed *region.ConditionFailedError
			if errors.As(err, &failed) {
				return &kvpb.CompareAndSetResponse{Region: a.Name(), Found: failed.Found, Value: failed.Value, Version: failed.Version}, nil
			}
			if err != nil {
				return nil, regionErr(a, err)
			}
			return &kvpb.CompareAndSetResponse{Succeeded: true, CommitTs: ts, Region: a.Name()}, nil
		})
}

// conditionOf is the request's condition, or INVALID_ARGUMENT naming what
// is wrong with the request.
func conditionOf(req *kvpb.CompareAndSetRequest) (region.Condition, error) {
	c := region.Condition{Key: req.Key}
	if req.Delete && len(req.Value) > 0 {
		return c, status.Error(codes.InvalidArgument, "compare-and-set: a delete takes no value")
	}
	switch e := req.GetCondition().GetExpect().(type) {
	case *kvpb.Condition_Absent:
		if !e.Absent {
			return c, status.Error(codes.InvalidArgument, "compare-and-set: condition absent must be true (to expect a live value, give value or version)")
		}
		c.Absent = true
	case *kvpb.Condition_Value:
		c.Value = append([]byte{}, e.Value...) // non-nil: an expected empty value
	case *kvpb.Condition_Version:
		if e.Version == 0 {
			return c, status.Error(codes.InvalidArgument, "compare-and-set: condition version must be a commit timestamp above 0 (to expect no value, give absent)")
		}
		c.Version = e.Version
	default:
		return c, status.Error(codes.InvalidArgument, "compare-and-set: the request has no condition (give one of value, version and absent; an unconditional write is a Put)")
	}
	return c, nil
}
