package iterator

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/bellows-kv/bellows/storage-engine/iterator/itertest"
	"github.com/bellows-kv/bellows/storage-engine/kv"
)

// sliceIter is a test iterator over sorted keys.
type sliceIter struct {
	keys []kv.InternalKey
	i    int
	err  error // returned once the iterator reaches errAt
	at   int
}

func (s *sliceIter) SeekGE(k kv.InternalKey) bool {
	s.i, _ = slices.BinarySearchFunc(s.keys, k, kv.Compare)
	return s.Valid()
}
func (s *sliceIter) SeekLT(k kv.InternalKey) bool {
	s.i, _ = slices.BinarySearchFunc(s.keys, k, kv.Compare)
	s.i--
	return s.Valid()
}
func (s *sliceIter) First() bool { s.i = 0; return s.Valid() }
func (s *sliceIter) Last() bool  { s.i = len(s.keys) - 1; return s.Valid() }
func (s *sliceIter) Next() bool  { s.i++; return s.Valid() }
func (s *sliceIter) Prev() bool  { s.i--; return s.Valid() }
func (s *sliceIter) Valid() bool {
	return s.i >= 0 && s.i < len(s.keys) && !(s.err != nil && s.i >= s.at)
}
func (s *sliceIter) Key() kv.InternalKey { return s.keys[s.i] }
func (s *sliceIter) Value() []byte       { return s.keys[s.i].UserKey }
func (s *sliceIter) Err() error {
	if s.err != nil && s.i >= s.at {
		return s.err
	}
	return nil
}
func (s *sliceIter) Close() error { return nil }

func ik(k string, ts uint64) kv.InternalKey {
	return kv.InternalKey{UserKey: []byte(k), TS: ts, Kind: kv.KindSet}
}

func TestMergingInterleavesAndSeeks(t *testing.T) {
	a := &sliceIter{keys: []kv.InternalKey{ik("a", 5), ik("c", 1), ik("e", 9)}}
	b := &sliceIter{keys: []kv.InternalKey{ik("a", 7), ik("b", 2), ik("e", 3)}}
	m := NewMerging(a, b, Empty{})
	var got []string
	for ok := m.First(); ok; ok = m.Next() {
		got = append(got, m.Key().String())
	}
	want := []string{ik("a", 7).String(), ik("a", 5).String(), ik("b", 2).String(), ik("c", 1).String(), ik("e", 9).String(), ik("e", 3).String()}
	if !slices.Equal(got, want) {
		t.Fatalf("got %v\nwant %v", got, want)
	}
	if !m.SeekGE(ik("c", 100)) || m.Key().String() != ik("c", 1).String() {
		t.Fatalf("SeekGE landed on %v", m.Key())
	}
}

func TestMergingStopsOnChildError(t *testing.T) {
	boom := errors.New("boom")
	a := &sliceIter{keys: []kv.InternalKey{ik("a", 1), ik("b", 1), ik("c", 1)}, err: boom, at: 1}
	b := &sliceIter{keys: []kv.InternalKey{ik("a", 2), ik("z", 1)}}
	m := NewMerging(a, b)
	n := 0
	for ok := m.First(); ok; ok = m.Next() {
		n++
	}
	if !errors.Is(m.Err(), boom) {
		t.Fatalf("err = %v after %d keys, want boom", m.Err(), n)
	}
}

// The merging iterator over children with interleaved keys moves both ways
// and turns around anywhere, Bounded within its range too.
func TestMergingAndBoundedMoveBothWays(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for round := 0; round < 20; round++ {
		children := make([]*sliceIter, 1+rng.IntN(4))
		for i := range children {
			children[i] = &sliceIter{}
		}
		var all []itertest.Entry
		for ts := uint64(1); ts < uint64(1+rng.IntN(300)); ts++ {
			k := ik(fmt.Sprintf("k%02d", rng.IntN(40)), ts)
			c := children[rng.IntN(len(children))]
			c.keys = append(c.keys, k)
			all = append(all, itertest.Entry{Key: k, Value: k.UserKey})
		}
		its := make([]Iterator, len(children))
		for i, c := range children {
			slices.SortFunc(c.keys, kv.Compare)
			its[i] = c
		}
		slices.SortFunc(all, func(a, b itertest.Entry) int { return kv.Compare(a.Key, b.Key) })
		itertest.Check(t, NewMerging(its...), all, rng)

		start, end := []byte(fmt.Sprintf("k%02d", rng.IntN(40))), []byte(fmt.Sprintf("k%02d", rng.IntN(40)))
		if bytes.Compare(start, end) > 0 {
			start, end = end, start
		}
		if rng.IntN(4) == 0 {
			end = nil
		}
		var in []itertest.Entry
		for _, e := range all {
			if bytes.Compare(e.Key.UserKey, start) >= 0 && (end == nil || bytes.Compare(e.Key.UserKey, end) < 0) {
				in = append(in, e)
			}
		}
		itertest.Check(t, Bounded(NewMerging(its...), start, end), in, rng)
	}
}

