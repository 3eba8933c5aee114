package memstore

import (
	"fmt"
	"sort"
	"sync"
	"testing"

	"github.com/bellows-kv/bellows/storage-engine/kv"
)

func TestSkiplistConcurrentAddsAreAllOrdered(t *testing.T) {
	s := NewSkiplist()
	const writers, perWriter = 8, 2000
	var wg sync.WaitGroup
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; i < perWriter; i++ {
				ts := uint64(w*perWriter + i + 1)
				s.Add(kv.InternalKey{UserKey: []byte(fmt.Sprintf("k%05d", i%500)), TS: ts, Kind: kv.KindSet}, []byte(fmt.Sprint(ts)))
			}
		}(w)
	}
	// A concurrent reader must always see a sorted list.
	done := make(chan struct{})
	go func() {
		defer close(done)
		for r := 0; r < 50; r++ {
			it := s.NewIterator()
			var prev kv.InternalKey
			first := true
			for ok := it.First(); ok; ok = it.Next() {
				if !first && kv.Compare(prev, it.Key()) >= 0 {
					t.Errorf("out of order: %v then %v", prev, it.Key())
					return
				}
				prev, first = it.Key().Clone(), false
			}
		}
	}()
	wg.Wait()
	<-done
	if got := s.Len(); got != writers*perWriter {
		t.Fatalf("Len = %d, want %d", got, writers*perWriter)
	}
	var keys []kv.InternalKey
	it := s.NewIterator()
	for ok := it.First(); ok; ok = it.Next() {
		keys = append(keys, it.Key().Clone())
	}
	if len(keys) != writers*perWriter {
		t.Fatalf("iterated %d keys, want %d", len(keys), writers*perWriter)
	}
	if !sort.SliceIsSorted(keys, func(i, j int) bool { return kv.Compare(keys[i], keys[j]) < 0 }) {
		t.Fatal("iteration is not sorted")
	}
}

func TestSkiplistGetReadsAtTimestamp(t *testing.T) {
	s := NewSkiplist()
	s.Add(kv.InternalKey{UserKey: []byte("a"), TS: 10, Kind: kv.KindSet}, []byte("v10"))
	s.Add(kv.InternalKey{UserKey: []byte("a"), TS: 20, Kind: kv.KindDelete}, nil)
	s.Add(kv.InternalKey{UserKey: []byte("a"), TS: 30, Kind: kv.KindSet}, []byte("v30"))
	s.Add(kv.InternalKey{UserKey: []byte("b"), TS: 5, Kind: kv.KindSet}, []byte("b5"))
	cases := []struct {
		key  string
		ts   uint64
		want string
		kind kv.Kind
		ok   bool
	}{
		{"a", 9, "", 0, false},
		{"a", 10, "v10", kv.KindSet, true},
		{"a", 25, "", kv.KindDelete, true},
		{"a", kv.MaxTimestamp, "v30", kv.KindSet, true},
		{"b", 100, "b5", kv.KindSet, true},
		{"c", 100, "", 0, false},
		{"", 100, "", 0, false},
	}
	for _, c := range cases {
		v, kind, ok := s.Get([]byte(c.key), c.ts)
		if ok != c.ok || (ok && (kind != c.kind || string(v) != c.want)) {
			t.Errorf("Get(%q,@%d) = %q,%v,%v; want %q,%v,%v", c.key, c.ts, v, kind, ok, c.want, c.kind, c.ok)
		}
	}
}

func BenchmarkSkiplistAddRandom(b *testing.B) {
	s := NewSkiplist()
	keys := make([][]byte, 1<<20)
	for i := range keys {
		keys[i] = []byte(fmt.Sprintf("%016x", uint64(i)*0x9e3779b97f4a7c15))
	}
	v := make([]byte, 100)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		s.Add(kv.InternalKey{UserKey: keys[i%len(keys)], TS: uint64(i + 1), Kind: kv.KindSet}, v)
	}
}

func TestPrefixComparisonAgreesWithCompare(t *testing.T) {
	keys := [][]byte{{}, {0}, {0, 0}, {'a'}, {'a', 0}, {'a', 0, 1}, []byte("abcdefgh"), []byte("abcdefgh\x00"), []byte("abcdefghi"), {0xff}, []byte("abcdefgg\xff")}
	for _, a := range keys {
		for _, b := range keys {
			for _, ts := range []uint64{1, 2} {
				n := &node{prefix: keyPrefix(a), key: kv.InternalKey{UserKey: a, TS: 1, Kind: kv.KindSet}}
				k := kv.InternalKey{UserKey: b, TS: ts, Kind: kv.KindSet}
				if got, want := compareNode(n, k, keyPrefix(b)), kv.Compare(n.key, k); got != want {
					t.Errorf("compareNode(%q, %q@%d) = %d, kv.Compare = %d", a, b, ts, got, want)
				}
			}
		}
	}
}
