package server

// Cross-region commits: the coordinator (CommitTxn of mutations in more
// than one region, run by the store that owns the primary key's region),
// the participant RPCs stores call on each other, and lock resolution for
// the requests that meet a lock (region/twopc.go has the engine's side and
// its invariants).
//
// The protocol is Percolator's, with the primary's region as the commit
// point and no timestamp oracle:
//
//  1. Prewrite the primary's region (first: a retried commit whose first
//     attempt committed learns it here), then the others in parallel. Each
//     returns a prepare timestamp; any conflict rolls everything back.
//  2. Commit the primary's region at commitTS = max(start, prepares) + 1:
//     one WAL record commits its locks and records the outcome. From here
//     the transaction is committed, whatever crashes.
//  3. Commit the other regions' locks; then tell the primary's region to
//     forget the outcome. A lock left behind by a crash is resolved by the
//     first request that meets it, or by the store's resolver loop after
//     its TTL: the primary's region says committed (roll forward), rolled
//     back, or, once the primary's lock has expired, rolls it back.

import (
	"context"
	"errors"
	"fmt"
	"time"

	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	kvpb "github.com/bellows-kv/bellows/proto/bellows/kv/v1"
	"github.com/bellows-kv/bellows/storage-engine/manifest"
	"github.com/bellows-kv/bellows/storage-engine/region"
)

// participant is one region's share of a cross-region transaction.
type participant struct {
	t         target
	name      string
	mutations []*kvpb.Mutation
}

func (p *participant) keys() [][]byte {
	out := make([][]byte, len(p.mutations))
	for i, m := range p.mutations {
		out[i] = m.Key
	}
	return out
}

// participants groups a transaction's mutations by region, the primary's
// (mutation 0's) first.
func (s *KV) participants(ctx context.Context, muts []*kvpb.Mutation) ([]*participant, error) {
	var out []*participant
	byName := map[string]*participant{}
	for i, m := range muts {
		t, err := s.resolve(ctx, m.Key)
		if err != nil {
			return nil, mutationErr(i, err)
		}
		name := t.remote.Name
		if !t.forward {
			name = t.local.Name()
		}
		p := byName[name]
		if p == nil {
			p = &participant{t: t, name: name}
			byName[name] = p
			out = append(out, p)
		}
		p.mutations = append(p.mutations, m)
	}
	return out, nil
}

