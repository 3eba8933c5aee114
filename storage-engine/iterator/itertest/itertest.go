// Package itertest checks an iterator.Iterator against the sorted list of
// what it holds: every implementation (memstore segments, SSTs, the merging
// iterator) must agree on seeks and on moves in both directions, which is
// what a reverse scan relies on.
package itertest

import (
	"bytes"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/bellows-kv/bellows/storage-engine/kv"
)

// Iterator is iterator.Iterator's positioning part (the package cannot
// import iterator: iterator's own tests use it).
type Iterator interface {
	SeekGE(key kv.InternalKey) bool
	SeekLT(key kv.InternalKey) bool
	First() bool
	Last() bool
	Next() bool
	Prev() bool
	Valid() bool
	Key() kv.InternalKey
	Value() []byte
	Err() error
}

// Entry is one version an iterator holds.
type Entry struct {
	Key   kv.InternalKey
	Value []byte
}

// Check fails t unless it (an iterator.Iterator) yields exactly want (sorted by kv.Compare) from
// First and Next, want reversed from Last and Prev, lands where want says
// on SeekGE and SeekLT at every key of want and its neighbours, and follows
// want on random walks that change direction.
func Check(t testing.TB, it Iterator, want []Entry, rng *rand.Rand) {
	t.Helper()
	var got []Entry
	for ok := it.First(); ok; ok = it.Next() {
		got = append(got, Entry{it.Key().Clone(), bytes.Clone(it.Value())})
	}
	if err := it.Err(); err != nil {
		t.Fatal(err)
	}
	if !equal(got, want) {
		t.Fatalf("forward: %d entries, want %d, or they differ", len(got), len(want))
	}
	got = got[:0]
	for ok := it.Last(); ok; ok = it.Prev() {
		got = append(got, Entry{it.Key().Clone(), bytes.Clone(it.Value())})
	}
	if err := it.Err(); err != nil {
		t.Fatal(err)
	}
	slices.Reverse(got)
	if !equal(got, want) {
		t.Fatalf("backward: %d entries, want %d, or they differ", len(got), len(want))
	}
	var seeks []kv.InternalKey
	for _, e := range want {
		k := e.Key
		seeks = append(seeks, k, kv.InternalKey{UserKey: k.UserKey, TS: k.TS + 1, Kind: k.Kind},
			kv.InternalKey{UserKey: k.UserKey, TS: k.TS - 1, Kind: k.Kind},
			kv.MakeSearchKey(k.UserKey, kv.MaxTimestamp), kv.InternalKey{UserKey: k.UserKey, Kind: kv.KindDelete},
			kv.MakeSearchKey(append(bytes.Clone(k.UserKey), 0), kv.MaxTimestamp))
	}
	seeks = append(seeks, kv.MakeSearchKey(nil, kv.MaxTimestamp), kv.MakeSearchKey([]byte("\xff\xff\xff\xff"), 0))
	if len(seeks) > 2000 {
		rng.Shuffle(len(seeks), func(i, j int) { seeks[i], seeks[j] = seeks[j], seeks[i] })
		seeks = seeks[:2000]
	}
	for _, s := range seeks {
		ge, _ := slices.BinarySearchFunc(want, s, func(e Entry, k kv.InternalKey) int { return kv.Compare(e.Key, k) })
		at(t, "SeekGE "+s.String(), it, it.SeekGE(s), want, ge)
		at(t, "SeekLT "+s.String(), it, it.SeekLT(s), want, ge-1)
	}
	for walk := 0; walk < 50 && len(want) > 0; walk++ {
		s := seeks[rng.IntN(len(seeks))]
		i, _ := slices.BinarySearchFunc(want, s, func(e Entry, k kv.InternalKey) int { return kv.Compare(e.Key, k) })
		ok := it.SeekGE(s)
		what := "SeekGE " + s.String()
		for step := 0; step < 40; step++ {
			at(t, what, it, ok, want, i)
			if !ok {
				break
			}
			if rng.IntN(2) == 0 {
				ok, i, what = it.Next(), i+1, what+", Next"
			} else {
				ok, i, what = it.Prev(), i-1, what+", Prev"
			}
		}
	}
}

func at(t testing.TB, what string, it Iterator, ok bool, want []Entry, i int) {
	t.Helper()
	if err := it.Err(); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	if i < 0 || i >= len(want) {
		if ok || it.Valid() {
			t.Fatalf("%s: at %s, want nothing", what, it.Key())
		}
		return
	}
	if !ok || !it.Valid() {
		t.Fatalf("%s: nothing, want %s", what, want[i].Key)
	}
	if kv.Compare(it.Key(), want[i].Key) != 0 || it.Key().Kind != want[i].Key.Kind || !bytes.Equal(it.Value(), want[i].Value) {
		t.Fatalf("%s: at %s, want %s", what, it.Key(), want[i].Key)
	}
}

func equal(a, b []Entry) bool {
	return slices.EqualFunc(a, b, func(x, y Entry) bool {
		return kv.Compare(x.Key, y.Key) == 0 && x.Key.Kind == y.Key.Kind && bytes.Equal(x.Value, y.Value)
	})
}
