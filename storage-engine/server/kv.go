// Package server is the storage pod's gRPC API: bellows.kv.v1.KV (and Admin)
// over a Store, the set of regions the pod serves. Each request is routed
// once, to the region holding its key (resolve): an open region of this
// store, a region assigned here that waits for its previous owner, or, with
// Forwarding, the peer stores that serve it (forward.go), so any store
// answers for any key; without Forwarding a key outside this store's regions
// fails with OUT_OF_RANGE. A batch must fall in one region, because a region
// is the unit of atomicity.
//
// Errors are gRPC statuses; one about a single region carries the region's
// name as a detail (RegionOf), never only in its text.
package server

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	kvpb "github.com/bellows-kv/bellows/proto/bellows/kv/v1"
	"github.com/bellows-kv/bellows/storage-engine/kv"
	"github.com/bellows-kv/bellows/storage-engine/offload"
	"github.com/bellows-kv/bellows/storage-engine/region"
	"github.com/bellows-kv/bellows/storage-engine/server/route"
	"github.com/bellows-kv/bellows/storage-engine/txn"
	"github.com/bellows-kv/bellows/storage-engine/writereq"
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
	// clockID names this store process in the clock observations it
	// answers (kvpb.ObservedClock): new at each start.
	clockID string
	// The transactions' machinery (storage-engine/txn), over txnStore.
	coordinator *txn.Coordinator
	resolver    *txn.Resolver
	txns        *txn.Registry
	// leases are the other stores' liveness leases as last read, to tell
	// a region failing over (failingover.go).
	leases peerLeases
	// watches are the open Watch streams (watch.go).
	watches watchSet
}

// NewKV serves store; fwd (may be nil) forwards the requests for other
// stores' regions, counted in m (may be nil), whose registry also gets the
// watches' metrics.
//
// It resolves the expired transaction locks of the store's regions in the
// background (txn.Resolver.Run) until the store closes.
func NewKV(store *Store, fwd *Forwarding, m *Metrics) *KV {
	s := &KV{store: store, fwd: fwd, metrics: m, clockID: newClockID(fwd)}
	o := txn.Options{
		LockTTL:            store.opts.TxnLockTTL,
		OutcomeRetryWindow: store.opts.TxnOutcomeRetryWindow,
		OutcomeRetention:   store.opts.TxnOutcomeRetention,
		Timeout:            store.opts.TxnTimeout,
		Logger:             store.opts.Region.Logger,
	}
	s.resolver = txn.NewResolver(txnStore{s}, o)
	s.coordinator = txn.NewCoordinator(txnStore{s}, s.resolver, o)
	s.txns = txn.NewRegistry(txnStore{s}, o)
	go s.resolver.Run(store.bg, store.opts.TxnLockResolveInterval)
	go every(store.bg, time.Second, s.txns.Sweep)
	if m != nil && m.reg != nil {
		RegisterWatchMetrics(m.reg, s)
	}
	return s
}

// target is where a request (or a scan's piece of one region) runs: decided
// once, by resolve or scanPieces, and carried to the end of the request.
type target struct {
	// local is this store's assignment of the region, nil if it has none.
	local *Assignment
	// eng is local's open region; nil when local is nil or not open.
	eng *region.Region
	// notOpen is why local is not open (waiting for its previous owner,
	// or closed) when eng is nil.
	notOpen error
	// forward: the request goes to the owners of remote, the region's
	// span in the whole key space (Forwarding.Spans).
	forward bool
	remote  Span
}

// engine is the open region a local target runs on, or the status error
// that says why it is not open.
func (t target) engine() (*region.Region, error) {
	if t.eng == nil {
		return nil, regionErr(t.local, t.notOpen)
	}
	return t.eng, nil
}

