package server

import (
	"context"
	"encoding/base64"
	"errors"
	"strconv"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/bellows-kv/bellows/internal/contract"
	kvpb "github.com/bellows-kv/bellows/proto/bellows/kv/v1"
	"github.com/bellows-kv/bellows/storage-engine/region"
)

// Snapshot-isolation transactions (LogBase §3.7, region-local for now).
// A transaction's state is its start timestamp and, at the client, its
// buffered writes: a store keeps nothing per transaction, so any store
// serves any of its requests and a store's restart loses none.

// TxnGet implements kvpb.KVServer: a read at exactly the start timestamp.
func (s *KV) TxnGet(ctx context.Context, req *kvpb.TxnGetRequest) (*kvpb.GetResponse, error) {
	if req.StartTs == 0 {
		return nil, status.Error(codes.InvalidArgument, "start_ts is 0: take it from BeginTxn")
	}
	return s.get(ctx, "txn-get", req.Key, req.StartTs, true, func(ctx context.Context, c kvpb.KVClient) (*kvpb.GetResponse, error) {
		return c.TxnGet(ctx, req)
	})
}

// TxnScan implements kvpb.KVServer: a scan at exactly the start timestamp.
func (s *KV) TxnScan(req *kvpb.TxnScanRequest, stream kvpb.KV_TxnScanServer) error {
	if req.StartTs == 0 {
		return status.Error(codes.InvalidArgument, "start_ts is 0: take it from BeginTxn")
	}
	ts := req.StartTs
	return s.scan(&kvpb.ScanRequest{Start: req.Start, End: req.End, Limit: req.Limit, ReadTs: &ts, Reverse: req.Reverse}, true, stream)
}

// CommitTxn implements kvpb.KVServer. Mutations in one region commit there
// (region.CommitTxn); mutations in several commit by two-phase commit
// (twopc.go), coordinated by the owner of mutation 0's region, the
// primary's: a request for a primary elsewhere is forwarded to its owner. A
// retry with the same request ID (a forwarded commit whose answer was lost)
// returns the first commit's timestamp.
//
// A request naming a txn_id commits that registered transaction (txnreg.go);
// one without commits at its start_ts (one-shot).
func (s *KV) CommitTxn(ctx context.Context, req *kvpb.CommitTxnRequest) (*kvpb.CommitTxnResponse, error) {
	switch {
	case req.TxnId != "":
		return s.commitRegistered(ctx, req)
	case req.StartTs == 0:
		return nil, status.Error(codes.InvalidArgument, errTxnIDAndStart.Error())
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
	b, err := toBatch(req.Mutations)
	if err != nil {
		return nil, err
	}
	e, err := t.engine()
	if err != nil {
		return nil, err
	}
	// The other regions' owners are found as for a request of this store's
	// own, also when this one was forwarded here.
	parts, err := s.participants(internalCtx(ctx), req.Mutations)
	if err != nil {
		return nil, err
	}
	if len(parts) > 1 {
		var resp *kvpb.CommitTxnResponse
		requestID, _, err := incomingRequestID(ctx)
		if err != nil {
			return nil, err
		}
		ts, err := s.once(ctx, t.local, req, func(*region.Request) (uint64, error) {
			// The primary's outcome answers a retry after a crash
			// (prewriteIn), so the request needs no WAL record here.
			var err error
			resp, err = s.commitAcrossRegions(internalCtx(ctx), req, requestID, parts)
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
		return nil, conflictStatus(ce)
	}
	if err != nil {
		return nil, regionErr(t.local, err)
	}
	return &kvpb.CommitTxnResponse{CommitTs: ts, Region: t.local.Name()}, nil
}

// toBatch is the engine batch of mutations.
func toBatch(muts []*kvpb.Mutation) (*region.Batch, error) {
	b := new(region.Batch)
	for i, m := range muts {
		switch m.Op {
		case kvpb.Mutation_OP_PUT:
			b.Put(m.Key, m.Value)
		case kvpb.Mutation_OP_DELETE:
			b.Delete(m.Key)
		default:
			return nil, status.Errorf(codes.InvalidArgument, "mutation %d: op %v is neither OP_PUT nor OP_DELETE", i, m.Op)
		}
	}
	return b, nil
}

// conflictStatus is ABORTED with the conflict as an ErrorInfo.
func conflictStatus(ce *region.ConflictError) error {
	st := status.New(codes.Aborted, ce.Error())
	if d, err := st.WithDetails(&errdetails.ErrorInfo{Reason: contract.WriteConflictReason, Domain: contract.ErrorDomain, Metadata: map[string]string{
		"key_base64":   base64.StdEncoding.EncodeToString(ce.Key),
		"committed_ts": strconv.FormatUint(ce.CommittedTS, 10),
	}}); err == nil {
		st = d
	}
	return st.Err()
}
