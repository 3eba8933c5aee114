// Package route tells a store which peer store owns a region, so a store can
// forward a request for a key it does not serve (see server.KV).
//
// The map is built from the peers' own answers to the Regions RPC: a store
// lists exactly the regions it is assigned, so the router learns owners, not
// guesses. It is refreshed periodically and whenever a forwarder finds it
// stale (no owner known, or the owner answered UNAVAILABLE / OUT_OF_RANGE).
//
// Invariants:
//   - The map never names this store: a peer whose Regions answer carries
//     this router's identity (response header StoreIDHeader) is itself, however
//     it was addressed (pod IP, DNS name, 127.0.0.1, a static list that
//     includes every store).
//   - A region may have several owners for a moment (a region moving between
//     pods: the new owner lists it while waiting for the old one to release
//     it); Owners returns them all and the forwarder tries each.
package route

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	kvpb "github.com/bellows-kv/bellows/proto/bellows/kv/v1"
)

const (
	// ForwardedHeader marks a request one store forwarded to another. A store
	// never forwards such a request again (no loops): it answers from its own
	// regions, and the forwarder refreshes its map and retries.
	ForwardedHeader = "bellows-forwarded"
	// StoreIDHeader is the response header of Regions carrying the answering
	// store's identity, how a router recognises itself among its peers.
	StoreIDHeader = "bellows-store-id"
)

// Options configure a Router.
type Options struct {
	// Peers lists the stores' gRPC addresses (host:port), this store
	// possibly among them; called at every refresh, so it may follow
	// discovery.
	Peers func() []string
	// Logger reports peers that do not answer; nil discards.
	Logger *slog.Logger
	// RefreshInterval is how often Run rebuilds the map. Default 10s.
	RefreshInterval time.Duration
	// MinRefreshGap spaces on-demand refreshes: a region no store serves
	// yet would otherwise cost every request one Regions call per peer.
	// Default 100ms.
	MinRefreshGap time.Duration
	// RegionsTimeout bounds one peer's Regions call during a refresh.
	// Default 3s.
	RegionsTimeout time.Duration
}

// EnsureDefaults fills the unset fields with their defaults.
func (o *Options) EnsureDefaults() {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.RefreshInterval <= 0 {
		o.RefreshInterval = 10 * time.Second
	}
	if o.MinRefreshGap <= 0 {
		o.MinRefreshGap = 100 * time.Millisecond
	}
	if o.RegionsTimeout <= 0 {
		o.RegionsTimeout = 3 * time.Second
	}
}

// Router maps region names to the addresses of the peer stores serving them.
type Router struct {
	self  string
	opts  Options
	peers func() []string
	log   *slog.Logger

	refreshMu sync.Mutex // one refresh at a time

	mu     sync.Mutex
	conns  map[string]*grpc.ClientConn // by peer address
	owners map[string][]string         // region → peer addresses, sorted
	gen    uint64                      // bumped by every refresh
	last   time.Time                   // when the last refresh started
}

// New returns a router with a fresh random identity and an empty map; call
// Refresh or Run to fill it.
func New(o Options) *Router {
	o.EnsureDefaults()
	id := make([]byte, 8)
	_, _ = rand.Read(id)
	return &Router{self: hex.EncodeToString(id), opts: o, peers: o.Peers, log: o.Logger,
		conns: map[string]*grpc.ClientConn{}, owners: map[string][]string{}}
}

// Self is this store's identity, to be sent as StoreIDHeader on its Regions
// answers.
func (r *Router) Self() string { return r.self }

// Owners returns the peers serving region and the map's generation, to pass
// to Refresh when they turn out stale.
func (r *Router) Owners(region string) (addrs []string, gen uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.owners[region], r.gen
}

// Client is the KV client of a peer, over a connection kept per peer.
func (r *Router) Client(addr string) (kvpb.KVClient, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := r.conns[addr]
	if c == nil {
		var err error
		if c, err = grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials())); err != nil {
			return nil, err
		}
		r.conns[addr] = c
	}
	return kvpb.NewKVClient(c), nil
}

