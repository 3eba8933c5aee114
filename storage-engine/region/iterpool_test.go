package region

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/bellows-kv/bellows/storage-engine/kv"
)

// Iterators reuse their memory (iterStates): a closed iterator gives none of
// another's keys, cannot be moved again, and closing it twice is harmless,
// while iterators open at once over files and memstore, interleaved with
// closes, each see their own range.
func TestPooledIteratorsKeepToThemselves(t *testing.T) {
	opts := testOptions(t, t.TempDir())
	opts.DisableAutoCompaction = true
	r := mustOpen(t, opts)
	defer r.Close()
	key := func(i int) []byte { return []byte(fmt.Sprintf("k%04d", i)) }
	for pass := 0; pass < 3; pass++ {
		for i := pass; i < 300; i += 3 {
			if _, err := r.Put(key(i), key(i)); err != nil {
				t.Fatal(err)
			}
		}
		if pass < 2 {
			if err := r.Flush(bg); err != nil {
				t.Fatal(err)
			}
		}
	}
	scan := func(it *Iterator, n int) []string {
		var got []string
		for ok := it.First(); ok && len(got) < n; ok = it.Next() {
			if !bytes.Equal(it.Key(), it.Value()) {
				t.Fatalf("key %q has value %q", it.Key(), it.Value())
			}
			got = append(got, string(it.Key()))
		}
		return got
	}
	want := func(from, n int) []string {
		var w []string
		for i := from; i < from+n; i++ {
			w = append(w, string(key(i)))
		}
		return w
	}
	a, err := r.NewIterator(key(10), nil, kv.MaxTimestamp)
	if err != nil {
		t.Fatal(err)
	}
	if got := scan(a, 5); fmt.Sprint(got) != fmt.Sprint(want(10, 5)) {
		t.Fatalf("a: %v", got)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	for round := 0; round < 20; round++ {
		b, err := r.NewIterator(key(100+round), nil, kv.MaxTimestamp)
		if err != nil {
			t.Fatal(err)
		}
		c, err := r.NewIterator(key(200-round), key(210-round), kv.MaxTimestamp)
		if err != nil {
			t.Fatal(err)
		}
		if a.Key() != nil || a.First() || a.Last() {
			t.Fatalf("closed iterator: key %q, or moved", a.Key())
		}
		if got := scan(b, 7); fmt.Sprint(got) != fmt.Sprint(want(100+round, 7)) {
			t.Fatalf("round %d b: %v", round, got)
		}
		if got := scan(c, 100); fmt.Sprint(got) != fmt.Sprint(want(200-round, 10)) {
			t.Fatalf("round %d c: %v", round, got)
		}
		if err := b.Close(); err != nil {
			t.Fatal(err)
		}
		if err := b.Close(); err != nil {
			t.Fatal(err)
		}
		if got := scan(c, 100); fmt.Sprint(got) != fmt.Sprint(want(200-round, 10)) {
			t.Fatalf("round %d c after b closed: %v", round, got)
		}
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
