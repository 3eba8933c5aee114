// Package kv defines the engine's internal key: a user key, the commit
// timestamp of the version, and whether the version is a value or a tombstone.
//
// Internal keys order by user key ascending, then timestamp descending, so a
// seek to (k, ts) lands on the newest version of k visible at ts.
package kv

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
)

// Kind says whether a version holds a value or deletes the key.
type Kind uint8

const (
	// KindDelete is a tombstone. It sorts after KindSet at equal timestamps,
	// which never happens within one region: timestamps are unique.
	KindDelete Kind = 0
	KindSet    Kind = 1
	// KindSetExpiring is a value with a time to live: its stored value is
	// the TTL (ExpiringValue) before the user's value, and it reads as no
	// version at all at timestamps at or after its expiry, TS + TTL
	// (Read). Timestamps are nanoseconds since the epoch, so the TTL is
	// nanoseconds too.
	KindSetExpiring Kind = 2
	// KindMax is the largest kind: a search key carries it so that it
	// sorts before every version at its timestamp.
	KindMax = KindSetExpiring
)

func (k Kind) String() string {
	switch k {
	case KindSet:
		return "SET"
	case KindDelete:
		return "DEL"
	case KindSetExpiring:
		return "SETX"
	}
	return fmt.Sprintf("KIND(%d)", uint8(k))
}

// MaxTimestamp reads the newest version of every key.
const MaxTimestamp = ^uint64(0)

// TrailerLen is the size of the encoded (timestamp, kind) suffix.
const TrailerLen = 9

// InternalKey is one version of a user key.
type InternalKey struct {
	UserKey []byte
	TS      uint64
	Kind    Kind
}

// MakeSearchKey returns the smallest internal key for userKey visible at ts:
// SeekGE with it finds the newest version with timestamp ≤ ts.
func MakeSearchKey(userKey []byte, ts uint64) InternalKey {
	return InternalKey{UserKey: userKey, TS: ts, Kind: KindMax}
}

// Compare orders internal keys: user key ascending, timestamp descending,
// kind descending.
func Compare(a, b InternalKey) int {
	if c := bytes.Compare(a.UserKey, b.UserKey); c != 0 {
		return c
	}
	switch {
	case a.TS > b.TS:
		return -1
	case a.TS < b.TS:
		return 1
	case a.Kind > b.Kind:
		return -1
	case a.Kind < b.Kind:
		return 1
	}
	return 0
}

// Append encodes k as user key followed by the trailer: the timestamp
// and the kind, both inverted so that byte order of the trailer matches
// Compare (timestamp and kind descending).
func (k InternalKey) Append(dst []byte) []byte {
	dst = append(dst, k.UserKey...)
	dst = binary.BigEndian.AppendUint64(dst, ^k.TS)
	return append(dst, ^byte(k.Kind))
}

// EncodedLen is the length Append adds.
func (k InternalKey) EncodedLen() int { return len(k.UserKey) + TrailerLen }

// ErrCorruptKey reports an encoded key too short to hold a trailer.
var ErrCorruptKey = errors.New("kv: encoded internal key shorter than its trailer")

// Decode splits an encoded internal key. UserKey aliases b.
func Decode(b []byte) (InternalKey, error) {
	if len(b) < TrailerLen {
		return InternalKey{}, ErrCorruptKey
	}
	n := len(b) - TrailerLen
	return InternalKey{
		UserKey: b[:n:n],
		TS:      ^binary.BigEndian.Uint64(b[n:]),
		Kind:    Kind(^b[n+8]),
	}, nil
}

// CompareEncoded compares two encoded internal keys without decoding them
// into structs.
func CompareEncoded(a, b []byte) int {
	na, nb := len(a)-TrailerLen, len(b)-TrailerLen
	if c := bytes.Compare(a[:na], b[:nb]); c != 0 {
		return c
	}
	return bytes.Compare(a[na:], b[nb:])
}

// UserKey returns the user key of an encoded internal key.
func UserKey(encoded []byte) []byte { return encoded[:len(encoded)-TrailerLen] }

func (k InternalKey) String() string {
	return fmt.Sprintf("%q@%d#%s", k.UserKey, k.TS, k.Kind)
}

// Clone returns a copy whose UserKey does not alias k's.
func (k InternalKey) Clone() InternalKey {
	k.UserKey = bytes.Clone(k.UserKey)
	if k.UserKey == nil {
		k.UserKey = []byte{}
	}
	return k
}