// resolve routes a request for key. It is served here when this store has
// the key's region open. Otherwise, with forwarding on and the request not
// itself forwarded (no loops), it goes to the region's owners; else it is
// answered here: the region's error when it is assigned here but not open,
// OUT_OF_RANGE when it is not assigned here.
func (s *KV) resolve(ctx context.Context, key []byte) (target, error) {
	s.answering(ctx)
	if len(key) == 0 {
		return target{}, toStatus(region.ErrEmptyKey)
	}
	var t target
	if t.local = s.store.Route(key); t.local != nil {
		if t.eng, t.notOpen = t.local.Engine(); t.eng != nil {
			t.local.recordLoad(key)
			return t, nil
		}
	}
	if s.fwd != nil && !forwarded(ctx) {
		t.forward, t.remote = true, spanOf(s.spans(), key)
		return t, nil
	}
	if t.local == nil {
		return target{}, status.Errorf(codes.OutOfRange, "key %q is in no region this store serves (see Regions)", key)
	}
	return t, nil
}

// spans are every region of the cluster, how a key maps to a region name:
// the store's region map, or the fixed split forwarding was given.
func (s *KV) spans() []Span {
	if all := s.store.allSpans(); all != nil {
		return all
	}
	return s.fwd.Spans
}

// mutationErr prefixes a status error with the mutation it is about.
func mutationErr(i int, err error) error {
	st := status.Convert(err)
	return status.Errorf(st.Code(), "mutation %d: %s", i, st.Message())
}

func readTS(ts *uint64) uint64 {
	if ts == nil {
		return kv.MaxTimestamp
	}
	return *ts
}

// Put implements kvpb.KVServer.
func (s *KV) Put(ctx context.Context, req *kvpb.PutRequest) (*kvpb.PutResponse, error) {
	ttl, err := writereq.TTL("put", req.TtlMs)
	if err != nil {
		return nil, err
	}
	return writeKey(s, ctx, "put", req.Key, req,
		func(ctx context.Context, c kvpb.KVClient) (*kvpb.PutResponse, error) { return c.Put(ctx, req) },
		func() *region.Batch { return writereq.Put(new(region.Batch), req.Key, req.Value, ttl) },
		func(a *Assignment, ts uint64, err error) (*kvpb.PutResponse, error) {
			if err != nil {
				return nil, regionErr(a, err)
			}
			return &kvpb.PutResponse{CommitTs: ts, Region: a.Name()}, nil
		})
}

// writeKey serves a write of one key: it forwards the request (fwd, as
// op) to the owner of key's region when that is another store, else
// applies the batch made for it here, once per idempotency key (write),
// and answers what came of it (answer: the region, the commit timestamp
// or the error).
func writeKey[Resp any](s *KV, ctx context.Context, op string, key []byte, req proto.Message,
	fwd func(context.Context, kvpb.KVClient) (Resp, error), batch func() *region.Batch,
	answer func(a *Assignment, ts uint64, err error) (Resp, error),
) (Resp, error) {
	var none Resp
	t, err := s.resolve(ctx, key)
	if err != nil {
		return none, err
	}
	if t.forward {
		var resp Resp
		err := s.forward(ctx, op, t, func(ctx context.Context, c kvpb.KVClient) (err error) {
			resp, err = fwd(ctx, c)
			return err
		})
		return resp, err
	}
	e, err := t.engine()
	if err != nil {
		return none, err
	}
	ts, err := s.write(ctx, t, req, func(rq *region.Request) (uint64, error) { return e.Apply(batch().WithRequest(rq)) })
	return answer(t.local, ts, err)
}

// Get implements kvpb.KVServer.
func (s *KV) Get(ctx context.Context, req *kvpb.GetRequest) (*kvpb.GetResponse, error) {
	return s.get(ctx, "get", req.Key, readTS(req.ReadTs), 0, nil, false, func(ctx context.Context, c kvpb.KVClient) (*kvpb.GetResponse, error) {
		return c.Get(ctx, req)
	})
}

