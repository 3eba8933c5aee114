package server

// A region failing over, as the KV API answers it (docs/failover.md §8).
//
// Between the moment a store's liveness lease runs out and the moment its
// regions' new owners have opened them, nothing serves those regions. A
// live store asked for one of them says so at once — UNAVAILABLE with
// reason REGION_FAILING_OVER, naming the region and the dead store —
// instead of forwarding to an owner that cannot answer (a paused process
// holds the call until the caller's deadline). Clients retry it like any
// UNAVAILABLE and learn the new owner from the stores' Regions answers.
//
// Two stores say it: one whose region map still names the dead store as
// the region's owner (the map has not moved it yet), and the new owner
// while it takes the region over (Store.claim marks the assignment).
//
// Other stores' leases are read from the bucket at most once per record
// lifetime: a record whose expiry is ahead of the clock holds until then
// (its store cannot have stopped serving before), so a request pays no
// bucket read while the owner is alive; past it, the record is read again,
// and a verdict of "run out" is kept for one check interval.

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/bellows-kv/bellows/internal/contract"
	kvpb "github.com/bellows-kv/bellows/proto/bellows/kv/v1"
	"github.com/bellows-kv/bellows/storage-engine/liveness"
	"github.com/bellows-kv/bellows/storage-engine/region"
)

// FailingOverError: Region's owner, Store, has let its liveness lease run
// out, and no store has opened the region since.
type FailingOverError struct {
	Region string
	// Store is the store whose lease ran out, by its liveness name (its
	// ordinal).
	Store string
	// Expiry is when its lease ran out (zero: not known).
	Expiry time.Time
	// TakingOver: the store answering is the region's new owner, taking it
	// over from Store (claiming its manifest, fencing and replaying its
	// WAL); else the region map still names Store as the owner.
	TakingOver bool
}

func (e *FailingOverError) Error() string {
	if e.TakingOver {
		return fmt.Sprintf("%s is failing over: store %s, its owner, let its liveness lease run out, and this store, its new owner, is taking it over (claiming its manifest, fencing and replaying its WAL); retry", e.Region, e.Store)
	}
	since := ""
	if !e.Expiry.IsZero() {
		since = " at " + e.Expiry.UTC().Format(time.RFC3339Nano)
	}
	return fmt.Sprintf("%s is failing over: store %s, its owner, let its liveness lease run out%s, and the region map has not given the region to another store yet; retry", e.Region, e.Store, since)
}

// failingOverStatus is e as the KV API answers it: UNAVAILABLE with
// reason REGION_FAILING_OVER, the region and the dead store as metadata,
// and the region as a ResourceInfo detail.
func failingOverStatus(e *FailingOverError) error {
	st := status.New(codes.Unavailable, e.Error())
	md := map[string]string{"region": e.Region, "store": e.Store}
	if e.TakingOver {
		md["taking_over"] = "true"
	}
	info := &errdetails.ErrorInfo{Reason: contract.RegionFailingOverReason, Domain: contract.ErrorDomain, Metadata: md}
	if d, err := st.WithDetails(info, &errdetails.ResourceInfo{ResourceType: RegionResourceType, ResourceName: e.Region}); err == nil {
		st = d
	}
	return st.Err()
}

// takingOverError is the reason a region being taken over from the dead
// claimant that owned (an ErrOwned error naming its lease) is not open yet.
func takingOverError(name string, owned error) error {
	store := ""
	if oe := (*region.OwnedError)(nil); errors.As(owned, &oe) {
		store, _, _ = strings.Cut(oe.Lease, "/")
	}
	return &region.Error{Region: name, Err: &FailingOverError{Region: name, Store: store, TakingOver: true}}
}

// peerLeases are the other stores' liveness records as this store last
// read them, by store. The zero value is ready.
type peerLeases struct {
	mu    sync.Mutex
	seen  map[string]peerLease
	reads singleflight.Group
}

type peerLease struct {
	rec liveness.Record
	at  time.Time // when it was read
	err error     // the read failed: nothing is known
}

