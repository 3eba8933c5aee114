package iterator

import (
	"testing"

	"github.com/bellows-kv/bellows/storage-engine/kv"
)

func TestBoundedYieldsOnlyItsRange(t *testing.T) {
	keys := []kv.InternalKey{ik("a", 1), ik("b", 3), ik("b", 2), ik("c", 4), ik("d", 5), ik("e", 6)}
	collect := func(it Iterator, seek string) string {
		var out string
		ok := it.First()
		if seek != "" {
			ok = it.SeekGE(kv.MakeSearchKey([]byte(seek), kv.MaxTimestamp))
		}
		for ; ok; ok = it.Next() {
			out += string(it.Key().UserKey)
		}
		if it.Valid() {
			t.Fatal("valid after the end")
		}
		return out
	}
	for _, c := range []struct {
		start, end, seek, want string
	}{
		{"b", "d", "", "bbc"},
		{"", "c", "", "abb"},
		{"c", "", "", "cde"},
		{"b", "d", "a", "bbc"}, // a seek below the range starts at its start
		{"b", "d", "c", "c"},
		{"b", "d", "d", ""},
	} {
		var end []byte
		if c.end != "" {
			end = []byte(c.end)
		}
		got := collect(Bounded(&sliceIter{keys: keys}, []byte(c.start), end), c.seek)
		if got != c.want {
			t.Errorf("[%q, %q) seek %q: %q, want %q", c.start, c.end, c.seek, got, c.want)
		}
	}
}
