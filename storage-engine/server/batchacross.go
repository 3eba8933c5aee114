package server

import (
	"context"
	"time"

	"github.com/cenkalti/backoff/v5"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/bellows-kv/bellows/internal/contract"
	kvpb "github.com/bellows-kv/bellows/proto/bellows/kv/v1"
	"github.com/bellows-kv/bellows/storage-engine/region"
	"github.com/bellows-kv/bellows/storage-engine/writereq"
)

// batchAcrossRegions commits a batch whose keys fall in more than one
// region, coordinated here (mutation 0's region, the primary's, is this
// store's), through the cross-region commit path: a one-shot transaction
// at a start timestamp taken now, all of it or none, as CommitTxn commits
// one. A batch reads nothing, so a write conflict (a write of one of its
// keys committed after that start) says only that the start was passed:
// nothing of the attempt is visible, and the batch is committed again at a
// new start, until it commits or ctx ends.
//
// Every attempt carries the request's idempotency key: the store's table
// answers a retry of a batch that committed here (once), and after a
// crash the primary's region finds the commit by the key at the retry's
// prewrite, whatever start the retry takes (region.Prewrite).
func (s *KV) batchAcrossRegions(ctx context.Context, t target, req *kvpb.BatchRequest) (*kvpb.BatchResponse, error) {
	if _, err := writereq.Batch(req.Mutations); err != nil {
		return nil, err
	}
	// The client's key, else one of the store's own, so that a retry of
	// an attempt whose primary committed is recognised at its prewrite.
	id, err := requestID(ctx)
	if err != nil {
		return nil, err
	}
	var primary string
	ts, err := s.once(ctx, t.local, req, func(*region.Request) (uint64, error) {
		b := backoff.NewExponentialBackOff()
		b.InitialInterval, b.MaxInterval = time.Millisecond, 50*time.Millisecond
		for {
			// Routed anew on each attempt: a region may have split or
			// merged since the last.
			parts, err := s.coordinator.Participants(ctx, req.Mutations)
			if err != nil {
				return 0, err
			}
			commit := &kvpb.CommitTxnRequest{StartTs: s.store.Clock().Now(), Mutations: req.Mutations}
			resp, err := s.coordinator.CommitAcrossRegions(ctx, commit, id, parts)
			if err == nil {
				primary = resp.Region
				s.metrics.batchAcrossRegions()
				return resp.CommitTs, nil
			}
			if !isWriteConflict(err) {
				return 0, err
			}
			s.metrics.batchAcrossRegionsRetried()
			select {
			case <-ctx.Done():
				return 0, status.FromContextError(ctx.Err()).Err()
			case <-time.After(b.NextBackOff()):
			}
		}
	})
	if err != nil {
		return nil, err
	}
	if primary == "" { // a retry answered from the record of the first
		primary = t.local.Name()
	}
	return &kvpb.BatchResponse{CommitTs: ts, Region: primary}, nil
}

// isWriteConflict reports whether err is ABORTED for a write conflict
// (txn.ConflictStatus).
func isWriteConflict(err error) bool {
	st, ok := status.FromError(err)
	if !ok || st.Code() != codes.Aborted {
		return false
	}
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.Reason == contract.WriteConflictReason {
			return true
		}
	}
	return false
}
