package kv

import (
	"math/rand/v2"
	"testing"
)

func TestEncodedOrderMatchesCompare(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 1))
	keys := []string{"", "a", "ab", "b", "a\x00", "\xff"}
	gen := func() InternalKey {
		return InternalKey{UserKey: []byte(keys[rng.IntN(len(keys))]), TS: uint64(rng.IntN(4)), Kind: Kind(rng.IntN(3))}
	}
	for i := 0; i < 5000; i++ {
		a, b := gen(), gen()
		ea, eb := a.Append(nil), b.Append(nil)
		if got, want := CompareEncoded(ea, eb), Compare(a, b); got != want {
			t.Fatalf("CompareEncoded(%v,%v)=%d, Compare=%d", a, b, got, want)
		}
		d, err := Decode(ea)
		if err != nil || Compare(d, a) != 0 {
			t.Fatalf("Decode(Append(%v)) = %v, %v", a, d, err)
		}
	}
}