// commitAcrossRegions is CommitTxn of mutations in more than one region,
// run here because this store owns the primary's region.
func (s *KV) commitAcrossRegions(ctx context.Context, req *kvpb.CommitTxnRequest, requestID string, parts []*participant) (*kvpb.CommitTxnResponse, error) {
	primary := parts[0]
	primaryKey := req.Mutations[0].Key
	ttl := s.lockTTL()
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
			if err := s.resolveIn(rctx, p, req.StartTs, 0, p.keys(), i == 0, false, ""); err != nil {
				s.store.opts.Region.Logger.Warn("rolling back a cross-region transaction; its locks roll back when they expire",
					"start_ts", req.StartTs, "region", p.name, "err", err)
			}
		}
		return cause
	}
	committed, err := s.prewriteIn(ctx, primary, req.StartTs, primaryKey, ttl, requestID, &prepares[0])
	if err != nil {
		return nil, rollback(err)
	}
	if committed != 0 {
		// A retry of a commit that reached its commit point.
		return &kvpb.CommitTxnResponse{CommitTs: committed, Region: primary.name}, nil
	}
	prepared[0] = true
	g, gctx := errgroup.WithContext(ctx)
	for i, p := range parts[1:] {
		g.Go(func() error {
			_, err := s.prewriteIn(gctx, p, req.StartTs, primaryKey, ttl, requestID, &prepares[i+1])
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
	// The commit point.
	if err := s.resolveIn(ctx, primary, req.StartTs, commitTS, primary.keys(), true, false, requestID); err != nil {
		if errors.Is(err, region.ErrTxnRolledBack) || status.Code(err) == codes.Aborted {
			return nil, status.Errorf(codes.Aborted, "transaction started at %d: rolled back before it could commit (its locks expired after %s): %v",
				req.StartTs, ttl, err)
		}
		// Whether the record became durable is unknown: a retry of the
		// request (same request ID) learns it at step 1.
		return nil, status.Errorf(codes.Unavailable, "transaction started at %d: committing at its primary's region %s: %v; the outcome is unknown: retry the same request",
			req.StartTs, primary.name, status.Convert(err).Message())
	}
	all := true
	g, gctx = errgroup.WithContext(context.WithoutCancel(ctx))
	for _, p := range parts[1:] {
		g.Go(func() error {
			if err := s.resolveIn(gctx, p, req.StartTs, commitTS, p.keys(), false, false, ""); err != nil {
				all = false
				s.store.opts.Region.Logger.Warn("committing a cross-region transaction's locks; the first request to meet one rolls it forward",
					"start_ts", req.StartTs, "region", p.name, "err", err)
			}
			return nil
		})
	}
	_ = g.Wait()
	if all {
		_ = s.resolveIn(context.WithoutCancel(ctx), primary, req.StartTs, commitTS, [][]byte{primaryKey}, true, true, "")
	}
	return &kvpb.CommitTxnResponse{CommitTs: commitTS, Region: primary.name}, nil
}

func (s *KV) lockTTL() time.Duration { return s.store.opts.TxnLockTTL }

// internalCtx is ctx (its deadline and cancellation) without the incoming
// request's metadata: the store's own calls to its peers on behalf of a
// request, which may be forwarded itself, may be forwarded again.
func internalCtx(ctx context.Context) context.Context {
	return metadata.NewIncomingContext(ctx, metadata.MD{})
}

// prewriteIn prewrites p's mutations, resolving the locks of other
// transactions it meets; it returns the commit timestamp instead when the
// transaction already committed (p is the primary's region).
func (s *KV) prewriteIn(ctx context.Context, p *participant, startTS uint64, primary []byte, ttl time.Duration, requestID string, prepare *uint64) (uint64, error) {
	req := &kvpb.PrewriteRequest{StartTs: startTS, Primary: primary, Mutations: p.mutations, TtlMs: uint64(ttl.Milliseconds()), RequestId: requestID}
	var resp *kvpb.PrewriteResponse
	var err error
	if p.t.forward {
		err = s.forward(ctx, "prewrite", p.t, func(ctx context.Context, c kvpb.KVClient) (err error) {
			resp, err = c.Prewrite(ctx, req)
			return err
		})
	} else {
		resp, err = s.prewriteLocal(ctx, p.t, req)
	}
	if err != nil {
		return 0, err
	}
	*prepare = resp.PrepareTs
	return resp.CommittedTs, nil
}

func (s *KV) prewriteLocal(ctx context.Context, t target, req *kvpb.PrewriteRequest) (*kvpb.PrewriteResponse, error) {
	e, err := t.engine()
	if err != nil {
		return nil, err
	}
	b, err := toBatch(req.Mutations)
	if err != nil {
		return nil, err
	}
	expires := time.Now().Add(time.Duration(req.TtlMs) * time.Millisecond)
	var ts uint64
	err = s.withLocks(ctx, t, func() (err error) {
		ts, err = e.Prewrite(ctx, req.StartTs, req.Primary, b, expires, req.RequestId)
		return err
	})
	var ac *region.AlreadyCommittedError
	if errors.As(err, &ac) {
		return &kvpb.PrewriteResponse{CommittedTs: ac.CommitTS}, nil
	}
	var ce *region.ConflictError
	if errors.As(err, &ce) {
		return nil, conflictStatus(ce)
	}
	if err != nil {
		return nil, regionErr(t.local, err)
	}
	return &kvpb.PrewriteResponse{PrepareTs: ts}, nil
}

// resolveIn commits (commitTS > 0) or rolls back the locks of transaction
// startTS on keys, in p's region.
func (s *KV) resolveIn(ctx context.Context, p *participant, startTS, commitTS uint64, keys [][]byte, primary, forget bool, requestID string) error {
	req := &kvpb.ResolveLocksRequest{StartTs: startTS, CommitTs: commitTS, Keys: keys, Primary: primary, ForgetOutcome: forget, RequestId: requestID}
	if p.t.forward {
		return s.forward(ctx, "resolve-locks", p.t, func(ctx context.Context, c kvpb.KVClient) error {
			_, err := c.ResolveLocks(ctx, req)
			return err
		})
	}
	_, err := s.resolveLocal(ctx, p.t, req)
	return err
}

func (s *KV) resolveLocal(ctx context.Context, t target, req *kvpb.ResolveLocksRequest) (*kvpb.ResolveLocksResponse, error) {
	e, err := t.engine()
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
		return nil, regionErr(t.local, err)
	}
	return &kvpb.ResolveLocksResponse{}, nil
}

// Prewrite implements kvpb.KVServer.
func (s *KV) Prewrite(ctx context.Context, req *kvpb.PrewriteRequest) (*kvpb.PrewriteResponse, error) {
	if req.StartTs == 0 || len(req.Mutations) == 0 || len(req.Primary) == 0 || req.TtlMs == 0 {
		return nil, status.Error(codes.InvalidArgument, "a prewrite needs start_ts, primary, ttl_ms and at least one mutation")
	}
	t, err := s.resolve(ctx, req.Mutations[0].Key)
	if err != nil {
		return nil, mutationErr(0, err)
	}
	for i, m := range req.Mutations[1:] {
		if err := s.inRegion(i+1, m.Key, t); err != nil {
			return nil, err
		}
	}
	if t.forward {
		var resp *kvpb.PrewriteResponse
		err := s.forward(ctx, "prewrite", t, func(ctx context.Context, c kvpb.KVClient) (err error) {
			resp, err = c.Prewrite(ctx, req)
			return err
		})
		return resp, err
	}
	return s.prewriteLocal(ctx, t, req)
}

// ResolveLocks implements kvpb.KVServer.
func (s *KV) ResolveLocks(ctx context.Context, req *kvpb.ResolveLocksRequest) (*kvpb.ResolveLocksResponse, error) {
	if req.StartTs == 0 || len(req.Keys) == 0 {
		return nil, status.Error(codes.InvalidArgument, "resolving locks needs start_ts and at least one key")
	}
	if req.CommitTs != 0 && req.CommitTs <= req.StartTs {
		return nil, status.Errorf(codes.InvalidArgument, "commit_ts %d is not after start_ts %d", req.CommitTs, req.StartTs)
	}
	t, err := s.resolve(ctx, req.Keys[0])
	if err != nil {
		return nil, err
	}
	for i, k := range req.Keys[1:] {
		if err := s.inRegion(i+1, k, t); err != nil {
			return nil, err
		}
	}
	if t.forward {
		err := s.forward(ctx, "resolve-locks", t, func(ctx context.Context, c kvpb.KVClient) error {
			_, err := c.ResolveLocks(ctx, req)
			return err
		})
		if err != nil {
			return nil, err
		}
		return &kvpb.ResolveLocksResponse{}, nil
	}
	return s.resolveLocal(ctx, t, req)
}

// CheckTxnStatus implements kvpb.KVServer.
func (s *KV) CheckTxnStatus(ctx context.Context, req *kvpb.CheckTxnStatusRequest) (*kvpb.CheckTxnStatusResponse, error) {
	if req.StartTs == 0 || len(req.Primary) == 0 {
		return nil, status.Error(codes.InvalidArgument, "checking a transaction's status needs start_ts and primary")
	}
	t, err := s.resolve(ctx, req.Primary)
	if err != nil {
		return nil, err
	}
	if t.forward {
		var resp *kvpb.CheckTxnStatusResponse
		err := s.forward(ctx, "check-txn-status", t, func(ctx context.Context, c kvpb.KVClient) (err error) {
			resp, err = c.CheckTxnStatus(ctx, req)
			return err
		})
		return resp, err
	}
	e, err := t.engine()
	if err != nil {
		return nil, err
	}
	st, err := e.CheckTxnStatus(ctx, req.Primary, req.StartTs, time.Now(), req.RollbackIfAbsent)
	if err != nil {
		return nil, regionErr(t.local, err)
	}
	resp := &kvpb.CheckTxnStatusResponse{CommitTs: st.CommitTS, RolledBack: st.RolledBack}
	if st.Lock != nil {
		resp.LockExpiresAtUnixNs = st.Lock.ExpiresAt
	}
	return resp, nil
}

// write applies a write of req in t's region once per request ID (once),
// resolving the transaction locks it meets (withLocks).
func (s *KV) write(ctx context.Context, t target, req proto.Message, apply func(*region.Request) (uint64, error)) (uint64, error) {
	return s.once(ctx, t.local, req, func(rq *region.Request) (ts uint64, err error) {
		err = s.withLocks(ctx, t, func() (err error) { ts, err = apply(rq); return err })
		return ts, err
	})
}

// withLocks runs op, which works on t's region, resolving each lock it
// meets (region.LockedError) and running it again, until it succeeds,
// fails otherwise, or ctx ends.
func (s *KV) withLocks(ctx context.Context, t target, op func() error) error {
	wait := time.Millisecond
	for {
		err := op()
		var le *region.LockedError
		if !errors.As(err, &le) {
			return err
		}
		resolved, rerr := s.resolveLock(ctx, t, le.Lock)
		if rerr != nil {
			return fmt.Errorf("resolving the lock on %q: %w", le.Key, rerr)
		}
		if resolved {
			wait = time.Millisecond
			continue
		}
		// Still being committed: wait for its coordinator, or its TTL.
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: waited for a lock to be resolved: %v", ctx.Err(), err)
		case <-time.After(wait):
		}
		wait = min(2*wait, 100*time.Millisecond)
	}
}

