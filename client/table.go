package client

import (
	"bytes"
	"slices"
	"sort"
	"time"

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
	// Stats are each store's readings of the region (its Regions answer),
	// one per store that says it serves the region, by store name; also
	// from a seed that is a Service, since each reading names its store.
	Stats []RegionStats
	// FailingOverFrom names the store (its ordinal) whose liveness lease
	// ran out while it owned the region, while the region fails over
	// (docs/failover.md): no store answering serves it open. Requests for
	// it are retried until its new owner has opened it. Empty otherwise.
	FailingOverFrom string
}

// RegionStats is what one store reports of a region it serves: its size,
// load and state there (the store's per-region metrics, read at once).
type RegionStats struct {
	// Store is the store's name (in Kubernetes, its pod); Addr, the
	// address it answered at, which is that store's own only when listed
	// among the region's Owners.
	Store, Addr string
	// Waiting says why the region is not open there yet (another store
	// still owns it); the readings are zero meanwhile.
	Waiting string
	// FailingOverFrom names the store whose liveness lease ran out, when
	// this store is taking the region over from it (and Waiting says so),
	// or is that store itself (its own lease has run out).
	FailingOverFrom string
	SSTFiles        int
	// DataBytes is the region's size as a split counts it (its SSTs'
	// blocks in its range and its memstores); MemstoreBytes, the part not
	// yet flushed; WALBytes, its WAL on disk.
	DataBytes, MemstoreBytes, WALBytes int64
	// OldestUnflushed is the age of the oldest write not yet in an SST
	// (0: none).
	OldestUnflushed time.Duration
	// Requests served there since the region opened there, and per second
	// over the store's last load window.
	Requests          uint64
	RequestsPerSecond float64
	Compaction        CompactionState
	// WarmupProgress is the fraction of the last compaction output warmed
	// into the cache; CachedRatio, of the live files' blocks cached.
	WarmupProgress, CachedRatio float64
}

// CompactionState is what a region's compactions are doing at a store.
type CompactionState struct {
	// Running: a compaction holds the region; Location is "" while it
	// waits to start, "local" in the store, "remote" at Worker.
	Running, Queued  bool
	Location, Worker string
}

// String is the state in a word or two: idle, waiting, local, remote
// (offloaded to the worker), each "+queued" when another waits.
func (c CompactionState) String() string {
	s := "idle"
	switch {
	case c.Running && c.Location == "":
		s = "waiting"
	case c.Running && c.Worker != "":
		s = c.Location + " " + c.Worker
	case c.Running:
		s = c.Location
	}
	if c.Queued {
		s += "+queued"
	}
	return s
}

func statsOf(addr string, info *kvpb.RegionInfo) RegionStats {
	c := info.GetCompaction()
	return RegionStats{
		Store: info.GetStore(), Addr: addr, Waiting: info.GetWaiting(), FailingOverFrom: info.GetFailingOverFrom(), SSTFiles: int(info.GetSstFiles()),
		DataBytes: info.GetDataBytes(), MemstoreBytes: info.GetMemstoreBytes(), WALBytes: info.GetWalBytes(),
		OldestUnflushed: time.Duration(info.GetOldestUnflushedMs()) * time.Millisecond,
		Requests:        info.GetRequests(), RequestsPerSecond: info.GetRequestsPerSecond(),
		Compaction:     CompactionState{Running: c.GetRunning(), Queued: c.GetQueued(), Location: c.GetLocation(), Worker: c.GetWorker()},
		WarmupProgress: info.GetWarmupProgress(), CachedRatio: info.GetCachedRatio(),
	}
}

// StoreAnswer is one store's Regions answer, by the address asked.
type StoreAnswer struct {
	Addr string
	Resp *kvpb.RegionsResponse
}

// BuildRegions makes the regions, in key order, from answers of stores
// asked one by one (each address is its store's own: the owner of what it
// lists), as a caller that reaches each store by its own way does (the
// kubectl plugin, through a port-forward to each pod).
func BuildRegions(answers []StoreAnswer) []Region {
	as := make([]answer, len(answers))
	for i, a := range answers {
		as[i] = answer{addr: a.Addr, resp: a.Resp}
	}
	return buildTable(as, 0).regions
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
			// One reading per store: a store reached both through a
			// Service and directly answers twice; its direct address is
			// the one worth showing.
			st := statsOf(a.addr, info)
			switch i := slices.IndexFunc(r.Stats, func(o RegionStats) bool { return o.Store == st.Store && (st.Store != "" || o.Addr == st.Addr) }); {
			case i < 0:
				r.Stats = append(r.Stats, st)
			case owner:
				r.Stats[i] = st
			}
		}
	}
	// A region some store says fails over without serving it (its owner
	// by the map is dead): in the table by its range, with no owner, so
	// its requests go through the seeds, which answer for it.
	failing := map[string]string{}
	for _, a := range answers {
		for _, f := range a.resp.GetFailingOver() {
			if _, ok := byName[f.Name]; !ok {
				byName[f.Name] = &Region{Name: f.Name, Start: slices.Clone(f.Start), End: slices.Clone(f.End)}
			}
			failing[f.Name] = f.Store
		}
	}
	t := &table{gen: gen}
	for _, r := range byName {
		r.FailingOverFrom = failingOverFrom(r, failing[r.Name])
		t.regions = append(t.regions, *r)
	}
	sort.Slice(t.regions, func(i, j int) bool { return bytes.Compare(t.regions[i].Start, t.regions[j].Start) < 0 })
	for p := range peerSet {
		t.peers = append(t.peers, p)
	}
	slices.Sort(t.peers)
	return t
}

// failingOverFrom is the store r fails over from, by its readings or
// (when none names one) from, what a store that does not serve it said;
// "" when a store serves it open, its lease in force: a store whose map
// is older may still name the dead owner.
func failingOverFrom(r *Region, from string) string {
	for _, st := range r.Stats {
		if st.Waiting == "" && st.FailingOverFrom == "" {
			return ""
		}
	}
	for _, st := range r.Stats {
		if st.FailingOverFrom != "" {
			return st.FailingOverFrom
		}
	}
	return from
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
