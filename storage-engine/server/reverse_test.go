package server

import (
	"context"
	"slices"
	"sort"
	"strings"
	"testing"

	kvpb "github.com/bellows-kv/bellows/proto/bellows/kv/v1"
	"github.com/bellows-kv/bellows/storage-engine/server/route"
)

// reverseScan runs a reverse Scan on s and returns its keys joined by
// spaces.
func reverseScan(t *testing.T, s *KV, start, end string, limit uint32) string {
	t.Helper()
	sink := &scanSink{ctx: context.Background()}
	if err := s.Scan(&kvpb.ScanRequest{Start: []byte(start), End: []byte(end), Limit: limit, Reverse: true}, sink); err != nil {
		t.Fatalf("reverse scan [%q, %q) limit %d: %v", start, end, limit, err)
	}
	return strings.Join(sink.keys, " ")
}

// A reverse scan reads the regions right to left, each from its end down,
// and its limit counts from the top, also when it ends in the region left
// of the boundary (m).
func TestReverseScanWalksRegionsRightToLeft(t *testing.T) {
	s := localKV(t)
	ctx := context.Background()
	for _, k := range []string{"a", "j", "k", "l", "m", "n", "o", "z"} {
		putKV(t, s, k, "v"+k)
	}
	startTS := putKV(t, s, "l", "v2")
	if _, err := s.Delete(ctx, &kvpb.DeleteRequest{Key: []byte("n")}); err != nil {
		t.Fatal(err)
	}
	putKV(t, s, "lz", "late") // after startTS: not in the snapshot
	for _, c := range []struct {
		start, end string
		limit      uint32
		want       string
	}{
		{"", "", 0, "z o m lz l k j a"},
		{"b", "y", 0, "o m lz l k j"},
		{"k", "o", 3, "m lz l"},
		{"k", "o", 2, "m lz"},
		{"j", "m", 0, "lz l k j"},
		{"m", "", 1, "z"},
		{"n", "o", 0, ""},
		{"o", "b", 0, ""}, // inverted: nothing, as forward
	} {
		if got := reverseScan(t, s, c.start, c.end, c.limit); got != c.want {
			t.Errorf("reverse scan [%q, %q) limit %d = %q, want %q", c.start, c.end, c.limit, got, c.want)
		}
	}
	// A transaction's reverse scan reads its snapshot in every region.
	sink := &scanSink{ctx: ctx}
	if err := s.TxnScan(&kvpb.TxnScanRequest{StartTs: startTS, Start: []byte("b"), End: []byte("y"), Reverse: true}, sink); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(sink.keys, " "); got != "o n m l k j" {
		t.Fatalf("reverse TxnScan at %d = %q, want the snapshot's keys, descending", startTS, got)
	}
}

// A reverse scan at a store that owns only the left region forwards the
// right region's part first, then reads its own: the order and the limit
// hold across the forwarded boundary.
func TestReverseScanIsForwardedRightToLeft(t *testing.T) {
	p := newPair(t, route.Options{})
	ctx := context.Background()
	var keys []string
	for _, k := range []string{"a", "c", "l", "m", "n", "x"} {
		if _, err := p.a.Put(ctx, &kvpb.PutRequest{Key: []byte(k), Value: []byte("v" + k)}); err != nil {
			t.Fatal(err)
		}
		keys = append(keys, k)
	}
	sort.Sort(sort.Reverse(sort.StringSlice(keys)))
	if got := reverseScan(t, p.a, "", "", 0); got != strings.Join(keys, " ") {
		t.Fatalf("forwarded reverse scan = %q, want %q", got, strings.Join(keys, " "))
	}
	if got := reverseScan(t, p.a, "b", "n", 3); got != "m l c" {
		t.Fatalf("forwarded reverse scan [b, n) limit 3 = %q, want %q", got, "m l c")
	}
	// The owner forwards nothing back: its part alone.
	if got := reverseScan(t, p.b.kv, "m", "", 0); got != "x n m" {
		t.Fatalf("the owner's reverse scan = %q", got)
	}
}

// checkReverse reverse-scans the whole key space of kv and wants acked's
// keys, descending.
func checkReverse(t *testing.T, kv *KV, acked map[string]string) {
	t.Helper()
	var want []string
	for k := range acked {
		want = append(want, k)
	}
	sort.Strings(want)
	slices.Reverse(want)
	sink := &scanSink{ctx: context.Background()}
	if err := kv.Scan(&kvpb.ScanRequest{Reverse: true}, sink); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(sink.keys, want) {
		t.Fatalf("reverse scan: %d keys, want the %d acknowledged ones descending", len(sink.keys), len(want))
	}
}
