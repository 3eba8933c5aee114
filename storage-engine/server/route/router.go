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
//   - A connection is never closed under a call using it. Every forwarded
//     call (and every Regions probe) holds a Lease on its peer's connection
//     from Acquire to Release. A connection the router replaces (its probe
//     failed: it dials afresh) or removes (the peer left the list) is
//     retired: no new lease gets it, and it is closed when its last lease
//     is released, or at the end of its drain (the latest deadline among its
//     users, at most Options.MaxDrain) if a user outlives that.
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
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/bellows-kv/bellows/internal/grpcmem"
	kvpb "github.com/bellows-kv/bellows/proto/bellows/kv/v1"
)

const (
	// ForwardedHeader marks a request one store forwarded to another. A store
	// never forwards such a request again (no loops): it answers from its own
	// regions, and the forwarder refreshes its map and retries.
	ForwardedHeader = "bellows-forwarded"
	// StoreIDHeader is the response header of Regions carrying the answering
	// store's identity, how a router recognises itself among its peers. A
	// store also sends it as a trailer on every answer to a forwarded
	// request, so the forwarder tells the owner's answers (whose codes it
	// passes on) from failures on the way (which it answers UNAVAILABLE).
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
	// MaxDrain bounds how long a retired connection (replaced or removed)
	// stays open for the calls still using it: it is closed when the last
	// one is released, at the latest deadline among them, or MaxDrain after
	// it was retired, whichever comes first. A call still running then
	// fails (the forwarder answers UNAVAILABLE). Default 2m.
	MaxDrain time.Duration
	// MaxRecvMessageBytes bounds an answer a peer forwards back (a Get of
	// a largest value); 0 keeps gRPC's default, 4 MiB.
	MaxRecvMessageBytes int
	// DialOption, when set, carries the transport credentials peers are
	// dialled with (TLS); nil dials without.
	DialOption grpc.DialOption
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
	if o.MaxDrain <= 0 {
		o.MaxDrain = 2 * time.Minute
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
	conns  map[string]*peerConn // the current connection by peer address
	owners map[string][]string  // region → peer addresses, sorted
	gen    uint64               // bumped by every refresh
	last   time.Time            // when the last refresh started
	closed bool                 // Close was called: no new leases
}

// peerConn is one connection to a peer and the leases using it. Its fields
// are guarded by Router.mu.
type peerConn struct {
	addr    string
	cc      *grpc.ClientConn
	kv      kvpb.KVClient
	leases  map[*Lease]struct{}
	retired bool        // no longer in Router.conns: no new leases
	closed  bool        // cc.Close was called (or is about to be)
	drain   *time.Timer // closes a retired connection whose users outlive its drain
}

// Lease is one use of a peer's connection, from Router.Acquire to Release:
// the connection stays open until every lease on it is released.
type Lease struct {
	r        *Router
	pc       *peerConn
	deadline time.Time // the user's deadline; zero: none
	once     sync.Once
}

// Client is the peer's KV client over the leased connection.
func (l *Lease) Client() kvpb.KVClient { return l.pc.kv }

// Conn is the leased connection, for the peer's other services (Admin).
func (l *Lease) Conn() grpc.ClientConnInterface { return l.pc.cc }

// Addr is the peer's address.
func (l *Lease) Addr() string { return l.pc.addr }

// Release ends the use; it closes the connection if it was retired and this
// was its last user. Calling it again does nothing.
func (l *Lease) Release() {
	l.once.Do(func() {
		r := l.r
		r.mu.Lock()
		delete(l.pc.leases, l)
		cc := r.closeIfIdleLocked(l.pc)
		r.mu.Unlock()
		closeConn(cc)
	})
}

// New returns a router with a fresh random identity and an empty map; call
// Refresh or Run to fill it.
func New(o Options) *Router {
	o.EnsureDefaults()
	id := make([]byte, 8)
	_, _ = rand.Read(id)
	return &Router{self: hex.EncodeToString(id), opts: o, peers: o.Peers, log: o.Logger,
		conns: map[string]*peerConn{}, owners: map[string][]string{}}
}

// Self is this store's identity, to be sent as StoreIDHeader on its Regions
// answers.
func (r *Router) Self() string { return r.self }

// Peers is the stores' addresses as discovery lists them now, sorted, this
// store possibly among them (what a Regions answer tells clients).
func (r *Router) Peers() []string { return slices.Compact(slices.Sorted(slices.Values(r.peers()))) }

// Owners returns the peers serving region and the map's generation, to pass
// to Refresh when they turn out stale.
func (r *Router) Owners(region string) (addrs []string, gen uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.owners[region], r.gen
}

// Acquire leases the connection to peer addr (dialled on first use, then
// kept per peer) for one call made with ctx; the caller must Release it once
// the call is over (a stream: received to its end, or its context
// cancelled). The connection is not closed while the lease is held, unless
// the call outlives its drain (see Options.MaxDrain). An error is
// UNAVAILABLE: a bad address, or the router closed.
func (r *Router) Acquire(ctx context.Context, addr string) (*Lease, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil, status.Errorf(codes.Unavailable, "peer store %s: router closed", addr)
	}
	pc := r.conns[addr]
	if pc == nil {
		opts := append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, grpcmem.DialOptions()...)
		if r.opts.DialOption != nil {
			opts = append(opts, r.opts.DialOption)
		}
		if r.opts.MaxRecvMessageBytes > 0 {
			opts = append(opts, grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(r.opts.MaxRecvMessageBytes)))
		}
		cc, err := grpc.NewClient(addr, opts...)
		if err != nil {
			return nil, status.Errorf(codes.Unavailable, "peer store %s: %v", addr, err)
		}
		pc = &peerConn{addr: addr, cc: cc, kv: kvpb.NewKVClient(cc), leases: map[*Lease]struct{}{}}
		r.conns[addr] = pc
	}
	l := &Lease{r: r, pc: pc}
	l.deadline, _ = ctx.Deadline()
	pc.leases[l] = struct{}{}
	return l, nil
}