// get reads key at ts here, or forwards the request (fwd) to the key's
// owner. exact makes the region readable at ts first (region.ReadableAt)
// instead of clamping ts to what it has made visible.
func (s *KV) get(ctx context.Context, op string, key []byte, ts, limit uint64, observed []*kvpb.ObservedClock, exact bool, fwd func(context.Context, kvpb.KVClient) (*kvpb.GetResponse, error)) (*kvpb.GetResponse, error) {
	t, err := s.resolve(ctx, key)
	if err != nil {
		return nil, err
	}
	if t.forward {
		var resp *kvpb.GetResponse
		err := s.forward(ctx, op, t, func(ctx context.Context, c kvpb.KVClient) (err error) {
			resp, err = fwd(ctx, c)
			return err
		})
		return resp, err
	}
	e, err := t.engine()
	if err != nil {
		return nil, err
	}
	if exact {
		if err := e.ReadableAt(ts); err != nil {
			return nil, regionErr(t.local, err)
		}
	}
	var v region.Version
	var ok bool
	u := s.uncertainty(limit, observed)
	err = s.withLocks(ctx, t, func() (err error) { v, ok, err = e.GetUncertain(ctx, key, ts, u); return err })
	if err != nil {
		return nil, regionErr(t.local, err)
	}
	resp := &kvpb.GetResponse{Found: ok, Value: v.Value, Version: v.TS, ExpiryTs: v.Expiry}
	if exact {
		resp.Observed = s.observation()
	}
	return resp, nil
}

// Delete implements kvpb.KVServer.
func (s *KV) Delete(ctx context.Context, req *kvpb.DeleteRequest) (*kvpb.DeleteResponse, error) {
	return writeKey(s, ctx, "delete", req.Key, req,
		func(ctx context.Context, c kvpb.KVClient) (*kvpb.DeleteResponse, error) { return c.Delete(ctx, req) },
		func() *region.Batch { return new(region.Batch).Delete(req.Key) },
		func(a *Assignment, ts uint64, err error) (*kvpb.DeleteResponse, error) {
			if err != nil {
				return nil, regionErr(a, err)
			}
			return &kvpb.DeleteResponse{CommitTs: ts, Region: a.Name()}, nil
		})
}

// Batch implements kvpb.KVServer.
func (s *KV) Batch(ctx context.Context, req *kvpb.BatchRequest) (*kvpb.BatchResponse, error) {
	if len(req.Mutations) == 0 {
		return nil, toStatus(region.ErrEmptyBatch)
	}
	// Mutation 0 routes the batch: its region's owner applies it, alone
	// when every key falls in that region, else across the regions.
	t, err := s.resolve(ctx, req.Mutations[0].Key)
	if err != nil {
		return nil, mutationErr(0, err)
	}
	sp := t.remote
	if !t.forward {
		sp = t.local.Span
	}
	across := false
	for i, m := range req.Mutations[1:] {
		if len(m.Key) == 0 {
			return nil, mutationErr(i+1, toStatus(region.ErrEmptyKey))
		}
		across = across || !sp.Contains(m.Key)
	}
	if t.forward {
		var resp *kvpb.BatchResponse
		err := s.forward(ctx, "batch", t, func(ctx context.Context, c kvpb.KVClient) (err error) {
			resp, err = c.Batch(ctx, req)
			return err
		})
		return resp, err
	}
	if across {
		return s.batchAcrossRegions(ctx, t, req)
	}
	b, err := writereq.Batch(req.Mutations)
	if err != nil {
		return nil, err
	}
	e, err := t.engine()
	if err != nil {
		return nil, err
	}
	ts, err := s.write(ctx, t, req, func(rq *region.Request) (uint64, error) { return e.Apply(b.WithRequest(rq)) })
	if err != nil {
		return nil, regionErr(t.local, err)
	}
	return &kvpb.BatchResponse{CommitTs: ts, Region: t.local.Name()}, nil
}

// write applies a write of req in t's region once per request ID (once),
// resolving the transaction locks it meets (withLocks).
func (s *KV) write(ctx context.Context, t target, req proto.Message, apply func(*region.Request) (uint64, error)) (uint64, error) {
	return s.once(ctx, t.local, req, func(rq *region.Request) (ts uint64, err error) {
		err = s.withLocks(ctx, t, func() (err error) { ts, err = apply(rq); return err })
		return ts, err
	})
}

// withLocks runs op, which works on t's region, resolving each lock of a
// cross-region transaction it meets (region.LockedError) and running it
// again, until it succeeds, fails otherwise, or ctx ends (txn.Resolver).
func (s *KV) withLocks(ctx context.Context, t target, op func() error) error {
	return s.resolver.WithLocks(ctx, s.txnRegion(t), op)
}

