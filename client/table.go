package client

import (
	"bytes"
	"slices"
	"sort"

	kvpb "github.com/bellows-kv/bellows/proto/bellows/kv/v1"
)

// Region is one region of the cluster as the client last learned it: its
// key range and the stores that answered that they serve it.
type Region struct {
	Name string
	// Start is inclusive; End exclusive, empty for no upper bound.
	Start, End []byte
	// Owners are the addresses of the stores serving the region, in the
	// order requests try them. Usually one; two while the region moves
	// between stores (the new owner lists it while it waits for the old
	// one to release it). Empty when no store the client reaches directly
	// serves it: requests for it go through the seeds, which forward.
	Owners []string
}

// Contains reports whether key falls in the region's range.
func (r Region) Contains(key []byte) bool {
	return bytes.Compare(key, r.Start) >= 0 && (len(r.End) == 0 || bytes.Compare(key, r.End) < 0)
}

// answer is one store's Regions answer, by the address the client asked.
type answer struct {
	addr string
	// seed: addr is one of the addresses the client was given, which may
	// be a Service in front of every store rather than one store.
	seed bool
	resp *kvpb.RegionsResponse
}

// table is the client's routing table: the regions in key order. It is
// immutable once built; a refresh builds a new one.
type table struct {
	regions []Region
	// peers are the store addresses the answers listed: the next refresh
	// asks them as well as the seeds.
	peers []string
	gen   uint64
}

// buildTable makes the routing table from the stores' answers.
//
// Only an address that names one store becomes an owner: a peer address
// (discovery lists stores one by one), or a seed whose store does not
// forward (it lists no peers: a single store, `bellows local`). A seed that
// lists peers may be a Service that load-balances over them, so what it
// answered says nothing about which store is behind the address next time;
// its regions still enter the table (their ranges), but without it as owner.
func buildTable(answers []answer, gen uint64) *table {
	peerSet := map[string]bool{}
	for _, a := range answers {
		for _, p := range a.resp.GetPeers() {
			peerSet[p] = true
		}
	}
	byName := map[string]*Region{}
	for _, a := range answers {
		owner := !a.seed || peerSet[a.addr] || len(a.resp.GetPeers()) == 0
		for _, info := range a.resp.GetRegions() {
			r, ok := byName[info.Name]
			if !ok {
				r = &Region{Name: info.Name, Start: slices.Clone(info.Start), End: slices.Clone(info.End)}
				byName[info.Name] = r
			}
			if owner && !slices.Contains(r.Owners, a.addr) {
				r.Owners = append(r.Owners, a.addr)
			}
		}
	}
	t := &table{gen: gen}
	for _, r := range byName {
		t.regions = append(t.regions, *r)
	}
	sort.Slice(t.regions, func(i, j int) bool { return bytes.Compare(t.regions[i].Start, t.regions[j].Start) < 0 })
	for p := range peerSet {
		t.peers = append(t.peers, p)
	}
	slices.Sort(t.peers)
	return t
}

// lookup is the region holding key, or false when the table has none (not
// learned yet, or the stores answered with a gap).
func (t *table) lookup(key []byte) (Region, bool) {
	// The last region starting at or before key.
	i := sort.Search(len(t.regions), func(i int) bool { return bytes.Compare(t.regions[i].Start, key) > 0 }) - 1
	if i < 0 || !t.regions[i].Contains(key) {
		return Region{}, false
	}
	return t.regions[i], true
}

// lookupBelow is the region holding the keys just below key (empty key:
// past the last key, so the last region), or false when the table has
// none: where a reverse scan that ends at key goes on.
func (t *table) lookupBelow(key []byte) (Region, bool) {
	// The last region starting below key.
	i := len(t.regions) - 1
	if len(key) > 0 {
		i = sort.Search(len(t.regions), func(i int) bool { return bytes.Compare(t.regions[i].Start, key) >= 0 }) - 1
	}
	if i < 0 {
		return Region{}, false
	}
	r := t.regions[i]
	if len(r.End) > 0 && (len(key) == 0 || bytes.Compare(r.End, key) < 0) {
		return Region{}, false // a gap between r and key
	}
	return r, true
}