// retireLocked takes pc out of service: no new lease gets it. It is closed
// now if no lease holds it (the caller closes the returned connection after
// releasing r.mu), else when its last lease is released or its drain ends.
func (r *Router) retireLocked(pc *peerConn) *grpc.ClientConn {
	if r.conns[pc.addr] == pc {
		delete(r.conns, pc.addr)
	}
	if pc.retired {
		return nil
	}
	pc.retired = true
	if cc := r.closeIfIdleLocked(pc); cc != nil {
		return cc
	}
	// Users remain: each releases when its call ends, at the latest by its
	// deadline; the timer is for one that does not (no deadline, or stuck).
	wait := r.opts.MaxDrain
	var latest time.Time
	bounded := true
	for l := range pc.leases {
		if l.deadline.IsZero() {
			bounded = false
			break
		}
		if l.deadline.After(latest) {
			latest = l.deadline
		}
	}
	if bounded {
		// A moment after the deadline, so the call ends with its own
		// DEADLINE_EXCEEDED rather than the closed connection.
		wait = min(wait, time.Until(latest)+time.Second)
	}
	pc.drain = time.AfterFunc(wait, func() {
		r.mu.Lock()
		var cc *grpc.ClientConn
		if !pc.closed {
			pc.closed = true
			cc = pc.cc
			r.log.Warn("peer store: closing a retired connection still in use after its drain",
				"peer", pc.addr, "calls", len(pc.leases), "drain", wait)
		}
		r.mu.Unlock()
		closeConn(cc)
	})
	return nil
}

// closeIfIdleLocked marks a retired pc with no lease closed and returns its
// connection for the caller to close once r.mu is released; else nil.
func (r *Router) closeIfIdleLocked(pc *peerConn) *grpc.ClientConn {
	if !pc.retired || pc.closed || len(pc.leases) > 0 {
		return nil
	}
	pc.closed = true
	if pc.drain != nil {
		pc.drain.Stop()
	}
	return pc.cc
}

func closeConn(cc *grpc.ClientConn) {
	if cc != nil {
		_ = cc.Close()
	}
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
	peers := r.Peers()
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
	r.owners, r.last = owners, began
	r.gen++
	// Retire the connections of peers discovery no longer lists (scaled
	// down), so they do not accumulate; calls still using one finish first.
	var idle []*grpc.ClientConn
	for addr, pc := range r.conns {
		if !slices.Contains(peers, addr) {
			idle = append(idle, r.retireLocked(pc))
		}
	}
	r.mu.Unlock()
	for _, cc := range idle {
		closeConn(cc)
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
	// a failure, dial afresh once. A peer still down refuses at once. The
	// failed connection is retired, not closed: calls forwarded over it
	// finish (or fail) on their own.
	for attempt := 0; attempt < 2; attempt++ {
		ctx, cancel := context.WithTimeout(context.Background(), r.opts.RegionsTimeout)
		var l *Lease
		if l, err = r.Acquire(ctx, addr); err != nil {
			cancel()
			r.log.Warn("peer store: bad address", "peer", addr, "err", err)
			return nil, false
		}
		resp, err = l.Client().Regions(ctx, &kvpb.RegionsRequest{}, grpc.Header(&md))
		cancel()
		l.Release()
		if err == nil {
			break
		}
		r.retire(l.pc)
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

// retire takes pc out of service (see retireLocked); the next Acquire of
// its peer dials afresh. Only pc: a connection dialled meanwhile stays.
func (r *Router) retire(pc *peerConn) {
	r.mu.Lock()
	cc := r.retireLocked(pc)
	r.mu.Unlock()
	closeConn(cc)
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

// Close retires every peer connection: idle ones close now, busy ones when
// their calls end (or their drain does); Acquire fails from now on.
func (r *Router) Close() error {
	r.mu.Lock()
	r.closed = true
	var idle []*grpc.ClientConn
	for _, pc := range r.conns {
		idle = append(idle, r.retireLocked(pc))
	}
	r.mu.Unlock()
	for _, cc := range idle {
		closeConn(cc)
	}
	return nil
}
