package client

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	kvpb "github.com/bellows-kv/bellows/proto/bellows/kv/v1"
)

// Scan streams the keys of [start, end) in this store's regions, one pair
// a message, descending when reverse; cutAfter > 0 breaks the next stream
// after that many pairs (a store going away mid-scan).
func (s *rangeStore) Scan(req *kvpb.ScanRequest, stream kvpb.KV_ScanServer) error {
	if err := s.record(fmt.Sprintf("Scan [%s,%s) limit %d", req.Start, req.End, req.Limit)); err != nil {
		return err
	}
	s.mu.Lock()
	var keys []string
	s.data.Range(func(k, _ any) bool {
		kb := []byte(k.(string))
		if bytes.Compare(kb, req.Start) >= 0 && (len(req.End) == 0 || bytes.Compare(kb, req.End) < 0) && s.region(kb) != nil {
			keys = append(keys, k.(string))
		}
		return true
	})
	cut := s.cutAfter
	s.cutAfter = 0
	s.mu.Unlock()
	slices.Sort(keys)
	if req.Reverse {
		slices.Reverse(keys)
	}
	for i, k := range keys {
		if req.Limit > 0 && i == int(req.Limit) {
			break
		}
		if cut > 0 && i == cut {
			return status.Error(codes.Unavailable, "scripted cut")
		}
		v, _ := s.data.Load(k)
		if err := stream.Send(&kvpb.ScanResponse{Pairs: []*kvpb.KeyValue{{Key: []byte(k), Value: []byte(v.(string))}}}); err != nil {
			return err
		}
	}
	return nil
}

func keysOf(it *Iterator) string {
	defer it.Close()
	var out []string
	for it.Next() {
		out = append(out, string(it.Key()))
	}
	if err := it.Err(); err != nil {
		out = append(out, "error: "+err.Error())
	}
	return strings.Join(out, " ")
}

// A reverse scan asks the regions' owners right to left, each for the part
// of its region below where the scan is, and a stream that breaks resumes
// before the last key returned: no key twice, none lost, the limit counted
// from the top.
func TestReverseScanWalksRegionsRightToLeftAndResumesBeforeTheLastKey(t *testing.T) {
	data := map[string]string{}
	for _, k := range []string{"a", "b", "c", "d", "e", "f", "g", "h"} {
		data[k] = "v" + k
	}
	c, stores := startRangeStores(t, data,
		[]*kvpb.RegionInfo{{Name: "r0", End: []byte("c")}, {Name: "r2", Start: []byte("f")}},
		[]*kvpb.RegionInfo{{Name: "r1", Start: []byte("c"), End: []byte("f")}})
	ctx := bounded(t)
	calls := func() string {
		var out []string
		for _, s := range stores {
			out = append(out, strings.Join(s.takeCalls(), "; "))
		}
		return strings.Join(out, " | ")
	}
	if got := keysOf(c.Scan(ctx, nil, nil, ScanOptions{Reverse: true})); got != "h g f e d c b a" {
		t.Fatalf("reverse scan = %q", got)
	}
	if got, want := calls(), "Scan [f,) limit 0; Scan [,c) limit 0 | Scan [c,f) limit 0"; got != want {
		t.Fatalf("calls %q, want %q", got, want)
	}

	stores[1].mu.Lock()
	stores[1].cutAfter = 1
	stores[1].mu.Unlock()
	if got := keysOf(c.Scan(ctx, []byte("b"), []byte("g"), ScanOptions{Reverse: true, Limit: 5})); got != "f e d c b" {
		t.Fatalf("reverse scan [b, g) limit 5 broken after e = %q", got)
	}
	if got, want := calls(), "Scan [f,g) limit 5; Scan [b,c) limit 1 | Scan [c,f) limit 4; Scan [c,e) limit 3"; got != want {
		t.Fatalf("calls %q, want %q", got, want)
	}
	if got := keysOf(c.ScanPrefix(ctx, []byte("d"), ScanOptions{Reverse: true})); got != "d" {
		t.Fatalf("reverse prefix scan = %q", got)
	}
	// Reverse only changes the order: an inverted range is refused.
	if got := keysOf(c.Scan(ctx, []byte("g"), []byte("b"), ScanOptions{Reverse: true})); !strings.Contains(got, "error: ") || !strings.Contains(got, "is after end") {
		t.Fatalf("reverse scan g b = %q, want ErrInvalidRange", got)
	}
}
