// Package server is the storage pod's gRPC API: bellows.kv.v1.KV (and Admin)
// over a Store, the set of regions the pod serves. Each request is routed to
// the region holding its key; a batch must fall in one region, because a
// region is the unit of atomicity. With Forwarding, a request for a region
// another store serves is forwarded to it (forward.go), so any store answers
// for any key; without, it fails with OUT_OF_RANGE.
package server

import (
	"bytes"
	"context"
	"fmt"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	kvpb "github.com/bellows-kv/bellows/proto/bellows/kv/v1"
	"github.com/bellows-kv/bellows/storage-engine/kv"
	"github.com/bellows-kv/bellows/storage-engine/region"
	"github.com/bellows-kv/bellows/storage-engine/server/route"
)

// scanChunk bounds one ScanResponse.
const scanChunk = 256 << 10

// KV implements kvpb.KVServer and kvpb.AdminServer.
type KV struct {
	kvpb.UnimplementedKVServer
	kvpb.UnimplementedAdminServer
	store   *Store
	fwd     *Forwarding // nil: serve only this store's regions
	metrics *Metrics    // nil: not observed
}

// NewKV serves store; fwd (may be nil) forwards the requests for other
// stores' regions, counted in m (may be nil).
func NewKV(store *Store, fwd *Forwarding, m *Metrics) *KV {
	return &KV{store: store, fwd: fwd, metrics: m}
}

func (s *KV) route(key []byte) (*Assignment, error) {
	if len(key) == 0 {
		return nil, toStatus(region.ErrEmptyKey)
	}
	r := s.store.Route(key)
	if r == nil {
		return nil, status.Errorf(codes.OutOfRange, "key %q is in no region this store serves (see Regions)", key)
	}
	return r, nil
}

// routeOpen is route to an open region.
func (s *KV) routeOpen(key []byte) (*Assignment, *region.Region, error) {
	r, err := s.route(key)
	if err != nil {
		return nil, nil, err
	}
	e, err := r.Engine()
	if err != nil {
		return nil, nil, regionErr(r, err)
	}
	return r, e, nil
}

// regionErr names the region in an engine error that does not already.
func regionErr(r *Assignment, err error) error {
	if err == nil {
		return nil
	}
	if !strings.Contains(err.Error(), r.Name()) {
		err = fmt.Errorf("region %s: %w", r.Name(), err)
	}
	return toStatus(err)
}

func readTS(ts *uint64) uint64 {
	if ts == nil {
		return kv.MaxTimestamp
	}
	return *ts
}

// Put implements kvpb.KVServer.
func (s *KV) Put(ctx context.Context, req *kvpb.PutRequest) (*kvpb.PutResponse, error) {
	if sp, ok := s.remote(ctx, req.Key); ok {
		var resp *kvpb.PutResponse
		err := s.forward(ctx, "put", sp, func(ctx context.Context, c kvpb.KVClient) (err error) {
			resp, err = c.Put(ctx, req)
			return err
		})
		return resp, err
	}
	r, e, err := s.routeOpen(req.Key)
	if err != nil {
		return nil, err
	}
	ts, err := e.Put(req.Key, req.Value)
	if err != nil {
		return nil, regionErr(r, err)
	}
	return &kvpb.PutResponse{CommitTs: ts, Region: r.Name()}, nil
}

// Get implements kvpb.KVServer.
func (s *KV) Get(ctx context.Context, req *kvpb.GetRequest) (*kvpb.GetResponse, error) {
	if sp, ok := s.remote(ctx, req.Key); ok {
		var resp *kvpb.GetResponse
		err := s.forward(ctx, "get", sp, func(ctx context.Context, c kvpb.KVClient) (err error) {
			resp, err = c.Get(ctx, req)
			return err
		})
		return resp, err
	}
	r, e, err := s.routeOpen(req.Key)
	if err != nil {
		return nil, err
	}
	v, ok, err := e.Get(req.Key, readTS(req.ReadTs))
	if err != nil {
		return nil, regionErr(r, err)
	}
	return &kvpb.GetResponse{Found: ok, Value: v}, nil
}

// Delete implements kvpb.KVServer.
func (s *KV) Delete(ctx context.Context, req *kvpb.DeleteRequest) (*kvpb.DeleteResponse, error) {
	if sp, ok := s.remote(ctx, req.Key); ok {
		var resp *kvpb.DeleteResponse
		err := s.forward(ctx, "delete", sp, func(ctx context.Context, c kvpb.KVClient) (err error) {
			resp, err = c.Delete(ctx, req)
			return err
		})
		return resp, err
	}
	r, e, err := s.routeOpen(req.Key)
	if err != nil {
		return nil, err
	}
	ts, err := e.Delete(req.Key)
	if err != nil {
		return nil, regionErr(r, err)
	}
	return &kvpb.DeleteResponse{CommitTs: ts, Region: r.Name()}, nil
}

