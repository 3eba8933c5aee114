package server

import (
	"bytes"
	"context"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/bellows-kv/bellows/internal/contract"
	kvpb "github.com/bellows-kv/bellows/proto/bellows/kv/v1"
	"github.com/bellows-kv/bellows/storage-engine/kv"
	"github.com/bellows-kv/bellows/storage-engine/region"
)

// batchGetBytes bounds the values (and a few bytes per result) of one
// BatchGet answer, below the message size limit; the answer stops before
// the result that would pass it (a variable so tests can lower it).
var batchGetBytes = contract.MaxBatchBytes

// deleteRangeBytes bounds the keys of one DeleteRange batch, what one
// region.Batch may hold (a variable so tests can lower it).
var deleteRangeBytes = contract.MaxBatchBytes

// keyErr prefixes a status error with the key it is about.
func keyErr(i int, err error) error {
	st := status.Convert(err)
	return status.Errorf(st.Code(), "key %d: %s", i, st.Message())
}

// BatchGet implements kvpb.KVServer: the keys of keys[0]'s region, read
// from one view of it (a snapshot of its newest visible timestamp, or
// read_ts), here or at the region's owner.
func (s *KV) BatchGet(ctx context.Context, req *kvpb.BatchGetRequest) (*kvpb.BatchGetResponse, error) {
	if len(req.Keys) == 0 {
		return nil, status.Error(codes.InvalidArgument, "BatchGet: no keys")
	}
	t, err := s.resolve(ctx, req.Keys[0])
	if err != nil {
		return nil, keyErr(0, err)
	}
	sp := t.remote
	if !t.forward {
		sp = t.local.Span
	}
	for i, k := range req.Keys[1:] {
		if len(k) == 0 {
			return nil, keyErr(i+1, toStatus(region.ErrEmptyKey))
		}
		if !sp.Contains(k) {
			// The caller grouped the keys by a stale region table (a
			// split): OUT_OF_RANGE tells the Go client to refresh it.
			return nil, status.Errorf(codes.OutOfRange,
				"key %d (%q) is not in %s [%q, %q), key 0's region: a BatchGet reads one region; regroup the keys by region (see Regions)",
				i+1, k, sp.Name, sp.Start, sp.End)
		}
	}
	if t.forward {
		var resp *kvpb.BatchGetResponse
		err := s.forward(ctx, "batch-get", t, func(ctx context.Context, c kvpb.KVClient) (err error) {
			resp, err = c.BatchGet(ctx, req)
			return err
		})
		return resp, err
	}
	e, err := t.engine()
	if err != nil {
		return nil, err
	}
	ts := readTS(req.ReadTs)
	if req.ReadTs == nil {
		// One view of the region for every key.
		snap, err := e.Snapshot()
		if err != nil {
			return nil, regionErr(t.local, err)
		}
		defer snap.Close()
		ts = snap.TS()
	}
	t.local.recordLoad(req.Keys[0])
	resp := &kvpb.BatchGetResponse{Region: t.local.Name(), Results: make([]*kvpb.GetResponse, 0, len(req.Keys))}
	size := 0
	for i, k := range req.Keys {
		var v []byte
		var ok bool
		err := s.withLocks(ctx, t, func() (err error) { v, ok, err = e.GetContext(ctx, k, ts); return err })
		if err != nil {
			return nil, keyErr(i, regionErr(t.local, err))
		}
		if size += len(v) + 8; i > 0 && size > batchGetBytes {
			break // the caller asks again for the rest
		}
		resp.Results = append(resp.Results, &kvpb.GetResponse{Found: ok, Value: v})
	}
	return resp, nil
}

// DeleteRange implements kvpb.KVServer: one batch of tombstones for the
// live keys of [start, end) in start's region, at most deleteRangeBytes of
// keys, here or at the region's owner.
func (s *KV) DeleteRange(ctx context.Context, req *kvpb.DeleteRangeRequest) (*kvpb.DeleteRangeResponse, error) {
	start, end := req.Start, req.End
	if len(end) == 0 {
		end = nil
	}
	if len(start) == 0 {
		start = []byte{0} // the first key there can be: keys are not empty
	}
	if end != nil && bytes.Compare(start, end) >= 0 {
		return &kvpb.DeleteRangeResponse{}, nil
	}
	t, err := s.resolve(ctx, start)
	if err != nil {
		return nil, err
	}
	if t.forward {
		var resp *kvpb.DeleteRangeResponse
		err := s.forward(ctx, "delete-range", t, func(ctx context.Context, c kvpb.KVClient) (err error) {
			resp, err = c.DeleteRange(ctx, req)
			return err
		})
		return resp, err
	}
	e, err := t.engine()
	if err != nil {
		return nil, err
	}
	sp := t.local.Span
	// The part of the range in this region, and where the rest begins.
	var rest []byte
	if sp.End != nil && (end == nil || bytes.Compare(sp.End, end) < 0) {
		end, rest = sp.End, sp.End
	}
	t.local.recordLoad(start)
	var deleted int
	var resume []byte
	ts, dup, err := s.onceDup(ctx, t.local, req, func(rq *region.Request) (uint64, error) {
		var ts uint64
		err := s.withLocks(ctx, t, func() error {
			// withLocks may run this again after resolving a lock.
			deleted, resume, ts = 0, rest, 0
			b := new(region.Batch)
			it, err := e.NewIteratorContext(ctx, start, end, kv.MaxTimestamp)
			if err != nil {
				return err
			}
			size := 0
			for ok := it.First(); ok; ok = it.Next() {
				if size+len(it.Key()) > deleteRangeBytes && b.Len() > 0 {
					resume = bytes.Clone(it.Key())
					break
				}
				size += len(it.Key())
				b.Delete(it.Key())
			}
			err = it.Err()
			it.Close()
			if err != nil || b.Len() == 0 {
				return err
			}
			if ts, err = e.Apply(b.WithRequest(rq)); err == nil {
				deleted = b.Len()
			}
			return err
		})
		return ts, err
	})
	if err != nil {
		return nil, regionErr(t.local, err)
	}
	if dup {
		// An earlier attempt with this key was applied and its answer
		// lost: what it deleted is unknown here, so the caller goes on
		// from start and deletes what is still live.
		deleted, resume = 0, req.Start
		if len(resume) == 0 {
			resume = start
		}
	}
	return &kvpb.DeleteRangeResponse{CommitTs: ts, Region: t.local.Name(), Deleted: uint64(deleted), Resume: resume}, nil
}

// onceDup is once, also saying whether the answer is an earlier attempt's
// (dup): then apply did not run.
func (s *KV) onceDup(ctx context.Context, a *Assignment, req *kvpb.DeleteRangeRequest, apply func(*region.Request) (uint64, error)) (uint64, bool, error) {
	id, ok, err := incomingRequestID(ctx)
	if err != nil {
		return 0, false, err
	}
	if !ok {
		ts, err := apply(nil)
		return ts, false, err
	}
	b, err := requestBytes(req)
	if err != nil {
		return 0, false, status.Errorf(codes.Internal, "fingerprinting the request: %v", err)
	}
	rq := &region.Request{ID: id, Fingerprint: fingerprint(b)}
	return s.store.applied.do(ctx, a.Name(), id, b, func() (uint64, error) { return apply(rq) })
}