// resolveLock settles lock l, found in t's region: it asks the primary's
// region for the outcome and commits or rolls back l to match. false: the
// transaction is still being committed (its primary's lock has not expired).
func (s *KV) resolveLock(ctx context.Context, t target, l manifest.TxnLock) (bool, error) {
	expired := time.Now().UnixNano() >= l.ExpiresAt
	st, err := s.CheckTxnStatus(internalCtx(ctx), &kvpb.CheckTxnStatusRequest{Primary: l.Primary, StartTs: l.StartTS, RollbackIfAbsent: expired})
	if err != nil {
		return false, err
	}
	e, err := t.engine()
	if err != nil {
		return false, err
	}
	switch {
	case st.CommitTs != 0:
		err = e.CommitLocks(ctx, l.StartTS, st.CommitTs, [][]byte{l.Key}, false, "")
	case st.RolledBack:
		err = e.RollbackLocks(ctx, l.StartTS, [][]byte{l.Key}, false)
	default:
		return false, nil
	}
	return err == nil, err
}

// ResolveExpiredLocks resolves the expired locks of every open region of
// this store, and forgets the outcomes past their retention: the locks no
// request meets (a transaction whose coordinator crashed) go within a TTL
// and an interval. RunLockResolver calls it; tests call it directly.
func (s *KV) ResolveExpiredLocks(ctx context.Context) {
	now := time.Now()
	for _, a := range s.store.Assignments() {
		e, err := a.Engine()
		if err != nil {
			continue
		}
		t := target{local: a, eng: e}
		for _, l := range e.Locks() {
			if now.UnixNano() < l.ExpiresAt {
				continue
			}
			if _, err := s.resolveLock(ctx, t, l); err != nil && ctx.Err() == nil {
				s.store.opts.Region.Logger.Warn("resolving an expired transaction lock", "region", a.Name(), "key", l.Key, "start_ts", l.StartTS, "err", err)
			}
		}
		if err := e.ForgetTxns(now.Add(-s.store.opts.TxnOutcomeRetryWindow), now.Add(-s.store.opts.TxnOutcomeRetention)); err != nil && ctx.Err() == nil {
			s.store.opts.Region.Logger.Warn("forgetting old transaction outcomes", "region", a.Name(), "err", err)
		}
	}
}

// RunLockResolver calls ResolveExpiredLocks every interval until ctx ends.
func (s *KV) RunLockResolver(ctx context.Context, interval time.Duration) {
	every(ctx, interval, func(time.Time) {
		rctx, cancel := context.WithTimeout(ctx, interval*5)
		defer cancel()
		s.ResolveExpiredLocks(rctx)
	})
}
