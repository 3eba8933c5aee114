package server

import (
	"bytes"
	"context"
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	kvpb "github.com/bellows-kv/bellows/proto/bellows/kv/v1"
	"github.com/bellows-kv/bellows/storage-engine/region"
	"github.com/bellows-kv/bellows/storage-engine/txn"
	"github.com/bellows-kv/bellows/storage-engine/writereq"
)

// Snapshot-isolation transactions (LogBase §3.7): the KV handlers, which
// check a request's shape, route it and hand it to storage-engine/txn (the
// cross-region coordinator, the lock resolver, the registry of BeginTxn's
// transactions) through txnStore (txnstore.go).
//
// A one-shot transaction's state is its start timestamp and, at the
// client, its buffered writes: a store keeps nothing per transaction, so
// any store serves any of its requests and a store's restart loses none.
// A registered one (txn_id) lives at the store that began it.

// TxnGet implements kvpb.KVServer: a read at exactly the start timestamp.
func (s *KV) TxnGet(ctx context.Context, req *kvpb.TxnGetRequest) (*kvpb.GetResponse, error) {
	if req.StartTs == 0 {
		return nil, status.Error(codes.InvalidArgument, "start_ts is 0: take it from BeginTxn")
	}
	if err := s.observe(req.StartTs); err != nil {
		return nil, err
	}
	return s.get(ctx, "txn-get", req.Key, req.StartTs, req.UncertaintyLimit, req.Observed, true, func(ctx context.Context, c kvpb.KVClient) (*kvpb.GetResponse, error) {
		return c.TxnGet(ctx, req)
	})
}

// TxnScan implements kvpb.KVServer: a scan at exactly the start timestamp.
func (s *KV) TxnScan(req *kvpb.TxnScanRequest, stream kvpb.KV_TxnScanServer) error {
	if req.StartTs == 0 {
		return status.Error(codes.InvalidArgument, "start_ts is 0: take it from BeginTxn")
	}
	if err := s.observe(req.StartTs); err != nil {
		return err
	}
	ts := req.StartTs
	return s.scan(&kvpb.ScanRequest{Start: req.Start, End: req.End, Limit: req.Limit, ReadTs: &ts, UncertaintyLimit: req.UncertaintyLimit, Observed: req.Observed, Reverse: req.Reverse}, true, stream)
}

// errTxnIDAndStart is the error of a request naming neither.
var errTxnIDAndStart = errors.New("neither txn_id nor start_ts is set: take them from BeginTxn")

// CommitTxn implements kvpb.KVServer. Mutations in one region commit there
// (region.CommitTxn); mutations in several commit by two-phase commit
// (txn.Coordinator), coordinated by the owner of mutation 0's region, the
// primary's: a request for a primary elsewhere is forwarded to its owner. A
// retry with the same request ID (a forwarded commit whose answer was lost)
// returns the first commit's timestamp.
//
// A request naming a txn_id commits that registered transaction
// (txn.Registry); one without commits at its start_ts (one-shot).
func (s *KV) CommitTxn(ctx context.Context, req *kvpb.CommitTxnRequest) (*kvpb.CommitTxnResponse, error) {
	switch {
	case req.TxnId != "":
		return s.commitRegistered(ctx, req)
	case req.StartTs == 0:
		return nil, status.Error(codes.InvalidArgument, errTxnIDAndStart.Error())
	}
	if err := s.observe(req.StartTs); err != nil {
		return nil, err
	}
	return s.commitOneShot(ctx, req)
}

