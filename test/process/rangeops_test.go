package process

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"testing"

	"github.com/bellows-kv/bellows/client"
)

// BatchGet and DeleteRange across two regions of two stores: the client
// sends one BatchGet per region to its owner (no store forwards), the
// results in the keys' order; a DeleteRange over the boundary is one atomic
// commit per region and leaves exactly the keys outside the range.
func TestBatchGetAndDeleteRangeAcrossStores(t *testing.T) {
	ctx := context.Background()
	bucket := "file://" + t.TempDir()
	addrA, addrB := freeAddr(t), freeAddr(t)
	peers := addrA + "," + addrB
	a := startPeerStore(t, "store-a", bucket, t.TempDir(), addrA, "0/2", peers)
	b := startPeerStore(t, "store-b", bucket, t.TempDir(), addrB, "1/2", peers)
	c := newClient(t, a)
	owners := awaitOwners(t, c, a, b)
	if owners[regionName(0)] == owners[regionName(1)] {
		t.Fatalf("owners %v: want region-000 and region-001 on different stores", owners)
	}

	m := model{}
	for i := range 2 {
		for j := range 30 {
			k, v := regionKey(i, fmt.Sprintf("k%03d", j)), fmt.Sprintf("v-%d-%d", i, j)
			if _, err := c.Put(ctx, k, []byte(v)); err != nil {
				t.Fatalf("put %q: %v", k, err)
			}
			m[string(k)] = v
		}
	}
	before := forwardedTotal(t, a, b)
	keys := [][]byte{regionKey(1, "k029"), regionKey(0, "k000"), regionKey(3, "none"), regionKey(1, "k000"), regionKey(0, "k029"), regionKey(2, "none"), regionKey(0, "k000")}
	res, err := c.BatchGet(ctx, keys)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range res {
		want, ok := m[string(keys[i])]
		if string(r.Key) != string(keys[i]) || r.Found != ok || string(r.Value) != want {
			t.Fatalf("BatchGet result %d: %q = %q (found %t), want %q (found %t)", i, r.Key, r.Value, r.Found, want, ok)
		}
	}
	if after := forwardedTotal(t, a, b); after != before {
		t.Fatalf("a store forwarded %v calls of the BatchGet: the client should go to each region's owner", after-before)
	}

	// [region-000 k010, region-001 k020): 20 + 20 keys in two regions.
	start, end := regionKey(0, "k010"), regionKey(1, "k020")
	dr, err := c.DeleteRange(ctx, start, end)
	if err != nil {
		t.Fatal(err)
	}
	if dr.Deleted != 40 || len(dr.Commits) != 2 || dr.Commits[0].Region != regionName(0) || dr.Commits[1].Region != regionName(1) {
		t.Fatalf("DeleteRange = %+v, want 40 keys in one commit in region-000 and one in region-001", dr)
	}
	for k := range maps.Keys(m) {
		if k >= string(start) && k < string(end) {
			delete(m, k)
		}
	}
	kvs, err := c.ScanAll(ctx, nil, nil, client.ScanOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, kv := range kvs {
		got = append(got, string(kv.Key))
	}
	if want := m.sorted(); !slices.Equal(got, want) {
		t.Fatalf("after DeleteRange: %d keys, want the %d outside the range", len(got), len(want))
	}
	// A deleted key reads as absent in a BatchGet too; the commit
	// timestamp is the delete's: just below it the key is there.
	res, err = c.BatchGetAt(ctx, [][]byte{regionKey(0, "k010"), regionKey(0, "k009")}, dr.Commits[0].CommitTS-1)
	if err != nil || !res[0].Found || !res[1].Found {
		t.Fatalf("BatchGetAt just below the delete: %+v, %v; want both found", res, err)
	}
	res, err = c.BatchGet(ctx, [][]byte{regionKey(0, "k010"), regionKey(0, "k009")})
	if err != nil || res[0].Found || !res[1].Found {
		t.Fatalf("BatchGet after the delete: %+v, %v; want k010 absent, k009 found", res, err)
	}
}

// A reverse scan over the four regions of two stores: the client visits
// the regions right to left, each at its owner, and returns every key
// descending; a limit counts from the top across a boundary; a
// transaction's reverse scan reads its snapshot and its own writes.
func TestReverseScanAcrossRegionsOfTwoStores(t *testing.T) {
	ctx := context.Background()
	bucket := "file://" + t.TempDir()
	addrA, addrB := freeAddr(t), freeAddr(t)
	peers := addrA + "," + addrB
	a := startPeerStore(t, "store-a", bucket, t.TempDir(), addrA, "0/2", peers)
	b := startPeerStore(t, "store-b", bucket, t.TempDir(), addrB, "1/2", peers)
	c := newClient(t, a)
	awaitOwners(t, c, a, b)

	m := model{}
	for i := range 4 {
		for j := range 10 {
			k, v := regionKey(i, fmt.Sprintf("k%03d", j)), fmt.Sprintf("v-%d-%d", i, j)
			if _, err := c.Put(ctx, k, []byte(v)); err != nil {
				t.Fatalf("put %q: %v", k, err)
			}
			m[string(k)] = v
		}
	}
	keysOf := func(kvs []client.KeyValue) []string {
		var out []string
		for _, kv := range kvs {
			if m[string(kv.Key)] != string(kv.Value) {
				t.Fatalf("%q = %q, want %q", kv.Key, kv.Value, m[string(kv.Key)])
			}
			out = append(out, string(kv.Key))
		}
		return out
	}
	want := m.sorted()
	slices.Reverse(want)
	kvs, err := c.ScanAll(ctx, nil, nil, client.ScanOptions{Reverse: true})
	if err != nil {
		t.Fatal(err)
	}
	if got := keysOf(kvs); !slices.Equal(got, want) {
		t.Fatalf("reverse scan: %d keys, want all %d descending:\n%q", len(got), len(want), got)
	}
	// [region-000 k005, region-002 k003), limit 15: region-002's three,
	// region-001's ten, then region-000's two highest.
	kvs, err = c.ScanAll(ctx, regionKey(0, "k005"), regionKey(2, "k003"), client.ScanOptions{Reverse: true, Limit: 15})
	if err != nil {
		t.Fatal(err)
	}
	got := keysOf(kvs)
	if len(got) != 15 || got[0] != string(regionKey(2, "k002")) || got[3] != string(regionKey(1, "k009")) || got[14] != string(regionKey(0, "k008")) {
		t.Fatalf("reverse scan with limit 15 across three regions: %q", got)
	}

	x, err := c.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = x.Rollback(ctx) }()
	pastUncertainty(x)
	if _, err := c.Put(ctx, regionKey(3, "k100"), []byte("after the snapshot")); err != nil {
		t.Fatal(err)
	}
	x.Put(regionKey(2, "k100"), []byte("mine"))
	x.Delete(regionKey(3, "k009"))
	kvs, err = x.ScanAll(ctx, regionKey(2, "k008"), nil, client.ScanOptions{Reverse: true})
	if err != nil {
		t.Fatal(err)
	}
	var txnKeys []string
	for _, kv := range kvs {
		txnKeys = append(txnKeys, string(kv.Key))
	}
	wantTxn := []string{string(regionKey(3, "k008"))}
	for j := 7; j >= 0; j-- {
		wantTxn = append(wantTxn, string(regionKey(3, fmt.Sprintf("k%03d", j))))
	}
	wantTxn = append(wantTxn, string(regionKey(2, "k100")), string(regionKey(2, "k009")), string(regionKey(2, "k008")))
	if !slices.Equal(txnKeys, wantTxn) {
		t.Fatalf("transaction's reverse scan: %q, want %q", txnKeys, wantTxn)
	}
}
