package txn

// The coordinator of cross-region commits: CommitTxn of mutations in more
// than one region, run by the store that owns the primary key's region,
// and the prewrite it (and a peer coordinator) asks of each region. The
// engine's side, and its invariants, are region's prewrite.go, resolve.go
// and outcomes.go.
//
// The protocol is Percolator's, with the primary's region as the commit
// point and no timestamp oracle:
//
//  1. Prewrite the primary's region (first: a retried commit whose first
//     attempt committed learns it here), then the others in parallel. Each
//     returns a prepare timestamp; any conflict rolls everything back.
//  2. A serializable transaction validates its reads at commitTS =
//     max(start, prepares) + 1 (validate.go); a conflict rolls back.
//     Commit the primary's region at commitTS:
//     one WAL record commits its locks and records the outcome. From here
//     the transaction is committed, whatever crashes.
//  3. Commit the other regions' locks; then tell the primary's region to
//     forget the outcome. A lock left behind by a crash is resolved by the
//     first request that meets it, or by the resolver's loop after its
//     TTL (resolver.go).

import (
	"context"
	"errors"
	"time"

	"github.com/cenkalti/backoff/v5"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	kvpb "github.com/bellows-kv/bellows/proto/bellows/kv/v1"
	"github.com/bellows-kv/bellows/storage-engine/region"
	"github.com/bellows-kv/bellows/storage-engine/writereq"
)

// Coordinator runs cross-region commits through a Store.
type Coordinator struct {
	store    Store
	resolver *Resolver
	opts     Options
}

// NewCoordinator coordinates commits in store's regions, resolving the
// locks its prewrites meet with resolver.
func NewCoordinator(store Store, resolver *Resolver, o Options) *Coordinator {
	return &Coordinator{store: store, resolver: resolver, opts: o}
}

// Participant is one region's share of a cross-region transaction.
type Participant struct {
	region    Region
	mutations []*kvpb.Mutation
}

func (p *Participant) keys() [][]byte {
	out := make([][]byte, len(p.mutations))
	for i, m := range p.mutations {
		out[i] = m.Key
	}
	return out
}

// Participants groups a transaction's mutations by region, the primary's
// (mutation 0's) first. The regions' owners are found as for a request of
// this store's own, also when the commit was forwarded here.
func (c *Coordinator) Participants(ctx context.Context, muts []*kvpb.Mutation) ([]*Participant, error) {
	ctx = internalCtx(ctx)
	var out []*Participant
	byName := map[string]*Participant{}
	for i, m := range muts {
		r, err := c.store.Route(ctx, m.Key)
		if err != nil {
			return nil, mutationErr(i, err)
		}
		name := r.Name()
		p := byName[name]
		if p == nil {
			p = &Participant{region: r}
			byName[name] = p
			out = append(out, p)
		}
		p.mutations = append(p.mutations, m)
	}
	return out, nil
}

