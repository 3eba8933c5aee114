package server

// The clock offset check (docs/clock.md, rule 5): a store measures its
// offset to every peer each interval with the Clock RPC and refuses KV
// requests while its clock is beyond the bound of a majority of those it
// measured. Before it serves, it measures the peers that answer.
//
// The refusal is an interceptor, so it holds for every KV method but the
// two that carry no timestamp and that peers and clients need to find
// their way (Clock, Regions); Admin calls pass.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	kvpb "github.com/bellows-kv/bellows/proto/bellows/kv/v1"
	"github.com/bellows-kv/bellows/storage-engine/hlc"
	"github.com/bellows-kv/bellows/storage-engine/region"
	"github.com/bellows-kv/bellows/storage-engine/server/route"
)

// ClockCheck measures the store's clock against its peers' and gates its
// KV service on the result.
type ClockCheck struct {
	clock *hlc.Clock
	mon   *hlc.OffsetMonitor
	log   interface {
		Warn(string, ...any)
		Info(string, ...any)
	}
	// refusal is the current reason to refuse (nil: serve). Loaded on
	// every request; set by the checking loop.
	refusal atomic.Pointer[error]

	offset   *prometheus.GaugeVec
	exceeded prometheus.Gauge

	mu    sync.Mutex
	self  map[string]bool // peer addresses that turned out to be this store
	noted map[string]bool // peers whose differing max offset was logged
}

// NewClockCheck returns the check of clock (its MaxOffset is the bound; 0
// checks nothing), registering its metrics with reg (nil: none). The store
// refuses nothing until Run has peers to measure.
func NewClockCheck(clock *hlc.Clock, log interface {
	Warn(string, ...any)
	Info(string, ...any)
}, reg prometheus.Registerer) *ClockCheck {
	c := &ClockCheck{clock: clock, mon: hlc.NewOffsetMonitor(clock.MaxOffset()), log: log,
		self: map[string]bool{}, noted: map[string]bool{},
		offset: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "bellows_clock_offset_seconds",
			Help: "This store's clock offset to each peer's (the peer's minus this one's), at the last measurement."}, []string{"peer"}),
		exceeded: prometheus.NewGauge(prometheus.GaugeOpts{Name: "bellows_clock_offset_exceeded",
			Help: "1 while this store refuses requests because its clock is beyond 80% of --max-clock-offset from a majority of its peers."}),
	}
	if reg != nil {
		reg.MustRegister(c.offset, c.exceeded)
	}
	return c
}

// Refusal is why the store refuses KV requests now, or nil.
func (c *ClockCheck) Refusal() error {
	if p := c.refusal.Load(); p != nil {
		return *p
	}
	return nil
}

// Prime measures the peers that answer within a second, before the store
// serves: a store started on a clock beyond the bound refuses its first
// request already. Peers not up yet are measured by Run when they are.
func (c *ClockCheck) Prime(ctx context.Context, router *route.Router) {
	if c.clock.MaxOffset() <= 0 {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	c.round(ctx, router)
	c.update(time.Now())
}

// Run measures every peer router lists each interval until ctx ends.
func (c *ClockCheck) Run(ctx context.Context, router *route.Router, interval time.Duration) {
	if c.clock.MaxOffset() <= 0 {
		return
	}
	for {
		c.round(ctx, router)
		c.update(time.Now())
		select {
		case <-ctx.Done():
			return
		case <-time.After(interval):
		}
	}
}

// round measures each peer once, in parallel.
func (c *ClockCheck) round(ctx context.Context, router *route.Router) {
	var peers []string
	c.mu.Lock()
	for _, p := range router.Peers() {
		if !c.self[p] {
			peers = append(peers, p)
		}
	}
	c.mu.Unlock()
	c.mon.SetPeers(peers)
	var wg sync.WaitGroup
	for _, p := range peers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.measure(ctx, router, p)
		}()
	}
	wg.Wait()
}

