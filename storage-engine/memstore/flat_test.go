package memstore

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
	"unsafe"

	"github.com/bits-and-blooms/bloom/v3"

	"github.com/bellows-kv/bellows/storage-engine/iterator"
	"github.com/bellows-kv/bellows/storage-engine/kv"
)

// randomSkiplist fills a skiplist with n versions over keys that share long
// prefixes (so comparisons go past the 8-byte prefix), including the empty
// key and keys that are prefixes of others, some tombstones, and values of
// many sizes; timestamps are unique.
func randomSkiplist(rng *rand.Rand, n int) *Skiplist {
	s := NewSkiplist()
	keys := []string{"", "a", "abcdefgh", "abcdefgh\x00", "abcdefghi", "abcdefgz", "b", "\xff\xff"}
	for i := 0; i < 20; i++ {
		keys = append(keys, fmt.Sprintf("abcdefgh%03d", rng.IntN(100)))
	}
	for _, p := range rng.Perm(n) {
		k := keys[rng.IntN(len(keys))]
		key := kv.InternalKey{UserKey: []byte(k), TS: uint64(p + 1), Kind: kv.KindSet}
		var v []byte
		if rng.IntN(6) == 0 {
			key.Kind = kv.KindDelete
		} else {
			v = bytes.Repeat([]byte{byte(p)}, rng.IntN(300))
			if rng.IntN(200) == 0 {
				v = bytes.Repeat([]byte{byte(p)}, chunkSize/4+rng.IntN(1000))
			}
		}
		s.Add(key, v)
	}
	return s
}

type kvPair struct {
	key   kv.InternalKey
	value []byte
}

