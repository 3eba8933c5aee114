package kv

import (
	"encoding/binary"
	"errors"
	"math"
	"time"
)

// TTLLen is the size of the TTL before an expiring version's value.
const TTLLen = 8

// MaxTTL is the longest time to live a version can carry.
const MaxTTL = time.Duration(math.MaxInt64)

// ErrCorruptExpiring reports an expiring version's value too short to hold
// its TTL.
var ErrCorruptExpiring = errors.New("kv: expiring value shorter than its time to live")

// ExpiringValue is the stored value of a KindSetExpiring version: ttl
// (positive; big-endian nanoseconds) then value.
func ExpiringValue(ttl time.Duration, value []byte) []byte {
	dst := make([]byte, 0, TTLLen+len(value))
	dst = binary.BigEndian.AppendUint64(dst, uint64(ttl))
	return append(dst, value...)
}

// Expiry is the timestamp at which a version of kind with timestamp ts and
// stored value v stops being read: ts + its TTL, or false for a version
// that never expires (or a corrupt one, which Read never returns).
func Expiry(kind Kind, ts uint64, v []byte) (uint64, bool) {
	if kind != KindSetExpiring || len(v) < TTLLen {
		return 0, false
	}
	ttl := binary.BigEndian.Uint64(v)
	if ts > math.MaxUint64-ttl {
		return math.MaxUint64, true
	}
	return ts + ttl, true
}

// Read is what a version (kind, timestamp ts, stored value v) reads as at
// timestamp at: the user's value and true, or false for a tombstone or a
// value expired at or before at. A corrupt expiring value reads as absent:
// the write path never makes one (ValidExpiring).
func Read(kind Kind, ts uint64, v []byte, at uint64) ([]byte, bool) {
	switch kind {
	case KindSet:
		return v, true
	case KindSetExpiring:
		if len(v) < TTLLen {
			return nil, false
		}
		if exp, _ := Expiry(kind, ts, v); at >= exp {
			return nil, false
		}
		return v[TTLLen:], true
	}
	return nil, false
}

// ValidExpiring reports whether v is an expiring version's stored value.
func ValidExpiring(v []byte) error {
	if len(v) < TTLLen {
		return ErrCorruptExpiring
	}
	return nil
}