// peerLeaseReadTimeout bounds one read of a store's liveness record.
const peerLeaseReadTimeout = 2 * time.Second

// get is store's record, read again unless the one held still decides:
// its expiry is ahead of now, or it was read within fresh. ok is false
// when nothing is known (never read successfully, or the last read
// failed).
func (p *peerLeases) get(store string, now time.Time, fresh time.Duration, read func(context.Context) (liveness.Record, error)) (liveness.Record, bool) {
	p.mu.Lock()
	c, held := p.seen[store]
	p.mu.Unlock()
	if held && (now.Sub(c.at) < fresh || c.err == nil && !c.rec.Fenced && now.Before(c.rec.Expiry)) {
		return c.rec, c.err == nil
	}
	v, _, _ := p.reads.Do(store, func() (any, error) {
		// Shared by every request waiting on it: not any one's context.
		ctx, cancel := context.WithTimeout(context.Background(), peerLeaseReadTimeout)
		defer cancel()
		at := time.Now()
		rec, err := read(ctx)
		got := peerLease{rec: rec, at: at, err: err}
		p.mu.Lock()
		if p.seen == nil {
			p.seen = map[string]peerLease{}
		}
		p.seen[store] = got
		p.mu.Unlock()
		return got, nil
	})
	got := v.(peerLease)
	return got.rec, got.err == nil
}

// leaseRanOut reports whether store (a liveness name), not this store,
// holds a lease that has run out by this store's clock at now: its newest
// record is fenced, or its expiry has passed. By the clocks' bound the
// store stopped serving before its expiry by this clock. A store that
// never held a lease, or whose record cannot be read, is not known to be
// dead: false.
func (s *KV) leaseRanOut(store string, now time.Time) (liveness.Record, bool) {
	l := s.store.opts.Liveness
	if l == nil || store == "" || store == l.Store {
		return liveness.Record{}, false
	}
	rec, ok := s.leases.get(store, now, l.checkInterval(), func(ctx context.Context) (liveness.Record, error) {
		return liveness.Current(ctx, l.Bucket, store)
	})
	return rec, ok && rec.K > 0 && (rec.Fenced || !now.Before(rec.Expiry))
}

// mapOwner is the liveness name of the store the region map gives sp to,
// or false when this store does not know the cluster's size (no Assigner)
// or keeps no liveness lease.
func (s *KV) mapOwner(sp Span) (string, bool) {
	f := s.store.replicas.Load()
	if f == nil || s.store.opts.Liveness == nil {
		return "", false
	}
	n, ok := (*f)()
	if !ok || n < 1 {
		return "", false
	}
	return strconv.Itoa(sp.OwnerOf(n)), true
}

// failingOver is why a request for sp, a region this store does not
// serve, cannot be served anywhere now: its owner by the region map has
// let its lease run out; nil when that is not known.
func (s *KV) failingOver(sp Span, now time.Time) *FailingOverError {
	owner, ok := s.mapOwner(sp)
	if !ok {
		return nil
	}
	rec, out := s.leaseRanOut(owner, now)
	if !out {
		return nil
	}
	return &FailingOverError{Region: sp.Name, Store: owner, Expiry: rec.Expiry}
}

// failingOverRegions are the regions of the map, none assigned here, that
// are failing over (failingOver), for the Regions answer.
func (s *KV) failingOverRegions(now time.Time) []*kvpb.FailingOverRegion {
	spans := s.store.allSpans()
	if spans == nil {
		return nil
	}
	here := map[string]bool{}
	for _, a := range s.store.current().all {
		here[a.Name()] = true
	}
	var out []*kvpb.FailingOverRegion
	for _, sp := range spans {
		if here[sp.Name] {
			continue
		}
		if fo := s.failingOver(sp, now); fo != nil {
			out = append(out, &kvpb.FailingOverRegion{Name: sp.Name, Start: sp.Start, End: sp.End, Store: fo.Store,
				ExpiredMs: max(now.Sub(fo.Expiry), 0).Milliseconds()})
		}
	}
	return out
}