// commitOneShot commits req's mutations at its start_ts.
func (s *KV) commitOneShot(ctx context.Context, req *kvpb.CommitTxnRequest) (*kvpb.CommitTxnResponse, error) {
	if len(req.Mutations) == 0 {
		return nil, status.Error(codes.InvalidArgument, "a transaction commits at least one mutation (a read-only transaction needs no commit)")
	}
	t, err := s.resolve(ctx, req.Mutations[0].Key)
	if err != nil {
		return nil, mutationErr(0, err)
	}
	for i, m := range req.Mutations {
		if len(m.Key) == 0 {
			return nil, mutationErr(i, toStatus(region.ErrEmptyKey))
		}
	}
	if t.forward {
		var resp *kvpb.CommitTxnResponse
		err := s.forward(ctx, "commit-txn", t, func(ctx context.Context, c kvpb.KVClient) (err error) {
			resp, err = c.CommitTxn(ctx, req)
			return err
		})
		return resp, err
	}
	b, err := writereq.Batch(req.Mutations)
	if err != nil {
		return nil, err
	}
	e, err := t.engine()
	if err != nil {
		return nil, err
	}
	parts, err := s.coordinator.Participants(ctx, req.Mutations)
	if err != nil {
		return nil, err
	}
	if len(parts) > 1 || req.Serializable && len(req.Reads) > 0 {
		// A serializable transaction validates its reads between its
		// prewrite and its commit point, in whatever regions they fall:
		// the two-phase path, even for writes in one region.
		var resp *kvpb.CommitTxnResponse
		requestID, _, err := incomingRequestID(ctx)
		if err != nil {
			return nil, err
		}
		ts, err := s.once(ctx, t.local, req, func(*region.Request) (uint64, error) {
			// The primary's outcome answers a retry after a crash (its
			// prewrite), so the request needs no WAL record here.
			var err error
			resp, err = s.coordinator.CommitAcrossRegions(ctx, req, requestID, parts)
			if err != nil {
				return 0, err
			}
			return resp.CommitTs, nil
		})
		if err != nil {
			return nil, err
		}
		if resp == nil { // a retry answered from the record of the first
			resp = &kvpb.CommitTxnResponse{CommitTs: ts, Region: t.local.Name()}
		}
		return resp, nil
	}
	ts, err := s.write(ctx, t, req, func(rq *region.Request) (uint64, error) {
		return e.CommitTxn(ctx, req.StartTs, b.WithRequest(rq))
	})
	var ce *region.ConflictError
	if errors.As(err, &ce) {
		return nil, txn.ConflictStatus(ce)
	}
	if err != nil {
		return nil, regionErr(t.local, err)
	}
	return &kvpb.CommitTxnResponse{CommitTs: ts, Region: t.local.Name()}, nil
}

// BeginTxn implements kvpb.KVServer: the start timestamp is this store's
// clock, above min_start_ts (observed first), and the transaction is
// registered here (txn.Registry).
func (s *KV) BeginTxn(ctx context.Context, req *kvpb.BeginTxnRequest) (*kvpb.BeginTxnResponse, error) {
	s.answering(ctx)
	if req.MinStartTs != 0 {
		if err := s.observe(req.MinStartTs); err != nil {
			return nil, err
		}
	}
	resp, err := s.txns.Begin(req.UncertaintyLimit)
	if err == nil && resp.UncertaintyLimit != 0 {
		// Every version this store holds is below the start: its clock
		// issued it.
		resp.Observed = &kvpb.ObservedClock{Store: s.clockID, Ts: resp.StartTs}
	}
	return resp, err
}

// RollbackTxn implements kvpb.KVServer.
func (s *KV) RollbackTxn(ctx context.Context, req *kvpb.RollbackTxnRequest) (*kvpb.RollbackTxnResponse, error) {
	if req.TxnId == "" {
		return nil, status.Error(codes.InvalidArgument, "txn_id is empty: take it from BeginTxn (a one-shot transaction has nothing to roll back)")
	}
	if err := s.txns.Rollback(req.TxnId); err != nil {
		return nil, err
	}
	return &kvpb.RollbackTxnResponse{}, nil
}