// Batch implements kvpb.KVServer.
func (s *KV) Batch(ctx context.Context, req *kvpb.BatchRequest) (*kvpb.BatchResponse, error) {
	if len(req.Mutations) == 0 {
		return nil, toStatus(region.ErrEmptyBatch)
	}
	if sp, ok := s.remote(ctx, req.Mutations[0].Key); ok {
		// The whole batch goes to one region's owner, which applies it
		// atomically; it must all fall in that region.
		for i, m := range req.Mutations {
			if len(m.Key) == 0 {
				return nil, status.Errorf(codes.InvalidArgument, "mutation %d: %s", i, region.ErrEmptyKey)
			}
			if o := spanOf(s.fwd.Spans, m.Key); o.Name != sp.Name {
				return nil, status.Errorf(codes.InvalidArgument,
					"mutation %d: key %q is in region %s, mutation 0 in %s; a batch is atomic only within one region", i, m.Key, o.Name, sp.Name)
			}
		}
		var resp *kvpb.BatchResponse
		err := s.forward(ctx, "batch", sp, func(ctx context.Context, c kvpb.KVClient) (err error) {
			resp, err = c.Batch(ctx, req)
			return err
		})
		return resp, err
	}
	var r *Assignment
	b := new(region.Batch)
	for i, m := range req.Mutations {
		mr, err := s.route(m.Key)
		if err != nil {
			return nil, status.Errorf(status.Code(err), "mutation %d: %s", i, status.Convert(err).Message())
		}
		if r != nil && mr != r {
			return nil, status.Errorf(codes.InvalidArgument,
				"mutation %d: key %q is in region %s, mutation 0 in %s; a batch is atomic only within one region", i, m.Key, mr.Name(), r.Name())
		}
		r = mr
		switch m.Op {
		case kvpb.Mutation_OP_PUT:
			b.Put(m.Key, m.Value)
		case kvpb.Mutation_OP_DELETE:
			b.Delete(m.Key)
		default:
			return nil, status.Errorf(codes.InvalidArgument, "mutation %d: op %v is neither OP_PUT nor OP_DELETE", i, m.Op)
		}
	}
	e, err := r.Engine()
	if err != nil {
		return nil, regionErr(r, err)
	}
	ts, err := e.Apply(b)
	if err != nil {
		return nil, regionErr(r, err)
	}
	return &kvpb.BatchResponse{CommitTs: ts, Region: r.Name()}, nil
}

// Scan implements kvpb.KVServer. Each region is read from one consistent view;
// regions are read one after another, in key order. With forwarding, the
// regions of [start, end) this store does not have open are read from their
// owners; a forwarded scan must fall entirely in this store's regions.
func (s *KV) Scan(req *kvpb.ScanRequest, stream kvpb.KV_ScanServer) error {
	ctx := stream.Context()
	end := req.End
	if len(end) == 0 {
		end = nil
	}
	if end != nil && bytes.Compare(req.Start, end) >= 0 {
		return nil
	}
	if s.fwd != nil && forwarded(ctx) {
		if at, ok := s.uncovered(req.Start, end); ok {
			return status.Errorf(codes.OutOfRange, "scan from %q: key %q is in no region this store serves (see Regions)", req.Start, at)
		}
	}
	left := int(req.Limit)
	var chunk kvpb.ScanResponse
	size := 0
	flush := func() error {
		if len(chunk.Pairs) == 0 {
			return nil
		}
		err := stream.Send(&chunk)
		chunk.Pairs, size = nil, 0
		return err
	}
	emit := func(k, v []byte) error {
		chunk.Pairs = append(chunk.Pairs, &kvpb.KeyValue{Key: bytes.Clone(k), Value: bytes.Clone(v)})
		if size += len(k) + len(v); size >= scanChunk {
			return flush()
		}
		return nil
	}
	for _, p := range s.scanPieces(ctx, req.Start, end) {
		var err error
		if p.local != nil {
			err = s.scanRegion(ctx, p.local, p.start, p.end, readTS(req.ReadTs), &left, req.Limit > 0, emit)
		} else {
			err = s.scanRemote(ctx, p.piece, req, &left, req.Limit > 0, emit)
		}
		if err != nil {
			return err
		}
		if req.Limit > 0 && left == 0 {
			break
		}
	}
	return flush()
}

