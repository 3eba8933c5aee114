package server

// The store's side of failover (docs/failover.md): its liveness lease and the
// serving rule, the takeover of a region whose claimant's lease is dead, and
// the balancer's failover pass.
//
// A store serves a KV request only while its liveness lease lets it (now <
// expiry − max offset, liveness.Keeper.Serving). The balancer fences a store
// whose lease ran out and gives its regions to the living (Failover). A
// store waiting for a region whose manifest names a dead lease does not wait
// for a release that will never come: it takes the region over, fencing the
// dead claimant's WAL stream and replaying it (region.Options.ForceTakeover).
// Nothing here is needed for safety against a store that comes back: the
// manifest's and the WAL stream's create-if-absent writes fence it; the
// lease bounds how long a cut-off store may still serve reads.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/bellows-kv/bellows/internal/contract"
	"github.com/bellows-kv/bellows/storage-engine/blob"
	"github.com/bellows-kv/bellows/storage-engine/liveness"
	"github.com/bellows-kv/bellows/storage-engine/regionmap"
)

// Liveness is a store's liveness lease (StoreOptions.Liveness).
type Liveness struct {
	Keeper *liveness.Keeper
	// Store and Incarnation name the lease: the store's ordinal, and this
	// process's random identity.
	Store, Incarnation string
	Bucket             *blob.Bucket
	// CheckInterval is how often a claim waiting for a region's release
	// asks whether its claimant's lease is dead, and how often the
	// balancer looks for dead stores. Default
	// contract.DefaultFailoverCheckInterval.
	CheckInterval time.Duration
	// MaxOffset is the clocks' bound the leases are read with.
	MaxOffset time.Duration
}

// Lease is the name a manifest records (manifest.Manifest.Lease).
func (l *Liveness) Lease() string { return l.Store + "/" + l.Incarnation }

func (l *Liveness) checkInterval() time.Duration {
	if l.CheckInterval <= 0 {
		return contract.DefaultFailoverCheckInterval
	}
	return l.CheckInterval
}

// leaseDead reports whether the lease a manifest names ("store/incarnation")
// is dead: fenced, or superseded by a newer incarnation.
func leaseDead(ctx context.Context, b *blob.Bucket, lease string) (bool, error) {
	store, incarnation, ok := strings.Cut(lease, "/")
	if !ok || store == "" || incarnation == "" {
		return false, nil
	}
	return liveness.Dead(ctx, b, store, incarnation)
}

// ErrLeaseExpired: this store's liveness lease ran out (it could not renew:
// the bucket unreachable, the process paused); it serves nothing until it
// renews, and its regions may already have another owner.
var ErrLeaseExpired = errors.New("this store's liveness lease has expired: it cannot renew it in the bucket, and its regions may have failed over to another store")

// LeaseInterceptors refuse the KV calls that read or write (all but Regions
// and Clock) while the keeper says the store may not serve: UNAVAILABLE,
// reason LEASE_EXPIRED with the store's ordinal (metadata "store"), which
// clients retry elsewhere.
func LeaseInterceptors(k *liveness.Keeper) (grpc.UnaryServerInterceptor, grpc.StreamServerInterceptor) {
	refuse := func(method string) error {
		if k == nil || !gated(method) || k.Serving(time.Now()) {
			return nil
		}
		st := status.New(codes.Unavailable, fmt.Sprintf("store %s: %v", k.Store(), ErrLeaseExpired))
		info := &errdetails.ErrorInfo{Reason: contract.LeaseExpiredReason, Domain: contract.ErrorDomain, Metadata: map[string]string{"store": k.Store()}}
		if d, err := st.WithDetails(info); err == nil {
			st = d
		}
		return st.Err()
	}
	unary := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		if err := refuse(info.FullMethod); err != nil {
			return nil, err
		}
		return h(ctx, req)
	}
	stream := func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
		if err := refuse(info.FullMethod); err != nil {
			return err
		}
		return h(srv, ss)
	}
	return unary, stream
}

