package client

import (
	"context"
	"errors"

	kvpb "github.com/bellows-kv/bellows/proto/bellows/kv/v1"
)

// Condition is what a key must hold for CompareAndSet or CompareAndDelete
// to write it: IfAbsent, IfValue or IfVersion.
type Condition struct {
	pb *kvpb.Condition
}

// IfAbsent holds when the key has no live value (never written, or
// deleted).
func IfAbsent() Condition {
	return Condition{&kvpb.Condition{Expect: &kvpb.Condition_Absent{Absent: true}}}
}

// IfValue holds when the key's live value equals value (an empty value is
// a value: it does not match an absent key).
func IfValue(value []byte) Condition {
	return Condition{&kvpb.Condition{Expect: &kvpb.Condition_Value{Value: value}}}
}

// IfVersion holds when the key's newest version is live and was committed
// at version: GetVersion's, a WriteResult's CommitTS, or a failed
// CASResult's Version.
func IfVersion(version uint64) Condition {
	return Condition{&kvpb.Condition{Expect: &kvpb.Condition_Version{Version: version}}}
}

// GetVersion reads key's newest value and its version, the commit
// timestamp of the write that made it (IfVersion's argument); found is
// false when the key has no value.
func (c *Client) GetVersion(ctx context.Context, key []byte) (value []byte, version uint64, found bool, err error) {
	resp, err := c.getResponse(ctx, &kvpb.GetRequest{Key: key})
	if err != nil {
		return nil, 0, false, err
	}
	return resp.Value, resp.Version, resp.Found, nil
}

// ErrNoCondition is returned by CompareAndSet and CompareAndDelete given a
// zero Condition, before anything is sent.
var ErrNoCondition = errors.New("bellows client: compare-and-set without a condition (use IfAbsent, IfValue or IfVersion; an unconditional write is a Put)")

// CASResult is what a compare-and-set did.
type CASResult struct {
	// Succeeded: the condition held and the write committed (WriteResult).
	Succeeded bool
	WriteResult
	// When it did not: what the key held when the condition was judged.
	// Version is its newest version's commit timestamp (a tombstone's
	// when not Found; 0 when none is retained).
	Found   bool
	Value   []byte
	Version uint64
}

// CompareAndSet writes value under key only if the key holds what cond
// expects, in one round trip; linearizable per key, also across region
// moves, splits and failovers. When the condition does not hold nothing is
// written and the result says what the key holds. A retry after a lost
// answer carries the same idempotency key, so a write that committed is
// not applied twice: the retry answers it succeeded.
func (c *Client) CompareAndSet(ctx context.Context, key []byte, cond Condition, value []byte, opts ...WriteOption) (CASResult, error) {
	if err := checkWrite(key, value); err != nil {
		return CASResult{}, err
	}
	ttl, err := ttlOf(opts)
	if err != nil {
		return CASResult{}, err
	}
	return c.compareAndSet(ctx, &kvpb.CompareAndSetRequest{Key: key, Condition: cond.pb, Value: value, TtlMs: ttlMs(ttl)})
}

// CompareAndDelete deletes key only if it holds what cond expects; as
// CompareAndSet otherwise.
func (c *Client) CompareAndDelete(ctx context.Context, key []byte, cond Condition) (CASResult, error) {
	if err := checkKey(key); err != nil {
		return CASResult{}, err
	}
	return c.compareAndSet(ctx, &kvpb.CompareAndSetRequest{Key: key, Condition: cond.pb, Delete: true})
}

func (c *Client) compareAndSet(ctx context.Context, req *kvpb.CompareAndSetRequest) (CASResult, error) {
	if req.Condition == nil {
		return CASResult{}, ErrNoCondition
	}
	resp, err := do(withRequestID(ctx), c, req.Key, func(ctx context.Context, kv kvpb.KVClient) (*kvpb.CompareAndSetResponse, error) {
		return kv.CompareAndSet(ctx, req)
	})
	if err != nil {
		return CASResult{}, err
	}
	return CASResult{
		Succeeded:   resp.Succeeded,
		WriteResult: WriteResult{Region: resp.Region, CommitTS: resp.CommitTs},
		Found:       resp.Found, Value: resp.Value, Version: resp.Version,
	}, nil
}