// The heap orders by abbreviated keys (a user key's first eight bytes) and
// falls back to the whole key when they tie: user keys shorter than eight
// bytes, keys that are prefixes of others, zero bytes that look like the
// padding, and keys that differ only past their eighth byte all merge in
// kv.Compare order. One Merging, re-initialised with Init after Reset, serves
// every round, as a pooled one does.
func TestMergingOrdersKeysThatShareAbbreviations(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	alphabet := []byte{0x00, 'a', 0xff}
	m := new(Merging)
	for round := 0; round < 50; round++ {
		children := make([]*sliceIter, 1+rng.IntN(6))
		for i := range children {
			children[i] = &sliceIter{}
		}
		var all []itertest.Entry
		for ts := uint64(1); ts < uint64(2+rng.IntN(200)); ts++ {
			k := make([]byte, rng.IntN(11))
			for i := range k {
				k[i] = alphabet[rng.IntN(len(alphabet))]
			}
			if rng.IntN(2) == 0 && len(k) > 8 {
				copy(k, "aaaaaaaa") // tie on the abbreviation
			}
			key := kv.InternalKey{UserKey: k, TS: ts, Kind: kv.Kind(rng.IntN(2))}
			c := children[rng.IntN(len(children))]
			c.keys = append(c.keys, key)
			all = append(all, itertest.Entry{Key: key, Value: key.UserKey})
		}
		its := make([]Iterator, len(children))
		for i, c := range children {
			slices.SortFunc(c.keys, kv.Compare)
			its[i] = c
		}
		slices.SortFunc(all, func(a, b itertest.Entry) int { return kv.Compare(a.Key, b.Key) })
		m.Reset()
		m.Init(its)
		itertest.Check(t, m, all, rng)
	}
}

func TestAbbreviationOrdersAsBytes(t *testing.T) {
	keys := []string{"", "\x00", "a", "a\x00", "a\x00\x00", "ab", "abcdefg", "abcdefg\x00", "abcdefgh", "abcdefgh\x00", "abcdefghi", "abcdefgi", "\xff", "\xff\xff\xff\xff\xff\xff\xff\xff\xff"}
	for _, a := range keys {
		for _, b := range keys {
			aa, ab := abbreviate([]byte(a)), abbreviate([]byte(b))
			if aa < ab && bytes.Compare([]byte(a), []byte(b)) >= 0 || aa > ab && bytes.Compare([]byte(a), []byte(b)) <= 0 {
				t.Fatalf("abbreviations %x of %q and %x of %q disagree with bytes.Compare", aa, a, ab, b)
			}
		}
	}
}

// SkipTo lands where SeekGE does, from any forward position, whether it
// moves some children, exhausts some, or none is behind the key.
func TestMergingSkipToIsSeekGE(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for round := 0; round < 200; round++ {
		children := make([]*sliceIter, 1+rng.IntN(5))
		for i := range children {
			children[i] = &sliceIter{}
		}
		var all []kv.InternalKey
		for ts := uint64(1); ts < uint64(2+rng.IntN(100)); ts++ {
			k := ik(fmt.Sprintf("k%02d", rng.IntN(20)), ts)
			c := children[rng.IntN(len(children))]
			c.keys = append(c.keys, k)
			all = append(all, k)
		}
		its := make([]Iterator, len(children))
		for i, c := range children {
			slices.SortFunc(c.keys, kv.Compare)
			its[i] = c
		}
		slices.SortFunc(all, kv.Compare)
		m := NewMerging(its...)
		ok := m.First()
		for steps := rng.IntN(len(all)); ok && steps > 0; steps-- {
			ok = m.Next()
		}
		if !ok {
			continue
		}
		cur := m.Key().Clone()
		target := all[rng.IntN(len(all))]
		if rng.IntN(3) == 0 {
			target = kv.InternalKey{UserKey: cur.UserKey, TS: 0, Kind: kv.KindDelete}
		}
		if kv.Compare(target, cur) < 0 {
			target = cur
		}
		target = target.Clone()
		i, _ := slices.BinarySearchFunc(all, target, kv.Compare)
		got := m.SkipTo(target)
		if got != (i < len(all)) || got && kv.Compare(m.Key(), all[i]) != 0 {
			t.Fatalf("round %d: SkipTo(%v) from %v = %v %v, want %v", round, target, cur, got, m.Key(), all[min(i, len(all)-1)])
		}
		// It goes on as the stream does.
		for j := i + 1; j < len(all) && m.Next(); j++ {
			if kv.Compare(m.Key(), all[j]) != 0 {
				t.Fatalf("round %d: after SkipTo, %v, want %v", round, m.Key(), all[j])
			}
		}
	}
}
