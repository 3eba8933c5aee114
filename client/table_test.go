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

// Each store's readings of a region appear once, by store name, with its
// own address rather than the Service's it was also reached through.
func TestTableStatsOnePerStore(t *testing.T) {
	peers := []string{"10.0.0.1:7400"}
	info := func(bytes int64) []*kvpb.RegionInfo {
		r := regions("r0")
		r[0].Store, r[0].DataBytes, r[0].RequestsPerSecond = "kv-0", bytes, 2.5
		r[0].Compaction = &kvpb.RegionCompaction{Running: true, Location: "remote", Worker: "10.0.1.9:7500"}
		return r
	}
	tb := buildTable([]answer{
		{addr: "svc:7400", seed: true, resp: &kvpb.RegionsResponse{Regions: info(1), Peers: peers}},
		{addr: "10.0.0.1:7400", resp: &kvpb.RegionsResponse{Regions: info(2), Peers: peers}},
	}, 1)
	st := tb.regions[0].Stats
	if len(st) != 1 || st[0].Store != "kv-0" || st[0].Addr != "10.0.0.1:7400" || st[0].DataBytes != 2 || st[0].RequestsPerSecond != 2.5 {
		t.Fatalf("stats %+v, want kv-0's own answer once", st)
	}
	if got := st[0].Compaction.String(); got != "remote 10.0.1.9:7500" {
		t.Errorf("compaction %q", got)
	}
	// Through the Service alone, the readings still come, naming the store.
	only := BuildRegions([]StoreAnswer{{Addr: "kv-0", Resp: &kvpb.RegionsResponse{Regions: info(3)}}})
	if len(only) != 1 || !slices.Equal(only[0].Owners, []string{"kv-0"}) || only[0].Stats[0].DataBytes != 3 {
		t.Fatalf("BuildRegions: %+v, want kv-0 the owner of r0", only)
	}
}

func TestCompactionStateString(t *testing.T) {
	for want, c := range map[string]CompactionState{
		"idle":              {},
		"idle+queued":       {Queued: true},
		"waiting":           {Running: true},
		"local":             {Running: true, Location: "local"},
		"remote w:1+queued": {Running: true, Queued: true, Location: "remote", Worker: "w:1"},
	} {
		if got := c.String(); got != want {
			t.Errorf("%+v: %q, want %q", c, got, want)
		}
	}
}