// scanPiece is a piece of a scan and, when it is read here, its region.
type scanPiece struct {
	piece
	local *Assignment
}

// scanPieces are the pieces of [start, end) in key order: without forwarding
// (or for a forwarded scan), this store's regions; with it, every region,
// local where this store has it open.
func (s *KV) scanPieces(ctx context.Context, start, end []byte) []scanPiece {
	var out []scanPiece
	if s.fwd == nil || forwarded(ctx) {
		for _, r := range s.store.Assignments() {
			for _, p := range split([]Span{r.Span}, start, end) {
				out = append(out, scanPiece{p, r})
			}
		}
		return out
	}
	for _, p := range split(s.fwd.Spans, start, end) {
		sp := scanPiece{piece: p}
		if r := s.store.ByName(p.span.Name); r != nil {
			if _, err := r.Engine(); err == nil {
				sp.local = r
			}
		}
		out = append(out, sp)
	}
	return out
}

func (s *KV) scanRegion(ctx context.Context, r *Assignment, start, end []byte, ts uint64, left *int, limited bool, emit func(k, v []byte) error) error {
	start = maxKey(start, r.Span.Start)
	if r.Span.End != nil && (end == nil || bytes.Compare(r.Span.End, end) < 0) {
		end = r.Span.End
	}
	e, err := r.Engine()
	if err != nil {
		return regionErr(r, err)
	}
	it, err := e.NewIterator(start, end, ts)
	if err != nil {
		return regionErr(r, err)
	}
	defer it.Close()
	for ok := it.First(); ok; ok = it.Next() {
		if limited && *left == 0 {
			return nil
		}
		if err := ctx.Err(); err != nil {
			return toStatus(err)
		}
		if err := emit(it.Key(), it.Value()); err != nil {
			return err
		}
		*left--
	}
	return regionErr(r, it.Err())
}

func maxKey(a, b []byte) []byte {
	if bytes.Compare(a, b) >= 0 {
		return a
	}
	return b
}

// Regions implements kvpb.KVServer.
func (s *KV) Regions(ctx context.Context, _ *kvpb.RegionsRequest) (*kvpb.RegionsResponse, error) {
	if s.fwd != nil {
		// Lets this store's router recognise itself among its peers.
		_ = grpc.SetHeader(ctx, metadata.Pairs(route.StoreIDHeader, s.fwd.Router.Self()))
	}
	resp := &kvpb.RegionsResponse{}
	for _, r := range s.store.Assignments() {
		info := &kvpb.RegionInfo{Name: r.Name(), Start: r.Span.Start, End: r.Span.End}
		if e, err := r.Engine(); err == nil {
			info.SstFiles = uint32(e.FileCount())
		}
		resp.Regions = append(resp.Regions, info)
	}
	return resp, nil
}

// Flush implements kvpb.AdminServer.
func (s *KV) Flush(ctx context.Context, req *kvpb.FlushRequest) (*kvpb.FlushResponse, error) {
	regions, err := s.pick(req.Region)
	if err != nil {
		return nil, err
	}
	for _, r := range regions {
		e, err := r.Engine()
		if err == nil {
			err = e.Flush(ctx)
		}
		if err != nil {
			return nil, regionErr(r, err)
		}
	}
	return &kvpb.FlushResponse{}, nil
}

// Compact implements kvpb.AdminServer.
func (s *KV) Compact(ctx context.Context, req *kvpb.CompactRequest) (*kvpb.CompactResponse, error) {
	r := s.store.ByName(req.Region)
	if r == nil {
		return nil, status.Errorf(codes.NotFound, "this store serves no region %q", req.Region)
	}
	e, err := r.Engine()
	if err != nil {
		return nil, regionErr(r, err)
	}
	info, err := e.Compact(ctx, req.Major)
	if err != nil {
		return nil, regionErr(r, err)
	}
	if info == nil {
		return &kvpb.CompactResponse{}, nil
	}
	return &kvpb.CompactResponse{Compacted: true, Inputs: info.Inputs, Output: info.Output, InputBytes: info.InputBytes}, nil
}

func (s *KV) pick(name string) ([]*Assignment, error) {
	if name == "" {
		return s.store.Assignments(), nil
	}
	if r := s.store.ByName(name); r != nil {
		return []*Assignment{r}, nil
	}
	return nil, status.Errorf(codes.NotFound, "this store serves no region %q", name)
}
