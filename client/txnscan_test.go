package client

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"testing"

	kvpb "github.com/bellows-kv/bellows/proto/bellows/kv/v1"
)

// scanTxnStore is a txnStore whose TxnScan streams the stored pairs of
// [start, end) at any start, two to a chunk.
type scanTxnStore struct {
	txnStore
	stored []string // keys in order; the value is "s"+key
}

func (s *scanTxnStore) TxnScan(req *kvpb.TxnScanRequest, stream kvpb.KV_TxnScanServer) error {
	var chunk []*kvpb.KeyValue
	n := 0
	stored := slices.Clone(s.stored)
	if req.Reverse {
		slices.Reverse(stored)
	}
	for _, k := range stored {
		if bytes.Compare([]byte(k), req.Start) < 0 || (len(req.End) > 0 && bytes.Compare([]byte(k), req.End) >= 0) {
			continue
		}
		if req.Limit > 0 && n == int(req.Limit) {
			break
		}
		n++
		chunk = append(chunk, &kvpb.KeyValue{Key: []byte(k), Value: []byte("s" + k)})
		if len(chunk) == 2 {
			if err := stream.Send(&kvpb.ScanResponse{Pairs: chunk}); err != nil {
				return err
			}
			chunk = nil
		}
	}
	if len(chunk) > 0 {
		return stream.Send(&kvpb.ScanResponse{Pairs: chunk})
	}
	return nil
}

func pairsOf(it *Iterator) string {
	defer it.Close()
	var out []string
	for it.Next() {
		out = append(out, fmt.Sprintf("%s=%s", it.Key(), it.Value()))
	}
	if err := it.Err(); err != nil {
		out = append(out, "error: "+err.Error())
	}
	return strings.Join(out, " ")
}

// A transaction's Scan iterates: its own writes merged over the snapshot's
// pairs in key order, a delete hiding one, the limit counting what it
// returns.
func TestTxnScanIteratesItsWritesOverTheSnapshot(t *testing.T) {
	s := &scanTxnStore{stored: []string{"a", "b", "c", "d", "e"}}
	c := startKVServer(t, s)
	ctx := bounded(t)
	x, err := c.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	x.Put([]byte("b"), []byte("mine"))
	x.Delete([]byte("c"))
	x.Put([]byte("c0"), []byte("new"))
	x.Put([]byte("z"), []byte("last"))
	x.Put([]byte("0"), []byte("first"))
	for _, tc := range []struct {
		start, end string
		limit      int
		want       string
	}{
		{"", "", 0, "0=first a=sa b=mine c0=new d=sd e=se z=last"},
		{"b", "d", 0, "b=mine c0=new"},
		{"", "", 3, "0=first a=sa b=mine"},
		{"b", "", 3, "b=mine c0=new d=sd"}, // c's delete does not use up the limit
		{"c", "c0", 0, ""},
		{"y", "", 0, "z=last"},
	} {
		if got := pairsOf(x.Scan(ctx, []byte(tc.start), []byte(tc.end), ScanOptions{Limit: tc.limit})); got != tc.want {
			t.Errorf("Scan [%q, %q) limit %d = %s, want %s", tc.start, tc.end, tc.limit, got, tc.want)
		}
	}
	// Reverse: the same merge, descending, the limit from the top.
	for _, tc := range []struct {
		start, end string
		limit      int
		want       string
	}{
		{"", "", 0, "z=last e=se d=sd c0=new b=mine a=sa 0=first"},
		{"b", "d", 0, "c0=new b=mine"},
		{"", "", 3, "z=last e=se d=sd"},
		{"", "d", 2, "c0=new b=mine"}, // c's delete does not use up the limit
		{"c", "c0", 0, ""},
	} {
		if got := pairsOf(x.Scan(ctx, []byte(tc.start), []byte(tc.end), ScanOptions{Limit: tc.limit, Reverse: true})); got != tc.want {
			t.Errorf("reverse Scan [%q, %q) limit %d = %s, want %s", tc.start, tc.end, tc.limit, got, tc.want)
		}
	}
	// The writes buffered when Scan was called, not later ones.
	it := x.Scan(ctx, nil, nil, ScanOptions{})
	x.Put([]byte("a"), []byte("later"))
	if got := pairsOf(it); !strings.Contains(got, "a=sa") {
		t.Errorf("an open scan saw a later write: %s", got)
	}
	rows, err := x.ScanAll(ctx, []byte("a"), []byte("b"), ScanOptions{})
	if err != nil || len(rows) != 1 || string(rows[0].Value) != "later" {
		t.Errorf("ScanAll [a, b) = %q, %v", rows, err)
	}
	ts := uint64(1)
	if got := pairsOf(x.Scan(ctx, nil, nil, ScanOptions{ReadTS: &ts})); !strings.Contains(got, "error: ") || strings.Contains(got, "=") {
		t.Errorf("Scan with a ReadTS: %s, want only an error", got)
	}
}
