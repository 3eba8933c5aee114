package client

import (
	"slices"
	"testing"

	kvpb "github.com/bellows-kv/bellows/proto/bellows/kv/v1"
)

func regions(names ...string) []*kvpb.RegionInfo {
	// Four regions split by first byte: 0x00–0x40, 0x40–0x80, 0x80–0xc0, 0xc0–.
	bounds := map[string][2]string{
		"r0": {"", "\x40"}, "r1": {"\x40", "\x80"}, "r2": {"\x80", "\xc0"}, "r3": {"\xc0", ""},
	}
	var out []*kvpb.RegionInfo
	for _, n := range names {
		out = append(out, &kvpb.RegionInfo{Name: n, Start: []byte(bounds[n][0]), End: []byte(bounds[n][1])})
	}
	return out
}

func owners(t *testing.T, tb *table, key string) []string {
	t.Helper()
	r, ok := tb.lookup([]byte(key))
	if !ok {
		t.Fatalf("no region holds %q", key)
	}
	return r.Owners
}

// Peers become owners; a seed that lists peers (maybe a Service in front of
// them) gives ranges but is never an owner, unless it is itself a peer.
func TestTableOwnersArePeersNotAServiceSeed(t *testing.T) {
	peers := []string{"10.0.0.1:7400", "10.0.0.2:7400"}
	tb := buildTable([]answer{
		{addr: "bellows-client:7400", seed: true, resp: &kvpb.RegionsResponse{Regions: regions("r0", "r2"), Peers: peers}},
		{addr: "10.0.0.1:7400", resp: &kvpb.RegionsResponse{Regions: regions("r0", "r2"), Peers: peers}},
		{addr: "10.0.0.2:7400", resp: &kvpb.RegionsResponse{Regions: regions("r1", "r3"), Peers: peers}},
	}, 1)
	for key, want := range map[string]string{"\x00": "10.0.0.1:7400", "\x41": "10.0.0.2:7400", "\x80": "10.0.0.1:7400", "\xff\xff": "10.0.0.2:7400"} {
		if got := owners(t, tb, key); !slices.Equal(got, []string{want}) {
			t.Errorf("owners of %q = %v, want [%s]", key, got, want)
		}
	}
	if !slices.Equal(tb.peers, peers) {
		t.Errorf("peers %v, want %v", tb.peers, peers)
	}
}

// Only the Service answered (the pods are unreachable from here): the
// ranges are known, no owner is, so requests go to the seeds.
func TestTableWithOnlyAServiceSeedHasNoOwners(t *testing.T) {
	tb := buildTable([]answer{
		{addr: "svc:7400", seed: true, resp: &kvpb.RegionsResponse{Regions: regions("r1"), Peers: []string{"10.0.0.1:7400"}}},
	}, 1)
	if got := owners(t, tb, "\x41"); len(got) != 0 {
		t.Errorf("owners %v, want none", got)
	}
	if _, ok := tb.lookup([]byte("\x00")); ok {
		t.Errorf("r0 was never listed, yet a region holds \\x00")
	}
}

// A single store that does not forward lists no peers: it owns what it lists.
func TestTableStandaloneSeedOwnsItsRegions(t *testing.T) {
	tb := buildTable([]answer{{addr: "127.0.0.1:7400", seed: true, resp: &kvpb.RegionsResponse{Regions: regions("r0", "r1", "r2", "r3")}}}, 1)
	for _, key := range []string{"", "\x3f", "\x40", "\xc0", "\xff"} {
		if got := owners(t, tb, key); !slices.Equal(got, []string{"127.0.0.1:7400"}) {
			t.Errorf("owners of %q = %v", key, got)
		}
	}
}

// A region moving between stores is listed by both: both are owners, and
// the region's range is kept once.
func TestTableRegionListedByTwoStores(t *testing.T) {
	p := []string{"a:1", "b:1"}
	tb := buildTable([]answer{
		{addr: "a:1", resp: &kvpb.RegionsResponse{Regions: regions("r0", "r1"), Peers: p}},
		{addr: "b:1", resp: &kvpb.RegionsResponse{Regions: regions("r1"), Peers: p}},
	}, 1)
	if len(tb.regions) != 2 {
		t.Fatalf("%d regions, want 2: %+v", len(tb.regions), tb.regions)
	}
	if got := owners(t, tb, "\x50"); !slices.Equal(got, []string{"a:1", "b:1"}) {
		t.Errorf("owners %v, want both", got)
	}
}
