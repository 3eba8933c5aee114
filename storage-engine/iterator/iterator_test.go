package iterator

import (
	"errors"
	"slices"
	"testing"

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
func (s *sliceIter) First() bool         { s.i = 0; return s.Valid() }
func (s *sliceIter) Next() bool          { s.i++; return s.Valid() }
func (s *sliceIter) Valid() bool         { return s.i < len(s.keys) && !(s.err != nil && s.i >= s.at) }
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
