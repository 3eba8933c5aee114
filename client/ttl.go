package client

import (
	"errors"
	"fmt"
	"time"

	kvpb "github.com/bellows-kv/bellows/proto/bellows/kv/v1"
)

// WriteOption changes how a put writes its value (Put, CompareAndSet,
// Txn.Put).
type WriteOption func(*writeOptions)

type writeOptions struct {
	ttl time.Duration
}

// WithTTL makes the value expire ttl after its commit timestamp (rounded
// up to a millisecond): a read at or after that time, by the store's clock
// for a read of the latest, finds no value, as if it had been deleted then
// (docs/expiry.md). ttl must be positive (ErrInvalidTTL).
func WithTTL(ttl time.Duration) WriteOption {
	return func(o *writeOptions) { o.ttl = ttl }
}

// ErrInvalidTTL is a time to live that is not positive, or one given to a
// delete.
var ErrInvalidTTL = errors.New("bellows client: invalid time to live")

// ttlMs is the request field of a time to live (0: none).
func ttlMs(ttl time.Duration) uint64 {
	if ttl <= 0 {
		return 0
	}
	ms := uint64(ttl / time.Millisecond)
	if ttl%time.Millisecond != 0 {
		ms++ // up, without overflowing near the longest duration
	}
	return ms
}

// ttlOf applies opts and checks the time to live they give.
func ttlOf(opts []WriteOption) (time.Duration, error) {
	var o writeOptions
	for _, f := range opts {
		f(&o)
	}
	return o.ttl, checkTTL(o.ttl, false, len(opts) > 0)
}

// checkTTL refuses a time to live that is not positive when one was
// given, or one on a delete.
func checkTTL(ttl time.Duration, isDelete, given bool) error {
	switch {
	case isDelete && ttl != 0:
		return fmt.Errorf("%w: a delete takes no time to live (%v)", ErrInvalidTTL, ttl)
	case ttl < 0 || given && ttl == 0:
		return fmt.Errorf("%w: %v; give a positive duration", ErrInvalidTTL, ttl)
	}
	return nil
}

// mutationPB is m as the stores take it.
func mutationPB(m Mutation) *kvpb.Mutation {
	op := kvpb.Mutation_OP_PUT
	if m.Delete {
		op = kvpb.Mutation_OP_DELETE
	}
	return &kvpb.Mutation{Op: op, Key: m.Key, Value: m.Value, TtlMs: ttlMs(m.TTL)}
}
