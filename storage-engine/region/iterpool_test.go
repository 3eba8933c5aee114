package region

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
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

// Scans pass keys with many versions by seeking past them (maxVersionSteps):
// forward and in reverse, at every timestamp and with uncertainty windows,
// they return what the history says, whether the versions are in files, in
// the memstore or both.
func TestScansOverManyVersionsMatchTheHistory(t *testing.T) {
	opts := testOptions(t, t.TempDir())
	opts.DisableAutoCompaction = true
	r := mustOpen(t, opts)
	defer r.Close()
	type version struct {
		ts  uint64
		val string // "" is a tombstone
	}
	hist := map[string][]version{}
	var keys []string
	for i := 0; i < 6; i++ {
		keys = append(keys, fmt.Sprintf("k%d", i))
	}
	var stamps []uint64
	rng := 0
	for round := 0; round < 120; round++ {
		// Keys 1 and 4 are hot: most writes go to them.
		rng = (rng*1103515245 + 12345) & 0x7fffffff
		k := keys[[]int{1, 4, 1, 4, 1, 4, rng % 6}[rng%7]]
		var ts uint64
		var err error
		val := fmt.Sprintf("%s-v%d", k, round)
		if rng%11 == 0 {
			ts, err = r.Delete([]byte(k))
			val = ""
		} else {
			ts, err = r.Put([]byte(k), []byte(val))
		}
		if err != nil {
			t.Fatal(err)
		}
		hist[k] = append(hist[k], version{ts, val})
		stamps = append(stamps, ts)
		if round == 40 || round == 80 {
			if err := r.Flush(bg); err != nil {
				t.Fatal(err)
			}
		}
	}
	// want is the scan at ts with uncertainty limit: the live keys in
	// order, then the key a version in (ts, limit] stops it at ("" if none).
	want := func(ts, limit uint64, reverse bool) ([]string, string) {
		var live []string
		order := append([]string(nil), keys...)
		if reverse {
			slices.Reverse(order)
		}
		for _, k := range order {
			var vis *version
			for i := range hist[k] {
				v := &hist[k][i]
				if v.ts > ts && v.ts <= limit {
					return live, k
				}
				if v.ts <= ts {
					vis = v
				}
			}
			if vis != nil && vis.val != "" {
				live = append(live, k+"="+vis.val)
			}
		}
		return live, ""
	}
	for j, ts := range stamps {
		for _, limit := range []uint64{0, stamps[min(j+2, len(stamps)-1)], stamps[min(j+30, len(stamps)-1)]} {
			for _, reverse := range []bool{false, true} {
				it, err := r.NewIteratorUncertain(bg, nil, nil, ts, Uncertainty{Limit: limit})
				if err != nil {
					t.Fatal(err)
				}
				first, next := it.First, it.Next
				if reverse {
					first, next = it.Last, it.Prev
				}
				var got []string
				for ok := first(); ok; ok = next() {
					got = append(got, string(it.Key())+"="+string(it.Value()))
				}
				gotAt := ""
				var ue *UncertainError
				if errors.As(it.Err(), &ue) {
					gotAt = string(ue.Key)
				} else if it.Err() != nil {
					t.Fatal(it.Err())
				}
				it.Close()
				wantLive, wantAt := want(ts, max(limit, ts), reverse)
				if !reverse && (fmt.Sprint(got) != fmt.Sprint(wantLive) || gotAt != wantAt) {
					t.Fatalf("forward at %d limit %d: %v uncertain at %q, want %v uncertain at %q", ts, limit, got, gotAt, wantLive, wantAt)
				}
				if reverse && wantAt == "" && (fmt.Sprint(got) != fmt.Sprint(wantLive) || gotAt != "") {
					t.Fatalf("reverse at %d limit %d: %v uncertain at %q, want %v", ts, limit, got, gotAt, wantLive)
				}
			}
		}
	}
}