// inRegion checks that mutation i's key of a prewrite or lock resolution
// (one region's part of a cross-region commit) falls in the region t
// routed it to (by mutation 0). The key's own region is looked up only to
// name it in the error: in the whole key space when the request is
// forwarded, among this store's regions when it is served here.
func (s *KV) inRegion(i int, key []byte, t target) error {
	if len(key) == 0 {
		return mutationErr(i, toStatus(region.ErrEmptyKey))
	}
	sp := t.remote
	if !t.forward {
		sp = t.local.Span
	}
	if sp.Contains(key) {
		return nil
	}
	var other string
	if t.forward {
		other = spanOf(s.spans(), key).Name
	} else if a := s.store.Route(key); a != nil {
		other = a.Name()
	} else if s.fwd != nil {
		// Another store's region: the request is well formed but not
		// atomic, which OUT_OF_RANGE (a stale route, to retry) would hide.
		other = spanOf(s.spans(), key).Name
	} else {
		return status.Errorf(codes.OutOfRange, "mutation %d: key %q is in no region this store serves (see Regions)", i, key)
	}
	return status.Errorf(codes.InvalidArgument,
		"mutation %d: key %q is in region %s, mutation 0 in %s; the keys of one region's prewrite or resolution fall in that region", i, key, other, sp.Name)
}

// Scan implements kvpb.KVServer. Each region is read from one consistent view;
// regions are read one after another, in key order (right to left for a
// reverse scan, each region from its end down). With forwarding, the
// regions of [start, end) this store does not have open are read from their
// owners; a forwarded scan must fall entirely in this store's regions.
func (s *KV) Scan(req *kvpb.ScanRequest, stream kvpb.KV_ScanServer) error {
	return s.scan(req, false, stream)
}

