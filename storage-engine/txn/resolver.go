package txn

// Lock resolution: what a request does when it meets a lock of a
// cross-region transaction (region.LockedError), and the loop that resolves
// the locks no request meets (a transaction whose coordinator crashed).
// A lock is settled by asking its primary's region for the outcome
// (CheckTxnStatus, which rolls back a transaction whose primary lock has
// expired) and committing or rolling back the lock to match
// (ResolveLocks). Both are also the participant calls peers make.

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	kvpb "github.com/bellows-kv/bellows/proto/bellows/kv/v1"
	"github.com/bellows-kv/bellows/storage-engine/manifest"
	"github.com/bellows-kv/bellows/storage-engine/region"
)

// Resolver settles the locks requests meet, and the expired ones of a
// store's regions.
type Resolver struct {
	store Store
	opts  Options
}

// NewResolver resolves locks in store's regions.
func NewResolver(store Store, o Options) *Resolver {
	return &Resolver{store: store, opts: o}
}

// ResolveLocks commits (req.CommitTs > 0) or rolls back the locks of
// transaction req.StartTs on req.Keys, all in region r, here or at r's
// owners; with ForgetOutcome it only marks the outcome resolved.
func (res *Resolver) ResolveLocks(ctx context.Context, r Region, req *kvpb.ResolveLocksRequest) (*kvpb.ResolveLocksResponse, error) {
	if p := r.Peer(); p != nil {
		if err := p.ResolveLocks(ctx, req); err != nil {
			return nil, err
		}
		return &kvpb.ResolveLocksResponse{}, nil
	}
	e, err := r.Engine()
	if err != nil {
		return nil, err
	}
	switch {
	case req.ForgetOutcome:
		err = e.MarkTxnResolved(req.StartTs, req.Keys[0])
	case req.CommitTs != 0:
		err = e.CommitLocks(ctx, req.StartTs, req.CommitTs, req.Keys, req.Primary, req.RequestId)
	default:
		err = e.RollbackLocks(ctx, req.StartTs, req.Keys, req.Primary)
	}
	if errors.Is(err, region.ErrTxnRolledBack) {
		return nil, status.Errorf(codes.Aborted, "transaction started at %d: %v", req.StartTs, err)
	}
	if err != nil {
		return nil, r.Status(err)
	}
	return &kvpb.ResolveLocksResponse{}, nil
}

// CheckTxnStatus asks region r, the primary's, here or at its owners, for
// the outcome of transaction req.StartTs.
func (res *Resolver) CheckTxnStatus(ctx context.Context, r Region, req *kvpb.CheckTxnStatusRequest) (*kvpb.CheckTxnStatusResponse, error) {
	if p := r.Peer(); p != nil {
		return p.CheckTxnStatus(ctx, req)
	}
	e, err := r.Engine()
	if err != nil {
		return nil, err
	}
	st, err := e.CheckTxnStatus(ctx, req.Primary, req.StartTs, res.store.Now(), req.RollbackIfAbsent)
	if err != nil {
		return nil, r.Status(err)
	}
	resp := &kvpb.CheckTxnStatusResponse{CommitTs: st.CommitTS, RolledBack: st.RolledBack}
	if st.Lock != nil {
		resp.LockExpiresAtUnixNs = st.Lock.ExpiresAt
	}
	return resp, nil
}

// WithLocks runs op, which works on region r (open here), resolving each
// lock it meets (region.LockedError) and running it again, until it
// succeeds, fails otherwise, or ctx ends.
func (res *Resolver) WithLocks(ctx context.Context, r Region, op func() error) error {
	return res.withLocks(ctx, r, op, true)
}

// WithLocksNoWait is WithLocks that never waits: a lock whose transaction
// is still being committed ends it with op's *LockedError.
func (res *Resolver) WithLocksNoWait(ctx context.Context, r Region, op func() error) error {
	return res.withLocks(ctx, r, op, false)
}

// withLocks is WithLocks; without wait, a lock whose transaction is still
// being committed ends it with op's *LockedError instead of a wait.
func (res *Resolver) withLocks(ctx context.Context, r Region, op func() error, wait bool) error {
	pause := time.Millisecond
	for {
		err := op()
		var le *region.LockedError
		if !errors.As(err, &le) {
			return err
		}
		resolved, rerr := res.resolveLock(ctx, r, le.Lock)
		if rerr != nil {
			if !wait {
				return err
			}
			return fmt.Errorf("resolving the lock on %q: %w", le.Key, rerr)
		}
		if resolved {
			pause = time.Millisecond
			continue
		}
		if !wait {
			return err
		}
		// Still being committed: wait for its coordinator, or its TTL.
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: waited for a lock to be resolved: %v", ctx.Err(), err)
		case <-time.After(pause):
		}
		pause = min(2*pause, 100*time.Millisecond)
	}
}

// resolveLock settles lock l, found in region r: it asks the primary's
// region for the outcome and commits or rolls back l to match. false: the
// transaction is still being committed (its primary's lock has not expired).
func (res *Resolver) resolveLock(ctx context.Context, r Region, l manifest.TxnLock) (bool, error) {
	expired := res.store.Now().UnixNano() >= l.ExpiresAt
	ictx := internalCtx(ctx)
	pr, err := res.store.Route(ictx, l.Primary)
	if err != nil {
		return false, err
	}
	st, err := res.CheckTxnStatus(ictx, pr, &kvpb.CheckTxnStatusRequest{Primary: l.Primary, StartTs: l.StartTS, RollbackIfAbsent: expired})
	if err != nil {
		return false, err
	}
	e, err := r.Engine()
	if err != nil {
		return false, err
	}
	switch {
	case st.CommitTs != 0:
		err = e.CommitLeftLocks(ctx, l.StartTS, st.CommitTs, [][]byte{l.Key})
	case st.RolledBack:
		err = e.RollbackLocks(ctx, l.StartTS, [][]byte{l.Key}, false)
	default:
		return false, nil
	}
	return err == nil, err
}

// ResolveExpiredLocks resolves the expired locks of every open region of
// the store, and forgets the outcomes past their retention: the locks no
// request meets (a transaction whose coordinator crashed) go within a TTL
// and an interval. Run calls it; tests call it directly.
func (res *Resolver) ResolveExpiredLocks(ctx context.Context) {
	now := res.store.Now()
	for _, r := range res.store.Local() {
		e, err := r.Engine()
		if err != nil {
			continue
		}
		for _, l := range e.Locks() {
			if now.UnixNano() < l.ExpiresAt {
				continue
			}
			if _, err := res.resolveLock(ctx, r, l); err != nil && ctx.Err() == nil {
				res.opts.Logger.Warn("resolving an expired transaction lock", "region", r.Name(), "key", l.Key, "start_ts", l.StartTS, "err", err)
			}
		}
		if err := e.ForgetTxns(now.Add(-res.opts.OutcomeRetryWindow), now.Add(-res.opts.OutcomeRetention)); err != nil && ctx.Err() == nil {
			res.opts.Logger.Warn("forgetting old transaction outcomes", "region", r.Name(), "err", err)
		}
	}
}

// Run calls ResolveExpiredLocks every interval until ctx ends, each call
// bounded by five intervals so a peer that hangs delays the next round
// only that long.
func (res *Resolver) Run(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			rctx, cancel := context.WithTimeout(ctx, interval*5)
			res.ResolveExpiredLocks(rctx)
			cancel()
		}
	}
}