func (c *ClockCheck) measure(ctx context.Context, router *route.Router, peer string) {
	ctx, cancel := context.WithTimeout(ctx, max(time.Second, 4*c.clock.MaxOffset()))
	defer cancel()
	l, err := router.Acquire(ctx, peer)
	if err != nil {
		c.mon.Forget(peer)
		return
	}
	defer l.Release()
	var md metadata.MD
	sent := c.clock.Physical()
	resp, err := l.Client().Clock(ctx, &kvpb.ClockRequest{}, grpc.Header(&md))
	received := c.clock.Physical()
	if err != nil {
		c.mon.Forget(peer)
		return
	}
	if ids := md.Get(route.StoreIDHeader); len(ids) > 0 && ids[0] == router.Self() {
		c.mu.Lock()
		c.self[peer] = true
		c.mu.Unlock()
		c.mon.Forget(peer)
		return
	}
	rtt := received.Sub(sent)
	mid := sent.Add(rtt / 2)
	offset := time.Duration(resp.PhysicalUnixNs - mid.UnixNano())
	c.mon.Record(peer, hlc.Measurement{Offset: offset, RTT: rtt, At: time.Now()})
	c.offset.WithLabelValues(peer).Set(offset.Seconds())
	if resp.MaxOffsetNs != int64(c.clock.MaxOffset()) {
		c.mu.Lock()
		first := !c.noted[peer]
		c.noted[peer] = true
		c.mu.Unlock()
		if first {
			c.log.Warn("peer store has another --max-clock-offset: every store of a cluster must have the same", "peer", peer,
				"peer_max_offset", time.Duration(resp.MaxOffsetNs), "max_offset", c.clock.MaxOffset())
		}
	}
}

// update recomputes the refusal and logs its changes.
func (c *ClockCheck) update(now time.Time) {
	err := c.mon.Check(now)
	was := c.Refusal()
	if err == nil {
		c.refusal.Store(nil)
	} else {
		c.refusal.Store(&err)
	}
	if err != nil {
		c.exceeded.Set(1)
	} else {
		c.exceeded.Set(0)
	}
	switch {
	case err != nil && (was == nil || was.Error() != err.Error()):
		c.log.Warn("refusing KV requests: clock offset", "err", err)
	case err == nil && was != nil:
		c.log.Info("serving: the clock is within the maximum offset of the peers'")
	}
}

// gated is whether method is refused while the clock is off: every KV
// method but Clock and Regions.
func gated(method string) bool {
	return strings.HasPrefix(method, "/"+kvpb.KV_ServiceDesc.ServiceName+"/") &&
		method != kvpb.KV_Clock_FullMethodName && method != kvpb.KV_Regions_FullMethodName
}

// UnaryInterceptor refuses gated calls while Refusal is not nil.
func (c *ClockCheck) UnaryInterceptor(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	if gated(info.FullMethod) {
		if err := c.Refusal(); err != nil {
			return nil, clockStatus(err)
		}
	}
	return h(ctx, req)
}

// StreamInterceptor is UnaryInterceptor for streams (Scan, TxnScan).
func (c *ClockCheck) StreamInterceptor(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	if gated(info.FullMethod) {
		if err := c.Refusal(); err != nil {
			return clockStatus(err)
		}
	}
	return h(srv, ss)
}

// Clock implements kvpb.KVServer: this store's physical clock, for its
// peers' ClockCheck.
func (s *KV) Clock(ctx context.Context, _ *kvpb.ClockRequest) (*kvpb.ClockResponse, error) {
	if s.fwd != nil {
		_ = grpc.SetHeader(ctx, metadata.Pairs(route.StoreIDHeader, s.fwd.Router.Self()))
	}
	c := s.store.Clock()
	return &kvpb.ClockResponse{PhysicalUnixNs: c.Physical().UnixNano(), MaxOffsetNs: int64(c.MaxOffset())}, nil
}

// observe checks a timestamp a request carries (a transaction's start)
// against the store's clock, and observes it: one too far ahead to come
// from a clock within the bound is refused (CLOCK_OFFSET).
func (s *KV) observe(ts uint64) error {
	if err := s.store.Clock().Update(ts); err != nil {
		return clockStatus(err)
	}
	return nil
}

// newClockID is this store process's name in clock observations: its
// router's identity when it forwards (the one peers know it by), else a
// fresh random one.
func newClockID(fwd *Forwarding) string {
	if fwd != nil {
		return fwd.Router.Self()
	}
	id := make([]byte, 8)
	_, _ = rand.Read(id)
	return hex.EncodeToString(id)
}

// observation is this store's clock now, for a transaction's read answer.
func (s *KV) observation() *kvpb.ObservedClock {
	return &kvpb.ObservedClock{Store: s.clockID, Ts: s.store.Clock().Now()}
}

// uncertainty is a transactional read's clock uncertainty here: limit,
// and the transaction's observation of this store's clock, which the
// region narrows the limit to where it bounds the region's versions
// (region.Uncertainty, docs/clock.md).
func (s *KV) uncertainty(limit uint64, observed []*kvpb.ObservedClock) region.Uncertainty {
	u := region.Uncertainty{Limit: limit}
	for _, o := range observed {
		if o.GetStore() == s.clockID {
			u.Observed = o.GetTs()
			break
		}
	}
	return u
}
