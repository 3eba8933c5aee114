package kv

import (
	"bytes"
	"math"
	"testing"
	"time"
)

// An expiring version reads as its value strictly before ts + TTL and as
// absent from then on; a plain value never expires; a tombstone never reads.
func TestReadJudgesExpiryAtTheReadTimestamp(t *testing.T) {
	v := ExpiringValue(10*time.Nanosecond, []byte("val"))
	for _, tc := range []struct {
		kind Kind
		ts   uint64
		v    []byte
		at   uint64
		want []byte
		live bool
	}{
		{KindSetExpiring, 100, v, 100, []byte("val"), true},
		{KindSetExpiring, 100, v, 109, []byte("val"), true},
		{KindSetExpiring, 100, v, 110, nil, false},
		{KindSetExpiring, 100, v, MaxTimestamp, nil, false},
		{KindSetExpiring, math.MaxUint64 - 3, v, math.MaxUint64 - 1, []byte("val"), true},
		{KindSetExpiring, 100, []byte{1, 2}, 100, nil, false},
		{KindSet, 100, []byte("plain"), MaxTimestamp, []byte("plain"), true},
		{KindDelete, 100, nil, 100, nil, false},
	} {
		got, live := Read(tc.kind, tc.ts, tc.v, tc.at)
		if live != tc.live || !bytes.Equal(got, tc.want) {
			t.Errorf("Read(%s, %d, %x, %d) = %q, %t; want %q, %t", tc.kind, tc.ts, tc.v, tc.at, got, live, tc.want, tc.live)
		}
	}
	if exp, ok := Expiry(KindSetExpiring, 100, v); !ok || exp != 110 {
		t.Errorf("Expiry = %d, %t; want 110", exp, ok)
	}
	if _, ok := Expiry(KindSet, 100, []byte("12345678")); ok {
		t.Error("a plain value has an expiry")
	}
}

// A search key sorts before every version at its timestamp, whatever its
// kind, so a seek finds an expiring version at exactly the read timestamp.
func TestSearchKeySortsBeforeEveryKindAtItsTimestamp(t *testing.T) {
	for _, k := range []Kind{KindDelete, KindSet, KindSetExpiring} {
		if c := Compare(MakeSearchKey([]byte("k"), 5), InternalKey{UserKey: []byte("k"), TS: 5, Kind: k}); c > 0 {
			t.Errorf("search key after the %s version at its timestamp", k)
		}
	}
}