// commitRegistered is CommitTxn of a registered transaction.
func (s *KV) commitRegistered(ctx context.Context, req *kvpb.CommitTxnRequest) (*kvpb.CommitTxnResponse, error) {
	if len(req.Mutations) == 0 {
		return nil, status.Error(codes.InvalidArgument, "a transaction commits at least one mutation (roll a read-only transaction back with RollbackTxn)")
	}
	requestID, _, err := incomingRequestID(ctx)
	if err != nil {
		return nil, err
	}
	return s.txns.Commit(req.TxnId, req.StartTs, requestID, func(startTS uint64) (*kvpb.CommitTxnResponse, error) {
		return s.commitOneShot(ctx, &kvpb.CommitTxnRequest{StartTs: startTS, Mutations: req.Mutations, Serializable: req.Serializable, Reads: req.Reads})
	})
}

// Prewrite implements kvpb.KVServer.
func (s *KV) Prewrite(ctx context.Context, req *kvpb.PrewriteRequest) (*kvpb.PrewriteResponse, error) {
	if req.StartTs == 0 || len(req.Mutations) == 0 || len(req.Primary) == 0 || req.TtlMs == 0 {
		return nil, status.Error(codes.InvalidArgument, "a prewrite needs start_ts, primary, ttl_ms and at least one mutation")
	}
	if err := s.observe(req.StartTs); err != nil {
		return nil, err
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
	return s.coordinator.Prewrite(ctx, s.txnRegion(t), req)
}

// ResolveLocks implements kvpb.KVServer.
func (s *KV) ResolveLocks(ctx context.Context, req *kvpb.ResolveLocksRequest) (*kvpb.ResolveLocksResponse, error) {
	if req.StartTs == 0 || len(req.Keys) == 0 {
		return nil, status.Error(codes.InvalidArgument, "resolving locks needs start_ts and at least one key")
	}
	if req.CommitTs != 0 && req.CommitTs <= req.StartTs {
		return nil, status.Errorf(codes.InvalidArgument, "commit_ts %d is not after start_ts %d", req.CommitTs, req.StartTs)
	}
	// A commit timestamp is applied as a version: one beyond the bound
	// would put a write in every reader's future.
	if err := s.observe(max(req.StartTs, req.CommitTs)); err != nil {
		return nil, err
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
	return s.resolver.ResolveLocks(ctx, s.txnRegion(t), req)
}

// ValidateReads implements kvpb.KVServer: a serializable commit's check of
// its reads in the region of reads[0] (storage-engine/txn's validate.go).
func (s *KV) ValidateReads(ctx context.Context, req *kvpb.ValidateReadsRequest) (*kvpb.ValidateReadsResponse, error) {
	if req.StartTs == 0 || req.CommitTs <= req.StartTs || len(req.Primary) == 0 || len(req.Reads) == 0 {
		return nil, status.Error(codes.InvalidArgument, "validating reads needs start_ts, a commit_ts after it, the transaction's primary key and at least one span")
	}
	if err := s.observe(req.CommitTs); err != nil {
		return nil, err
	}
	t, err := s.resolve(ctx, req.Reads[0].Start)
	if err != nil {
		return nil, err
	}
	start, end := s.txnRegion(t).Bounds()
	for i, sp := range req.Reads {
		if bytes.Compare(sp.Start, start) < 0 || len(end) > 0 && (len(sp.End) == 0 || bytes.Compare(sp.End, end) > 0) {
			// The coordinator routed the reads by a region map older
			// than this store's (the region split or merged since):
			// nothing is committed yet, so the transaction may run again.
			return nil, status.Errorf(codes.Aborted, "serializable transaction started at %d: read %d, [%q, %q), is not within region %s, [%q, %q), which the commit routed it to: the region changed under the commit; run the transaction again",
				req.StartTs, i, sp.Start, sp.End, s.txnRegion(t).Name(), start, end)
		}
	}
	if err := s.coordinator.ValidateReads(ctx, s.txnRegion(t), req); err != nil {
		return nil, err
	}
	return &kvpb.ValidateReadsResponse{}, nil
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
	return s.resolver.CheckTxnStatus(ctx, s.txnRegion(t), req)
}