func collect(t *testing.T, it iterator.Iterator) []kvPair {
	t.Helper()
	var out []kvPair
	for ok := it.First(); ok; ok = it.Next() {
		out = append(out, kvPair{it.Key().Clone(), bytes.Clone(it.Value())})
	}
	if err := it.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func equalPairs(a, b []kvPair) bool {
	return slices.EqualFunc(a, b, func(x, y kvPair) bool {
		return kv.Compare(x.key, y.key) == 0 && x.key.Kind == y.key.Kind && bytes.Equal(x.value, y.value)
	})
}

func TestFlattenIteratesAsTheSkiplist(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{0, 1, 5, 3000} {
		s := randomSkiplist(rng, n)
		f := flatten(s)
		want, got := collect(t, s.NewIterator()), collect(t, f.NewIterator())
		if len(want) != n || !equalPairs(got, want) {
			t.Fatalf("n=%d: flat iterates %d versions, skiplist %d, or they differ", n, len(got), len(want))
		}
		if f.Len() != s.Len() {
			t.Fatalf("n=%d: Len %d, skiplist %d", n, f.Len(), s.Len())
		}
		lo, hi := s.tsRange()
		if flo, fhi := f.tsRange(); n > 0 && (flo != lo || fhi != hi || lo != 1 || hi != uint64(n)) {
			t.Fatalf("n=%d: tsRange %d..%d, skiplist %d..%d", n, flo, fhi, lo, hi)
		}
		uniques := 0
		for i := range want {
			if i == 0 || !bytes.Equal(want[i].key.UserKey, want[i-1].key.UserKey) {
				uniques++
			}
		}
		if f.uniques != uniques {
			t.Fatalf("n=%d: uniques %d, want %d", n, f.uniques, uniques)
		}
		// The view's invariant check agrees that it is sorted.
		v := &View{active: NewSkiplist(), pipeline: []segment{f}}
		if err := v.CheckInvariants(); err != nil {
			t.Fatal(err)
		}
	}
}

func TestFlatGetAndSeekGEMatchTheSkiplist(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	const n = 2000
	s := randomSkiplist(rng, n)
	f := flatten(s)
	var userKeys [][]byte
	for _, p := range collect(t, s.NewIterator()) {
		if len(userKeys) == 0 || !bytes.Equal(userKeys[len(userKeys)-1], p.key.UserKey) {
			userKeys = append(userKeys, p.key.UserKey)
		}
	}
	userKeys = append(userKeys, []byte("abcdefg"), []byte("abcdefgh000\x00"), []byte("zzz"), []byte("\x00"))
	tss := []uint64{0, 1, 2, n / 2, n - 1, n, n + 1, kv.MaxTimestamp}
	for range 20 {
		tss = append(tss, 1+rng.Uint64N(n))
	}
	for _, k := range userKeys {
		for _, ts := range tss {
			wv, wk, wok := s.Get(k, ts)
			gv, gk, gok := f.Get(k, ts)
			if gok != wok || (gok && (gk != wk || !bytes.Equal(gv, wv))) {
				t.Fatalf("Get(%q, %d): flat %v %v %d bytes, skiplist %v %v %d bytes", k, ts, gok, gk, len(gv), wok, wk, len(wv))
			}
			for _, kind := range []kv.Kind{kv.KindSet, kv.KindDelete} {
				key := kv.InternalKey{UserKey: k, TS: ts, Kind: kind}
				si, fi := s.NewIterator(), f.NewIterator()
				sok, fok := si.SeekGE(key), fi.SeekGE(key)
				for step := 0; step < 3; step++ {
					if sok != fok || fok != fi.Valid() {
						t.Fatalf("SeekGE(%v)+%d: flat valid %v, skiplist %v", key, step, fok, sok)
					}
					if !sok {
						break
					}
					if kv.Compare(si.Key(), fi.Key()) != 0 || !bytes.Equal(si.Value(), fi.Value()) {
						t.Fatalf("SeekGE(%v)+%d: flat at %v, skiplist at %v", key, step, fi.Key(), si.Key())
					}
					if step == 0 && kv.Compare(fi.Key(), key) < 0 {
						t.Fatalf("SeekGE(%v) landed below it, at %v", key, fi.Key())
					}
					sok, fok = si.Next(), fi.Next()
				}
			}
		}
	}
	// Exhausted and closed iterators stay invalid.
	it := f.NewIterator()
	if it.Valid() || it.Next() {
		t.Fatal("a new iterator is valid before positioning")
	}
	if it.SeekGE(kv.MakeSearchKey([]byte("\xff\xff\xff"), 0)) || it.Valid() || it.Next() {
		t.Fatal("SeekGE past the end is valid")
	}
	if !it.First() || it.Close() != nil || it.Valid() || it.Next() {
		t.Fatal("a closed iterator is valid")
	}
}

func TestFlatGetTombstoneAndTimestamps(t *testing.T) {
	s := NewSkiplist()
	s.Add(kv.InternalKey{UserKey: []byte("k"), TS: 10, Kind: kv.KindSet}, []byte("v10"))
	s.Add(kv.InternalKey{UserKey: []byte("k"), TS: 20, Kind: kv.KindDelete}, nil)
	s.Add(kv.InternalKey{UserKey: []byte("k"), TS: 30, Kind: kv.KindSet}, []byte("v30"))
	s.Add(kv.InternalKey{UserKey: []byte("ka"), TS: 5, Kind: kv.KindSet}, []byte("ka5"))
	s.Add(kv.InternalKey{UserKey: []byte(""), TS: 7, Kind: kv.KindSet}, []byte("empty"))
	f := flatten(s)
	for _, c := range []struct {
		key  string
		ts   uint64
		want string
		kind kv.Kind
		ok   bool
	}{
		{"k", 9, "", 0, false},
		{"k", 10, "v10", kv.KindSet, true},
		{"k", 19, "v10", kv.KindSet, true},
		{"k", 20, "", kv.KindDelete, true},
		{"k", 29, "", kv.KindDelete, true},
		{"k", 30, "v30", kv.KindSet, true},
		{"k", kv.MaxTimestamp, "v30", kv.KindSet, true},
		{"ka", 4, "", 0, false},
		{"ka", 5, "ka5", kv.KindSet, true},
		{"", 7, "empty", kv.KindSet, true},
		{"", 6, "", 0, false},
		{"j", 100, "", 0, false},
		{"kb", 100, "", 0, false},
	} {
		v, kind, ok := f.Get([]byte(c.key), c.ts)
		if ok != c.ok || (ok && (kind != c.kind || string(v) != c.want)) {
			t.Errorf("Get(%q, %d) = %q %v %v; want %q %v %v", c.key, c.ts, v, kind, ok, c.want, c.kind, c.ok)
		}
	}
}

// TestFlatUsesLessMemoryThanTheSkiplist: for the paper's 16-byte keys and
// 100-byte values, the flat index costs flatEntryBytes per version against
// a skiplist node's overhead, and the data is the same.
func TestFlatUsesLessMemoryThanTheSkiplist(t *testing.T) {
	const n = 10000
	s := NewSkiplist()
	v := make([]byte, 100)
	for i := 0; i < n; i++ {
		s.Add(kv.InternalKey{UserKey: fmt.Appendf(nil, "%016x", uint64(i)*0x9e3779b97f4a7c15), TS: uint64(i + 1), Kind: kv.KindSet}, v)
	}
	f := flatten(s)
	fb, sb := f.ApproximateBytes(), s.ApproximateBytes()
	if want := int64(n*(16+100+flatEntryBytes)) + f.filterBytes; fb != want {
		t.Fatalf("flat ApproximateBytes = %d, want %d", fb, want)
	}
	if sb < int64(n*(16+100+nodeOverhead)) {
		t.Fatalf("skiplist ApproximateBytes = %d, below its data and node overhead", sb)
	}
	if fb >= sb {
		t.Fatalf("flat %d bytes >= skiplist %d bytes", fb, sb)
	}
	t.Logf("flat %d bytes, skiplist %d bytes (%.0f%%)", fb, sb, 100*float64(fb)/float64(sb))
	// Flattening shares the chunks: no key or value byte is copied.
	if len(f.chunks) != len(s.arena.chunks) || unsafe.SliceData(f.chunks[0]) != unsafe.SliceData(s.arena.chunks[0]) {
		t.Fatal("flatten copied the arena's chunks")
	}
	// A view holding it accounts for it.
	view := &View{active: NewSkiplist(), pipeline: []segment{f}}
	view.recount()
	if view.ApproximateBytes() != fb || view.Len() != n {
		t.Fatalf("view: %d bytes, %d versions; want %d, %d", view.ApproximateBytes(), view.Len(), fb, n)
	}
}

// TestFlatIndexHoldsNoPointers: the garbage collector must not scan a flat
// segment's index, so flatEntry has only integer fields, and its size is the
// flatEntryBytes the memory accounting charges.
func TestFlatIndexHoldsNoPointers(t *testing.T) {
	typ := reflect.TypeFor[flatEntry]()
	for i := 0; i < typ.NumField(); i++ {
		fld := typ.Field(i)
		switch fld.Type.Kind() {
		case reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64, reflect.Int, reflect.Uint, reflect.Bool:
		default:
			t.Errorf("flatEntry.%s is a %s: the flat index must hold no pointers", fld.Name, fld.Type.Kind())
		}
	}
	if got := unsafe.Sizeof(flatEntry{}); got != flatEntryBytes {
		t.Errorf("unsafe.Sizeof(flatEntry{}) = %d, flatEntryBytes = %d", got, flatEntryBytes)
	}
	// loc is an integer too, as arena chunks are named by index.
	if k := reflect.TypeFor[loc]().Kind(); k != reflect.Uint64 {
		t.Errorf("loc is a %s", k)
	}
}

// TestMergeFlat: a merge (no retention) rebuilds only the index over the
// inputs' shared chunks and keeps every version; a compaction copies the
// survivors into chunks of its own, so the inputs' memory goes with them.
func TestMergeFlat(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	// Three segments with disjoint, ascending timestamp ranges over the
	// same keys, as a pipeline holds them (newest first).
	var segs []*flat
	var all []kvPair
	ts := uint64(0)
	for range 3 {
		s := NewSkiplist()
		for range 500 {
			ts++
			k := fmt.Appendf(nil, "key%02d", rng.IntN(40))
			v := bytes.Repeat([]byte{byte(ts)}, rng.IntN(200))
			if rng.IntN(150) == 0 {
				v = bytes.Repeat([]byte{byte(ts)}, chunkSize/4+1)
			}
			s.Add(kv.InternalKey{UserKey: k, TS: ts, Kind: kv.KindSet}, v)
		}
		f := flatten(s)
		segs = append([]*flat{f}, segs...)
		all = append(all, collect(t, f.NewIterator())...)
	}
	slices.SortFunc(all, func(a, b kvPair) int { return kv.Compare(a.key, b.key) })

	merged, dropped := mergeFlat(segs, nil, nil)
	if dropped != 0 || !equalPairs(collect(t, merged.NewIterator()), all) {
		t.Fatalf("merge dropped %d or reordered versions", dropped)
	}
	uniques := 0
	for i := range all {
		if i == 0 || !bytes.Equal(all[i].key.UserKey, all[i-1].key.UserKey) {
			uniques++
		}
	}
	if !merged.merged || merged.uniques != uniques {
		t.Fatalf("merged %v, uniques %d; want %d", merged.merged, merged.uniques, uniques)
	}
	if lo, hi := merged.tsRange(); lo != 1 || hi != ts {
		t.Fatalf("merged tsRange %d..%d, want 1..%d", lo, hi, ts)
	}
	var shared int
	for _, s := range segs {
		for _, c := range s.chunks {
			for _, mc := range merged.chunks {
				if unsafe.SliceData(mc) == unsafe.SliceData(c) {
					shared++
				}
			}
		}
	}
	if n := len(merged.chunks); shared != n {
		t.Fatalf("merge shares %d of its %d chunks with the inputs; want all", shared, n)
	}

	compacted, dropped := mergeFlat(segs, &Retention{MaxVersions: 1, Horizon: ts}, nil)
	got := collect(t, compacted.NewIterator())
	if len(got)+dropped != len(all) || len(got) != compacted.uniques {
		t.Fatalf("compaction kept %d (uniques %d) and dropped %d of %d", len(got), compacted.uniques, dropped, len(all))
	}
	for i, p := range got {
		// The survivor of each key is its newest version.
		j := slices.IndexFunc(all, func(q kvPair) bool { return bytes.Equal(q.key.UserKey, p.key.UserKey) })
		if !equalPairs([]kvPair{p}, all[j:j+1]) || i > 0 && bytes.Equal(got[i-1].key.UserKey, p.key.UserKey) {
			t.Fatalf("compaction kept %v, want only %v", p.key, all[j].key)
		}
	}
	for _, s := range segs {
		for _, c := range s.chunks {
			for _, cc := range compacted.chunks {
				if unsafe.SliceData(cc) == unsafe.SliceData(c) {
					t.Fatal("a compaction shares a chunk with its inputs: dropped versions' memory stays")
				}
			}
		}
	}
	if compacted.ApproximateBytes() >= merged.ApproximateBytes() {
		t.Fatalf("compacted %d bytes, merged %d", compacted.ApproximateBytes(), merged.ApproximateBytes())
	}
}

func TestArenaLargeValuesGetTheirOwnChunk(t *testing.T) {
	a := newArena()
	_, l1 := a.alloc(10)
	big, l2 := a.alloc(chunkSize/4 + 1)
	_, l3 := a.alloc(10)
	_, l4 := a.alloc(chunkSize / 4) // not large: shares the chunk
	if l1.chunk() != 0 || l1.off() != 0 {
		t.Fatalf("first alloc at %d/%d", l1.chunk(), l1.off())
	}
	if l2.chunk() != 1 || l2.off() != 0 || len(big) != chunkSize/4+1 {
		t.Fatalf("large alloc at %d/%d, %d bytes", l2.chunk(), l2.off(), len(big))
	}
	if l3.chunk() != 0 || l3.off() != 10 {
		t.Fatalf("alloc after a large one at %d/%d; want chunk 0 offset 10", l3.chunk(), l3.off())
	}
	if l4.chunk() != 0 || l4.off() != 20 {
		t.Fatalf("alloc of chunkSize/4 at %d/%d; want chunk 0 offset 20", l4.chunk(), l4.off())
	}
	// Filling past the chunk opens a new one; earlier slices stay valid.
	b1, _ := a.alloc(10)
	copy(b1, "0123456789")
	for range 4 {
		a.alloc(chunkSize / 4)
	}
	if string(b1) != "0123456789" || len(a.all()) != 3 {
		t.Fatalf("after filling: %q, %d chunks", b1, len(a.all()))
	}
	buf, l := a.alloc(5)
	if cap(buf) != 5 || l.chunk() != 2 {
		t.Fatalf("alloc's slice has cap %d in chunk %d", cap(buf), l.chunk())
	}
}

// TestSharedPrefixSearchAndMerge: flat segments whose keys share a long
// prefix abbreviate the keys after it; searches for keys below, above,
// inside and around that prefix find what a linear scan of the full keys
// finds, and merging segments with different shared prefixes (compared
// on full keys then) keeps the order.
func TestSharedPrefixSearchAndMerge(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	var ts uint64
	segment := func(prefix string, n int) *flat {
		s := NewSkiplist()
		for range n {
			ts++
			k := prefix + fmt.Sprintf("%03d", rng.IntN(1000))[:1+rng.IntN(3)]
			if rng.IntN(20) == 0 {
				k = prefix // the shared prefix is itself a key
			}
			s.Add(kv.InternalKey{UserKey: []byte(k), TS: ts, Kind: kv.KindSet}, []byte(k))
		}
		return flatten(s)
	}
	segs := []*flat{segment("user0001", 300), segment("user0001", 200), segment("user00035", 300), segment("user9", 100)}
	if got := string(segs[0].shared); len(got) < len("user0001") {
		t.Fatalf("shared prefix of keys all starting user0001 is %q", got)
	}
	merged, _ := mergeFlat(segs, nil, nil)
	if string(merged.shared) != "user" {
		t.Fatalf("merged shared prefix is %q, want \"user\"", merged.shared)
	}
	probes := []string{"", "a", "user", "user0", "user0001", "user00010", "user00015", "user0001999", "user0001\xff",
		"user0002", "user00035", "user000350", "user0004", "user9", "user95", "user\xff", "v", "\xff"}
	for range 200 {
		probes = append(probes, "user"+fmt.Sprintf("%05d", rng.IntN(100000))[:1+rng.IntN(5)])
	}
	for i, f := range append(segs, merged) {
		for j := 1; j < len(f.entries); j++ {
			if kv.Compare(f.key(&f.entries[j-1]), f.key(&f.entries[j])) >= 0 {
				t.Fatalf("segment %d out of order at %d: %v then %v", i, j, f.key(&f.entries[j-1]), f.key(&f.entries[j]))
			}
		}
		for _, p := range probes {
			for _, readTS := range []uint64{kv.MaxTimestamp, ts / 2} {
				key := kv.MakeSearchKey([]byte(p), readTS)
				want := 0
				for want < len(f.entries) && kv.Compare(f.key(&f.entries[want]), key) < 0 {
					want++
				}
				if got := f.seekGE(key); got != want {
					t.Fatalf("segment %d (shared %q): seekGE(%q@%d) = %d, want %d", i, f.shared, p, readTS, got, want)
				}
			}
		}
	}
	if n := len(segs[0].entries) + len(segs[1].entries) + len(segs[2].entries) + len(segs[3].entries); len(merged.entries) != n {
		t.Fatalf("merged %d entries of %d", len(merged.entries), n)
	}
}

// TestFlatKeyFilter: a flat segment's key filter lets every key it holds
// through (a get finds each, at every timestamp it was written) and keeps
// most absent keys from a binary search; it costs under 2% of the
// segment's memory.
func TestFlatKeyFilter(t *testing.T) {
	const n = 20000
	s := NewSkiplist()
	key := func(i int) []byte { return fmt.Appendf(nil, "user%012d", i*2) } // odd i: absent
	for i := range n {
		s.Add(kv.InternalKey{UserKey: key(i), TS: uint64(i + 1), Kind: kv.KindSet}, key(i))
	}
	f := flatten(s)
	for i := range n {
		if v, _, ok := f.Get(key(i), kv.MaxTimestamp); !ok || !bytes.Equal(v, key(i)) {
			t.Fatalf("Get(%s) = %q, %v: a key the segment holds", key(i), v, ok)
		}
	}
	passed := 0
	for i := range n {
		absent := fmt.Appendf(nil, "user%012d", i*2+1)
		if f.filter.Test(absent) {
			passed++
		}
		if _, _, ok := f.Get(absent, kv.MaxTimestamp); ok {
			t.Fatalf("Get(%s) found a key never written", absent)
		}
	}
	if rate := float64(passed) / n; rate > 0.03 {
		t.Fatalf("the filter let %.1f%% of absent keys through, want about 1%%", 100*rate)
	}
	if share := float64(f.filterBytes) / float64(f.ApproximateBytes()); share > 0.02 {
		t.Fatalf("the filter is %.1f%% of the segment's memory", 100*share)
	}
	merged, _ := mergeFlat([]*flat{f, flatten(randomSkiplist(rand.New(rand.NewPCG(1, 2)), 500))}, nil, nil)
	for i := range n {
		if _, _, ok := merged.Get(key(i), kv.MaxTimestamp); !ok {
			t.Fatalf("the merged segment lost %s", key(i))
		}
	}
}

// TestMergeCopiesTheMemstoresKeyFilter: a merge given the memstore's key
// filter (which holds every key of its inputs) copies it as the output's
// instead of hashing the keys again. Every key of every input passes the
// output's filter and is found, the uniques are counted across inputs,
// and what is added to the memstore's filter afterwards is not in the
// output's (a copy, not shared).
func TestMergeCopiesTheMemstoresKeyFilter(t *testing.T) {
	key := func(i int) []byte { return fmt.Appendf(nil, "user%012d", i) }
	var ts uint64
	segment := func(from, to, step int) *flat {
		s := NewSkiplist()
		for i := from; i < to; i += step {
			ts++
			s.Add(kv.InternalKey{UserKey: key(i), TS: ts, Kind: kv.KindSet}, key(i))
		}
		return flatten(s)
	}
	keys := bloom.NewWithEstimates(50000, keyFilterFalsePositive)
	// Even keys, odd keys, and every tenth even key again (a version of a
	// key an older segment holds).
	segs := []*flat{segment(0, 20000, 10), segment(1, 20000, 2), segment(0, 20000, 2)}
	for _, f := range segs {
		f.addKeysTo(keys)
	}
	merged, _ := mergeFlat(segs, nil, keys)
	if merged.filter == keys || merged.filter.Cap() != keys.Cap() {
		t.Fatalf("the merged filter is the memstore's (%v) or not a copy of it (%d bits, want %d)", merged.filter == keys, merged.filter.Cap(), keys.Cap())
	}
	for i := range 20000 {
		if !merged.filter.Test(key(i)) {
			t.Fatalf("the merged filter lacks %s", key(i))
		}
		if v, _, ok := merged.Get(key(i), kv.MaxTimestamp); !ok || !bytes.Equal(v, key(i)) {
			t.Fatalf("Get(%s) = %q, %v", key(i), v, ok)
		}
	}
	if merged.uniques != 20000 {
		t.Fatalf("merged uniques %d, want 20000 (the versions of one key in two inputs count once)", merged.uniques)
	}
	later := segment(20000, 30000, 1)
	later.addKeysTo(keys)
	passed := 0
	for i := 20000; i < 30000; i++ {
		if merged.filter.Test(key(i)) {
			passed++
		}
	}
	if passed > 300 { // 1% of 10,000 absent keys, with room
		t.Fatalf("the merged filter passes %d of 10,000 keys added to the memstore's after the merge: it is shared, not copied", passed)
	}
	compacted, _ := mergeFlat(segs, &Retention{MaxVersions: 1, Horizon: ts}, keys)
	for i := range 20000 {
		if v, _, ok := compacted.Get(key(i), kv.MaxTimestamp); !ok || !bytes.Equal(v, key(i)) {
			t.Fatalf("after a compaction Get(%s) = %q, %v", key(i), v, ok)
		}
	}
}