// Refresh rebuilds the map from every peer's Regions answer, unless it
// changed since the caller read generation seen: a concurrent caller already
// refreshed it. Refreshes are at least Options.MinRefreshGap apart; a caller
// waits for its turn, sharing the refresh with every caller waiting
// meanwhile. It does not use the caller's context: a refresh serves every
// request waiting on it.
func (r *Router) Refresh(seen uint64) {
	r.refreshMu.Lock()
	defer r.refreshMu.Unlock()
	r.mu.Lock()
	stale, wait := r.gen == seen, r.opts.MinRefreshGap-time.Since(r.last)
	r.mu.Unlock()
	if !stale {
		return
	}
	if wait > 0 {
		time.Sleep(wait) // rate limit, not synchronisation
	}
	r.refresh()
}

func (r *Router) refresh() {
	began := time.Now()
	peers := slices.Compact(slices.Sorted(slices.Values(r.peers())))
	type answer struct {
		addr    string
		regions []string
	}
	answers := make(chan answer, len(peers))
	var wg sync.WaitGroup
	for _, addr := range peers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if regions, ok := r.ask(addr); ok {
				answers <- answer{addr, regions}
			}
		}()
	}
	wg.Wait()
	close(answers)
	owners := map[string][]string{}
	for a := range answers {
		for _, name := range a.regions {
			owners[name] = append(owners[name], a.addr)
		}
	}
	for _, addrs := range owners {
		slices.Sort(addrs)
	}

	r.mu.Lock()
	defer r.mu.Unlock()
	r.owners, r.last = owners, began
	r.gen++
	// Close the connections of peers discovery no longer lists (scaled
	// down), so they do not accumulate.
	for addr, c := range r.conns {
		if !slices.Contains(peers, addr) {
			_ = c.Close()
			delete(r.conns, addr)
		}
	}
}

// ask returns the regions peer addr serves, or false when it is this store
// or did not answer.
func (r *Router) ask(addr string) ([]string, bool) {
	var (
		resp *kvpb.RegionsResponse
		md   metadata.MD
		err  error
	)
	// A connection that failed backs off for up to seconds, failing every
	// call at once meanwhile, even once the peer is back (restarted): after
	// a failure, dial afresh once. A peer still down refuses at once.
	for attempt := 0; attempt < 2; attempt++ {
		var c kvpb.KVClient
		if c, err = r.Client(addr); err != nil {
			r.log.Warn("peer store: bad address", "peer", addr, "err", err)
			return nil, false
		}
		ctx, cancel := context.WithTimeout(context.Background(), r.opts.RegionsTimeout)
		resp, err = c.Regions(ctx, &kvpb.RegionsRequest{}, grpc.Header(&md))
		cancel()
		if err == nil {
			break
		}
		r.drop(addr)
	}
	if err != nil {
		r.log.Debug("peer store did not answer Regions", "peer", addr, "err", err)
		return nil, false
	}
	if slices.Contains(md.Get(StoreIDHeader), r.self) {
		return nil, false
	}
	names := make([]string, 0, len(resp.Regions))
	for _, g := range resp.Regions {
		names = append(names, g.Name)
	}
	return names, true
}

// drop closes the connection to addr.
func (r *Router) drop(addr string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if c := r.conns[addr]; c != nil {
		_ = c.Close()
		delete(r.conns, addr)
	}
}

// Run refreshes the map now and every Options.RefreshInterval until ctx
// ends.
func (r *Router) Run(ctx context.Context) {
	t := time.NewTicker(r.opts.RefreshInterval)
	defer t.Stop()
	for {
		r.refreshMu.Lock()
		r.refresh()
		r.refreshMu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Close closes the peer connections.
func (r *Router) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	for addr, c := range r.conns {
		_ = c.Close()
		delete(r.conns, addr)
	}
	return nil
}