// scan is Scan, or TxnScan when exact: then every region is made readable
// at req.ReadTs first (region.ReadableAt), so the regions read one snapshot.
func (s *KV) scan(req *kvpb.ScanRequest, exact bool, stream kvpb.KV_ScanServer) error {
	ctx := stream.Context()
	s.answeringStream(stream)
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
		if exact {
			chunk.Observed = s.observation()
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
	pieces := s.scanPieces(ctx, req.Start, end)
	if req.Reverse {
		slices.Reverse(pieces)
	}
	for _, p := range pieces {
		var err error
		if p.forward {
			err = s.scanRemote(ctx, p, req, exact, &left, req.Limit > 0, emit)
		} else {
			err = s.scanRegion(ctx, p, readTS(req.ReadTs), req.UncertaintyLimit, req.Observed, exact, req.Reverse, &left, req.Limit > 0, emit)
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

// scanPiece is the part of a scan in one region and where it runs.
type scanPiece struct {
	piece
	target
}

// scanPieces are the pieces of [start, end) in key order, each routed once:
// without forwarding (or for a forwarded scan), this store's regions, read
// here; with it, every region, read here where this store has it open and
// from its owners elsewhere.
func (s *KV) scanPieces(ctx context.Context, start, end []byte) []scanPiece {
	var out []scanPiece
	if s.fwd == nil || forwarded(ctx) {
		for _, a := range s.store.Assignments() {
			for _, p := range split([]Span{a.Span}, start, end) {
				t := target{local: a}
				t.eng, t.notOpen = a.Engine()
				out = append(out, scanPiece{p, t})
			}
		}
		return out
	}
	for _, p := range split(s.spans(), start, end) {
		var t target
		if t.local = s.store.ByName(p.span.Name); t.local != nil {
			t.eng, t.notOpen = t.local.Engine()
		}
		if t.eng == nil {
			t.forward, t.remote = true, p.span
		}
		out = append(out, scanPiece{p, t})
	}
	return out
}

// scanRegion reads a piece from this store's region, from its end down
// when reverse.
func (s *KV) scanRegion(ctx context.Context, p scanPiece, ts, limit uint64, observed []*kvpb.ObservedClock, exact, reverse bool, left *int, limited bool, emit func(k, v []byte) error) error {
	r := p.local
	start, end := maxKey(p.start, r.Span.Start), p.end
	if r.Span.End != nil && (end == nil || bytes.Compare(r.Span.End, end) < 0) {
		end = r.Span.End
	}
	e, err := p.engine()
	if err != nil {
		return err
	}
	r.recordLoad(start)
	if exact {
		if err := e.ReadableAt(ts); err != nil {
			return regionErr(r, err)
		}
	}
	var it *region.Iterator
	u := s.uncertainty(limit, observed)
	err = s.withLocks(ctx, p.target, func() (err error) { it, err = e.NewIteratorUncertain(ctx, start, end, ts, u); return err })
	if err != nil {
		return regionErr(r, err)
	}
	defer it.Close()
	first, next := it.First, it.Next
	if reverse {
		first, next = it.Last, it.Prev
	}
	for ok := first(); ok; ok = next() {
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
	if o := s.store.opts.Ordinal; o != nil {
		resp.Ordinal = proto.Int32(int32(*o))
	}
	if s.fwd != nil {
		resp.Peers = s.fwd.Router.Peers()
	}
	now := time.Now()
	// A store past its own lease serves none of its regions: they fail
	// over from it unless it renews first.
	var expired string
	if l := s.store.opts.Liveness; l != nil && l.Keeper != nil && !l.Keeper.Serving(now) {
		expired = l.Store
	}
	for _, a := range s.store.Assignments() {
		info := regionInfo(s.store.opts.Name, a, now)
		if expired != "" && info.FailingOverFrom == "" {
			info.FailingOverFrom = expired
		}
		resp.Regions = append(resp.Regions, info)
	}
	resp.FailingOver = s.failingOverRegions(now)
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

// Compact implements kvpb.AdminServer. The call lasts as long as the
// compaction, but never holds the region: when this store releases the
// region meanwhile, the job is cancelled and the call answers ABORTED at
// once ("region-003 was released by this store while its compaction ran;
// nothing was installed").
func (s *KV) Compact(ctx context.Context, req *kvpb.CompactRequest) (*kvpb.CompactResponse, error) {
	r := s.store.ByName(req.Region)
	if r == nil {
		return nil, s.notServedHere(req.Region)
	}
	e, err := r.Engine()
	if err != nil {
		return nil, regionErr(r, err)
	}
	// The executor reports where the job ran and why it did not start.
	rep := &offload.Report{StartTimeout: time.Duration(req.StartTimeoutMs) * time.Millisecond}
	info, err := e.Compact(offload.WithReport(ctx, rep), req.Major)
	if err != nil {
		if ns := (*offload.NotStartedError)(nil); errors.As(err, &ns) {
			return nil, notStartedStatus(r.Name(), ns)
		}
		return nil, regionErr(r, err)
	}
	if info == nil {
		return &kvpb.CompactResponse{}, nil
	}
	location, worker, note := rep.Ran()
	return &kvpb.CompactResponse{Compacted: true, Inputs: info.Inputs, Output: info.Output, InputBytes: info.InputBytes,
		Location: location, Worker: worker, Note: note}, nil
}

func (s *KV) pick(name string) ([]*Assignment, error) {
	if name == "" {
		return s.store.Assignments(), nil
	}
	if r := s.store.ByName(name); r != nil {
		return []*Assignment{r}, nil
	}
	return nil, s.notServedHere(name)
}

// notServedHere is the error for a request naming a region this store does
// not serve. A region of the cluster's map served elsewhere (moved by the
// balancer, or never here) is OUT_OF_RANGE, as for a key, so that clients
// look the region up again and retry; a name the map does not hold (split
// or merged away, or mistyped) is NOT_FOUND.
func (s *KV) notServedHere(name string) error {
	if m, ok := s.store.RegionMap(); ok {
		if _, inMap := m.ByName(name); inMap {
			return status.Errorf(codes.OutOfRange, "region %q is served by another store, not this one (see Regions)", name)
		}
		return status.Errorf(codes.NotFound, "no region %q in the cluster's region map: split or merged away, or never there (see Regions)", name)
	}
	return status.Errorf(codes.NotFound, "this store serves no region %q", name)
}