// failover fences every other store whose lease ran out and, if any was,
// commits one region map epoch that gives each region they served to a
// living store (regionmap.Failover). The new owners take the regions over
// when they see their claimant's lease dead (Store.claim). It runs only
// while this store holds the balancer lease; it returns the moves.
func (b *Balancer) failover(ctx context.Context) ([]regionmap.Move, error) {
	s := b.KV.store
	l := s.opts.Liveness
	if l == nil || !b.leaseHeld.Load() {
		return nil, nil
	}
	n, ok := b.Stores()
	if !ok || n < 2 {
		return nil, nil
	}
	var dead []int
	deadSince := map[int]time.Time{}
	for o := range n {
		if o == b.Ordinal {
			continue
		}
		fenced, rec, err := liveness.Fence(ctx, l.Bucket, fmt.Sprint(o), time.Now(), l.MaxOffset)
		if err != nil {
			return nil, err
		}
		if fenced {
			dead = append(dead, o)
			deadSince[o] = rec.Expiry
			if b.fenced == nil {
				b.fenced = map[int]string{}
			}
			if b.fenced[o] != rec.Incarnation {
				b.fenced[o] = rec.Incarnation
				s.opts.Region.Logger.Warn("store's liveness lease ran out: fenced", "store", o, "lease", rec.String())
			}
		}
	}
	if len(dead) == 0 {
		b.ownerless.Store(0)
		return nil, nil
	}
	m, ok := s.RegionMap()
	if !ok {
		return nil, nil
	}
	leavingSet := b.leaving(n)
	leaving := func(o int) bool { return slices.Contains(leavingSet, o) }
	next, moves := regionmap.Failover(m, dead, n, leaving, nil)
	b.ownerless.Store(int64(len(moves)))
	if len(moves) == 0 {
		return nil, nil
	}
	s.mapMu.Lock()
	err := regionmap.Commit(ctx, l.Bucket, m, &next)
	s.mapMu.Unlock()
	if errors.Is(err, regionmap.ErrFenced) {
		if newer, lerr := regionmap.Load(ctx, l.Bucket); lerr == nil {
			s.learnMap(newer)
		}
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	s.learnMap(next)
	b.ownerless.Store(0)
	b.failovers.Add(uint64(len(moves)))
	if h, ok := b.failoverSeconds.Load().(prometheus.Histogram); ok {
		for _, o := range dead {
			if slices.ContainsFunc(moves, func(mv regionmap.Move) bool { return mv.From == o }) {
				h.Observe(time.Since(deadSince[o]).Seconds())
			}
		}
	}
	s.opts.Region.Logger.Warn("failed over the regions of dead stores", "dead", fmt.Sprint(dead), "moves", fmt.Sprint(moves), "epoch", next.Epoch)
	return moves, nil
}

// failoverStep keeps the balancer lease (renewing it once half its term is
// gone, or trying to take it) and, holding it, runs the failover pass.
func (b *Balancer) failoverStep(ctx context.Context) {
	s := b.KV.store
	if n, ok := b.Stores(); !ok || n < 2 {
		return
	}
	now := time.Now()
	if until := b.leaseUntil.Load(); !b.leaseHeld.Load() || time.Unix(0, until).Sub(now) < b.LeaseTerm/2 {
		l, held, err := regionmap.AcquireLease(ctx, s.opts.Region.Bucket, b.holder(), now, b.LeaseTerm, b.MaxClockOffset)
		b.leaseHeld.Store(held && err == nil)
		if err != nil || !held {
			return
		}
		b.leaseUntil.Store(l.Expiry.UnixNano())
	}
	if _, err := b.failover(ctx); err != nil && ctx.Err() == nil {
		s.opts.Region.Logger.Warn("failing over the regions of dead stores", "err", err)
	}
}

// Failovers is how many regions this store's balancer failed over.
func (b *Balancer) Failovers() uint64 {
	if b == nil {
		return 0
	}
	return b.failovers.Load()
}
