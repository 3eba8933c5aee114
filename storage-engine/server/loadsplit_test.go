package server

import (
	"context"
	"fmt"
	"testing"
	"time"

	kvpb "github.com/bellows-kv/bellows/proto/bellows/kv/v1"
)

func keysOf(format string, n int) [][]byte {
	out := make([][]byte, n)
	for i := range out {
		out[i] = []byte(fmt.Sprintf(format, i))
	}
	return out
}

func repeated(key string, n int) [][]byte {
	out := make([][]byte, n)
	for i := range out {
		out[i] = []byte(key)
	}
	return out
}

func TestLoadSplitKeyHalvesTheLoad(t *testing.T) {
	spread := keysOf("user%04d", 400)
	k, ok := loadSplitKey(spread, []byte("user"), nil)
	if !ok || string(k) != "user0200" {
		t.Fatalf("a range of hot keys splits at %q (%v), want the median user0200", k, ok)
	}
	// One key holds most of the load: no key halves it.
	hot := append(repeated("hot", 300), keysOf("other%04d", 100)...)
	if k, ok := loadSplitKey(hot, nil, nil); ok {
		t.Fatalf("a single hot key split at %q", k)
	}
	// Two equally hot keys: the second starts the right daughter.
	two := append(repeated("a", 200), repeated("b", 200)...)
	if k, ok := loadSplitKey(two, nil, nil); !ok || string(k) != "b" {
		t.Fatalf("two hot keys split at %q (%v), want between them at b", k, ok)
	}
	if _, ok := loadSplitKey(keysOf("k%d", 10), nil, nil); ok {
		t.Fatal("ten samples were enough to split")
	}
	if _, ok := loadSplitKey(spread, []byte("user0200"), nil); ok {
		t.Fatal("split at the region's own start key")
	}
}

func TestLoadCandidatesAreFarAboveTheirPeers(t *testing.T) {
	a, b, c := &Assignment{Span: Span{Name: "a"}}, &Assignment{Span: Span{Name: "b"}}, &Assignment{Span: Span{Name: "c"}}
	samples := map[*Assignment][][]byte{a: keysOf("k%04d", 100), b: keysOf("k%04d", 100), c: keysOf("k%04d", 100)}
	got := loadCandidates(map[*Assignment]float64{a: 5000, b: 100, c: 120}, samples, 1000)
	if len(got) != 1 || got[a] == nil {
		t.Fatalf("candidates %v, want only the hot a", got)
	}
	if got := loadCandidates(map[*Assignment]float64{a: 5000, b: 4000, c: 4500}, samples, 1000); len(got) != 0 {
		t.Fatalf("regions equally loaded are split: %v", got)
	}
	if got := loadCandidates(map[*Assignment]float64{a: 900}, samples, 1000); len(got) != 0 {
		t.Fatalf("a region under the threshold is split: %v", got)
	}
	if got := loadCandidates(map[*Assignment]float64{a: 1500}, samples, 1000); len(got) != 1 {
		t.Fatalf("a store's only region over the threshold is not split: %v", got)
	}
}

// Requests over a hot range split the region where their load halves;
// requests all for one key never split it.
func TestStoreSplitsAHotRangeButNotAHotKey(t *testing.T) {
	ctx := context.Background()
	c := newMapCluster(t)
	s := c.open(t, 0)
	s.opts.SplitQPS = 1 // the test ends its windows itself
	kv := NewKV(s, nil, nil)
	acked := putKeys(t, kv, 0, 400, "v")
	for range 20 {
		if _, err := kv.Get(ctx, &kvpb.GetRequest{Key: []byte("user000007")}); err != nil {
			t.Fatal(err)
		}
	}
	s.checkLoad(ctx, 1) // the puts' window
	got := regionNames(s)
	if len(got) != 2 {
		t.Fatalf("after a window of writes over 400 keys the store serves %v, want two halves", got)
	}
	left := s.Assignments()[0].Span
	if string(left.End) < "user000150" || string(left.End) > "user000250" {
		t.Fatalf("the load split at %q, not near the middle of the written range", left.End)
	}
	checkKeys(t, kv, acked)
	for range 4000 {
		if _, err := kv.Get(ctx, &kvpb.GetRequest{Key: []byte("user000007")}); err != nil {
			t.Fatal(err)
		}
	}
	if n := s.checkLoad(ctx, 1); n != 0 || len(s.Assignments()) != 2 {
		t.Fatalf("a single hot key split its region (%d splits, regions %v)", n, regionNames(s))
	}
}

// Before its first window ends, a region's rate is what the window shows so
// far, not 0: a region that just moved to a store must not look idle (the
// balancer would take it for a cold merge candidate and move it back).
func TestARegionsRateIsKnownBeforeItsFirstWindowEnds(t *testing.T) {
	var l loadSampler
	if r := l.Rate(); r != 0 {
		t.Fatalf("no request yet: rate %v", r)
	}
	for range 100 {
		l.record([]byte("k"))
	}
	if r := l.Rate(); r <= 0 {
		t.Fatalf("100 requests in the first window: rate %v, want > 0", r)
	}
	if r, _ := l.take(time.Second); r != 100 {
		t.Fatalf("the window's rate %v, want 100/s", r)
	}
	if r := l.Rate(); r != 100 {
		t.Fatalf("after the window: rate %v, want the window's 100/s", r)
	}
}
