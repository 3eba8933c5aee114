package region

import (
	"bytes"
	"context"
	"errors"
	"fmt"
)

// Conditional writes (compare-and-set).
//
// A batch with a Condition (Batch.If) commits only if the condition's key
// holds what the condition expects. The key must be one of the batch's:
// Apply judges the condition under the batch's latches, after its lock
// check, so no write of the key (a Put, a batch, a transaction's commit or
// a lock's resolution, which all latch their keys) commits between the
// judgement and the batch's commit. Under the latch every version of the
// key is visible, since a write releases its latches only after its
// commit is (visibility.done): a read at the visible timestamp sees the
// key's newest version, and so does every read that follows the answer.

// ErrConditionFailed matches every *ConditionFailedError.
var ErrConditionFailed = errors.New("region: the write's condition did not hold")

// Condition is what Key must hold for a conditional batch to commit: set
// exactly one of Absent, Value (non-nil) and Version.
type Condition struct {
	Key []byte
	// Absent: Key has no live value.
	Absent bool
	// Value: Key's live value equals Value.
	Value []byte
	// Version: Key's newest version is live and was committed at Version.
	Version uint64
}

func (c *Condition) validate(b *Batch) error {
	set := 0
	for _, on := range []bool{c.Absent, c.Value != nil, c.Version != 0} {
		if on {
			set++
		}
	}
	if set != 1 {
		return fmt.Errorf("%w: a condition sets exactly one of absent, value and version; this one sets %d", ErrInvalidCondition, set)
	}
	for _, o := range b.ops {
		if bytes.Equal(o.key, c.Key) {
			return nil
		}
	}
	return fmt.Errorf("%w: the condition's key %q is not written by the batch", ErrInvalidCondition, c.Key)
}

// ErrInvalidCondition: a condition that is not one of the three kinds, or
// on a key its batch does not write.
var ErrInvalidCondition = errors.New("region: invalid condition")

// ConditionFailedError is a conditional batch that committed nothing
// because its condition did not hold: what Key held when it was judged.
type ConditionFailedError struct {
	Key   []byte
	Found bool
	Value []byte
	// Version is the commit timestamp of Key's newest version (a
	// tombstone's when not Found); 0 when none is retained.
	Version uint64
}

func (e *ConditionFailedError) Error() string {
	if !e.Found {
		return fmt.Sprintf("region: the condition on key %q did not hold: the key is absent (newest version %d)", e.Key, e.Version)
	}
	return fmt.Sprintf("region: the condition on key %q did not hold: it holds a value of %d bytes, version %d", e.Key, len(e.Value), e.Version)
}

func (e *ConditionFailedError) Is(target error) bool { return target == ErrConditionFailed }

// judge returns nil if c holds in rs, the read state of a region taken
// under c.Key's latch, else a *ConditionFailedError.
func (c *Condition) judge(ctx context.Context, rs *readState) error {
	val, kind, version, ok, err := rs.get(ctx, c.Key)
	if err != nil {
		return err
	}
	found := false
	if ok {
		val, found = rs.read(kind, version, val)
	}
	var holds bool
	switch {
	case c.Absent:
		holds = !found
	case c.Value != nil:
		holds = found && bytes.Equal(val, c.Value)
	default:
		holds = found && version == c.Version
	}
	if holds {
		return nil
	}
	failed := &ConditionFailedError{Key: bytes.Clone(c.Key), Found: found, Version: version}
	if found {
		failed.Value = bytes.Clone(val)
	}
	return failed
}