// CommitAcrossRegions is CommitTxn of mutations in more than one region
// (parts, from Participants), run here because this store owns the
// primary's region. requestID is the commit request's idempotency key:
// the primary's region records it with the outcome, so a retry learns the
// first attempt's commit at its prewrite.
func (c *Coordinator) CommitAcrossRegions(ctx context.Context, req *kvpb.CommitTxnRequest, requestID string, parts []*Participant) (*kvpb.CommitTxnResponse, error) {
	ctx = internalCtx(ctx)
	primary := parts[0]
	primaryKey := req.Mutations[0].Key
	ttl := c.opts.LockTTL
	prepared := make([]bool, len(parts))
	prepares := make([]uint64, len(parts))
	// rollback undoes the prewrites after a failure: the primary's first,
	// which records the rollback, so a lock left behind rolls back too.
	rollback := func(cause error) error {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ttl)
		defer cancel()
		for i, p := range parts {
			if i > 0 && !prepared[i] {
				continue
			}
			err := c.resolveIn(rctx, p, req.StartTs, 0, p.keys(), i == 0, false, "")
			if status.Code(err) == codes.Unavailable {
				// p's region is closing for a split, merge or handover,
				// which waits for this request to end: follow its keys
				// to their next regions from the background.
				go c.rollbackFollowing(context.WithoutCancel(ctx), req.StartTs, p.keys(), i == 0)
				continue
			}
			if err != nil {
				c.opts.Logger.Warn("rolling back a cross-region transaction; its locks roll back when they expire",
					"start_ts", req.StartTs, "region", p.region.Name(), "err", err)
			}
		}
		return cause
	}
	committed, err := c.prewriteIn(ctx, primary, req.StartTs, primaryKey, ttl, requestID, &prepares[0])
	if err != nil {
		return nil, rollback(err)
	}
	if committed != 0 {
		// A retry of a commit that reached its commit point.
		return &kvpb.CommitTxnResponse{CommitTs: committed, Region: primary.region.Name()}, nil
	}
	prepared[0] = true
	g, gctx := errgroup.WithContext(ctx)
	for i, p := range parts[1:] {
		g.Go(func() error {
			_, err := c.prewriteIn(gctx, p, req.StartTs, primaryKey, ttl, requestID, &prepares[i+1])
			if err == nil {
				prepared[i+1] = true
			}
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return nil, rollback(err)
	}
	commitTS := req.StartTs
	for _, p := range prepares {
		commitTS = max(commitTS, p)
	}
	commitTS++
	if req.Serializable && len(req.Reads) > 0 {
		if err := c.validateReads(ctx, req.StartTs, commitTS, primaryKey, req.Reads); err != nil {
			return nil, rollback(err)
		}
	}
	// The commit point.
	if err := c.resolveIn(ctx, primary, req.StartTs, commitTS, primary.keys(), true, false, requestID); err != nil {
		if errors.Is(err, region.ErrTxnRolledBack) || status.Code(err) == codes.Aborted {
			return nil, status.Errorf(codes.Aborted, "transaction started at %d: rolled back before it could commit (its locks expired after %s): %v",
				req.StartTs, ttl, err)
		}
		// Whether the record became durable is unknown: a retry of the
		// request (same request ID) learns it at step 1.
		return nil, status.Errorf(codes.Unavailable, "transaction started at %d: committing at its primary's region %s: %v; the outcome is unknown: retry the same request",
			req.StartTs, primary.region.Name(), status.Convert(err).Message())
	}
	all := true
	g, gctx = errgroup.WithContext(context.WithoutCancel(ctx))
	for _, p := range parts[1:] {
		g.Go(func() error {
			if err := c.resolveIn(gctx, p, req.StartTs, commitTS, p.keys(), false, false, ""); err != nil {
				all = false
				c.opts.Logger.Warn("committing a cross-region transaction's locks; the first request to meet one rolls it forward",
					"start_ts", req.StartTs, "region", p.region.Name(), "err", err)
			}
			return nil
		})
	}
	_ = g.Wait()
	if all {
		_ = c.resolveIn(context.WithoutCancel(ctx), primary, req.StartTs, commitTS, [][]byte{primaryKey}, true, true, "")
	}
	return &kvpb.CommitTxnResponse{CommitTs: commitTS, Region: primary.region.Name()}, nil
}

// prewriteIn prewrites p's mutations, resolving the locks of other
// transactions it meets; it returns the commit timestamp instead when the
// transaction already committed (p is the primary's region).
func (c *Coordinator) prewriteIn(ctx context.Context, p *Participant, startTS uint64, primary []byte, ttl time.Duration, requestID string, prepare *uint64) (uint64, error) {
	req := &kvpb.PrewriteRequest{StartTs: startTS, Primary: primary, Mutations: p.mutations, TtlMs: uint64(ttl.Milliseconds()), RequestId: requestID}
	resp, err := c.Prewrite(ctx, p.region, req)
	if err != nil {
		return 0, err
	}
	*prepare = resp.PrepareTs
	return resp.CommittedTs, nil
}

// rollbackFollowing rolls back the locks of transaction startTS on keys
// whose region was closing when the coordinator rolled them back (with
// primary, keys[0] is the primary key and the rollback is recorded as the
// outcome): it routes the keys anew, each to the region that now holds
// it, until the rollback is done or the locks' TTL has passed. A primary
// lock left in a successor region would hold its key for the whole TTL,
// since no outcome says the transaction will never commit; the TTL bounds
// the following, since by then any request that meets the lock rolls the
// transaction back itself.
func (c *Coordinator) rollbackFollowing(ctx context.Context, startTS uint64, keys [][]byte, primary bool) {
	ctx, cancel := context.WithTimeout(ctx, c.opts.LockTTL)
	defer cancel()
	b := backoff.NewExponentialBackOff()
	b.InitialInterval, b.MaxInterval = time.Millisecond, 50*time.Millisecond
	for {
		select {
		case <-ctx.Done():
			c.opts.Logger.Warn("rolling back a cross-region transaction in a moving region: its locks roll back as they expire",
				"start_ts", startTS, "err", ctx.Err())
			return
		case <-time.After(b.NextBackOff()):
		}
		err := c.rollbackRouted(ctx, startTS, keys, primary)
		if status.Code(err) == codes.Unavailable {
			continue
		}
		if err != nil {
			c.opts.Logger.Warn("rolling back a cross-region transaction in a moving region: its locks roll back as they expire",
				"start_ts", startTS, "err", err)
		}
		return
	}
}

// rollbackRouted rolls back transaction startTS's locks on keys, each in
// the region the store routes it to now; with primary, in keys[0]'s
// region as the primary's.
func (c *Coordinator) rollbackRouted(ctx context.Context, startTS uint64, keys [][]byte, primary bool) error {
	parts, err := c.Participants(ctx, mutationsOf(keys))
	if err != nil {
		return err
	}
	var errs []error
	for i, p := range parts {
		// Participants puts keys[0]'s region first, keys[0] first in it.
		if err := c.resolveIn(ctx, p, startTS, 0, p.keys(), primary && i == 0, false, ""); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) == 0 {
		return nil
	}
	for _, err := range errs {
		if status.Code(err) != codes.Unavailable {
			return err
		}
	}
	return errs[0]
}

// mutationsOf is keys as mutations, to group them by region.
func mutationsOf(keys [][]byte) []*kvpb.Mutation {
	out := make([]*kvpb.Mutation, len(keys))
	for i, k := range keys {
		out[i] = &kvpb.Mutation{Key: k}
	}
	return out
}

// resolveIn commits (commitTS > 0) or rolls back the locks of transaction
// startTS on keys, in p's region.
func (c *Coordinator) resolveIn(ctx context.Context, p *Participant, startTS, commitTS uint64, keys [][]byte, primary, forget bool, requestID string) error {
	req := &kvpb.ResolveLocksRequest{StartTs: startTS, CommitTs: commitTS, Keys: keys, Primary: primary, ForgetOutcome: forget, RequestId: requestID}
	_, err := c.resolver.ResolveLocks(ctx, p.region, req)
	return err
}

// Prewrite prewrites req's mutations, all in region r, here or at r's
// owners: the first phase of a cross-region commit in one region.
func (c *Coordinator) Prewrite(ctx context.Context, r Region, req *kvpb.PrewriteRequest) (*kvpb.PrewriteResponse, error) {
	if p := r.Peer(); p != nil {
		return p.Prewrite(ctx, req)
	}
	e, err := r.Engine()
	if err != nil {
		return nil, err
	}
	b, err := writereq.Batch(req.Mutations)
	if err != nil {
		return nil, err
	}
	expires := c.store.Now().Add(time.Duration(req.TtlMs) * time.Millisecond)
	var ts uint64
	err = c.resolver.WithLocks(ctx, r, func() (err error) {
		ts, err = e.Prewrite(ctx, req.StartTs, req.Primary, b, expires, req.RequestId)
		return err
	})
	var ac *region.AlreadyCommittedError
	if errors.As(err, &ac) {
		return &kvpb.PrewriteResponse{CommittedTs: ac.CommitTS}, nil
	}
	var ce *region.ConflictError
	if errors.As(err, &ce) {
		return nil, ConflictStatus(ce)
	}
	if err != nil {
		return nil, r.Status(err)
	}
	return &kvpb.PrewriteResponse{PrepareTs: ts}, nil
}
