package server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/anypb"

	kvpb "github.com/bellows-kv/bellows/proto/bellows/kv/v1"
	"github.com/bellows-kv/bellows/storage-engine/server/route"
)

// Forwarding lets a store serve any key: a request for a region this store
// does not serve (or has not opened yet) is forwarded to the peer that does.
type Forwarding struct {
	// Spans is the whole key space's split (before the --region-owner
	// filter): how a key maps to a region name.
	Spans []Span
	// Router maps region names to peers.
	Router *route.Router
}

// forwarded reports whether ctx is a request another store forwarded here.
func forwarded(ctx context.Context) bool {
	md, _ := metadata.FromIncomingContext(ctx)
	return len(md.Get(route.ForwardedHeader)) > 0
}

// spanOf is the span holding key; spans cover the whole key space.
func spanOf(spans []Span, key []byte) Span {
	for _, sp := range spans {
		if sp.Contains(key) {
			return sp
		}
	}
	return Span{}
}

// staleRoute: errors after which the map may be out of date — the owner is
// gone (UNAVAILABLE), has not opened the region (UNAVAILABLE), or no longer
// serves it (OUT_OF_RANGE). Another owner, or the map refreshed, may do.
func staleRoute(err error) bool {
	c := status.Code(err)
	return c == codes.Unavailable || c == codes.OutOfRange
}

// writeOp reports whether op changes data: its forwarded call carries an
// idempotency key (RequestIDHeader), so a retry is not applied twice.
func writeOp(op string) bool {
	return op == "put" || op == "delete" || op == "compare-and-set" || op == "batch" || op == "commit-txn" || op == "delete-range"
}

// forward runs call against the owners of t's region (t.remote): each known
// owner in turn, then, if every one failed with a stale-route error, once
// more after refreshing the map. The outgoing request carries the incoming
// deadline and cancellation and is marked forwarded, so the owner never
// forwards it again.
//
// Errors (see forwardErr): the caller's own cancellation or deadline keeps
// its code; an owner's answer keeps its code; any other failure on the way
// (connection closing or broken, transport error, the peer's own CANCELLED)
// is UNAVAILABLE naming the peer and the region, and, like an owner's
// UNAVAILABLE, sends the call to the next owner or the refreshed map.
//
// A write carries an idempotency key (RequestIDHeader: the client's, else
// one made here), the same on every attempt, so an owner that applied an
// attempt whose answer was lost answers the retry with the first result
// instead of applying it again (dedupe.go, which says what that does not
// cover).
//
// When no peer serves the region and this store is assigned it (waiting for
// its previous owner), the answer is this store's own UNAVAILABLE.
//
// A region failing over is answered here, without forwarding: one this
// store is taking over from a dead store, and one whose owner by the
// region map has let its liveness lease run out (failingover.go), whose
// forward could only wait for the caller's deadline or fail.
func (s *KV) forward(ctx context.Context, op string, t target, call func(context.Context, kvpb.KVClient) error) error {
	sp := t.remote
	if fo := (*FailingOverError)(nil); t.local != nil && errors.As(t.notOpen, &fo) {
		return regionErr(t.local, t.notOpen)
	}
	if fo := s.failingOver(sp, time.Now()); fo != nil {
		return failingOverStatus(fo)
	}
	out := metadata.AppendToOutgoingContext(ctx, route.ForwardedHeader, "1")
	if writeOp(op) {
		id, err := requestID(ctx)
		if err != nil {
			return err
		}
		out = metadata.AppendToOutgoingContext(out, RequestIDHeader, id)
	}
	var last error
	for attempt := 0; attempt < 2; attempt++ {
		owners, gen := s.fwd.Router.Owners(sp.Name)
		if len(owners) == 0 {
			s.fwd.Router.Refresh(gen)
			owners, gen = s.fwd.Router.Owners(sp.Name)
		}
		if len(owners) == 0 {
			if last != nil {
				break
			}
			if t.local != nil && t.notOpen != nil {
				// Assigned here but not open: why is this store's answer.
				return regionErr(t.local, t.notOpen)
			}
			return regionStatus(codes.Unavailable, sp.Name, "no store serves %s yet (keys [%q, %q))", sp.Name, sp.Start, sp.End)
		}
		for _, addr := range owners {
			err := s.forwardTo(ctx, out, op, sp, addr, call)
			if err == nil {
				return nil
			}
			var final noRetry
			if errors.As(err, &final) {
				return final.error
			}
			if ctx.Err() != nil || !staleRoute(err) {
				return err
			}
			last = err
		}
		s.fwd.Router.Refresh(gen)
	}
	return last
}

// forwardTo makes one attempt of call at the owner addr, over a leased
// connection (never closed under the call), and maps its error (forwardErr).
func (s *KV) forwardTo(ctx, out context.Context, op string, sp Span, addr string, call func(context.Context, kvpb.KVClient) error) error {
	lease, err := s.fwd.Router.Acquire(out, addr)
	if err != nil {
		return forwardErr(ctx, sp, addr, nil, err)
	}
	defer lease.Release()
	s.metrics.forwarded(op)
	var md metadata.MD
	err = call(out, answerClient{lease.Client(), &md})
	var final noRetry
	if errors.As(err, &final) {
		var mine callerSide
		if errors.As(final.error, &mine) {
			return noRetry(mine)
		}
		return noRetry{forwardErr(ctx, sp, addr, md, final.error)}
	}
	return forwardErr(ctx, sp, addr, md, err)
}

// noRetry wraps an error forward returns without trying another owner.
type noRetry struct{ error }

// callerSide wraps an error of this store's side of a call (sending to its
// own client), returned as it is.
type callerSide struct{ error }

// forwardErr is what the forwarder answers for err, an attempt's failure at
// the owner addr of region sp; trailer is the attempt's response trailer.
//
//   - The caller's context is done: its CANCELLED or DEADLINE_EXCEEDED (the
//     caller's own doing), whatever the attempt failed with.
//   - An answer from the owner (its trailer carries route.StoreIDHeader, or
//     the status names a region: only a store adds that detail) keeps its
//     code, except CANCELLED: the caller did not cancel, so the owner's
//     cancellation is a failure on the way, UNAVAILABLE.
//   - Anything else did not come from the owner — the connection closing
//     (gRPC's CANCELLED "the client connection is closing"), a broken
//     connection, a transport error: UNAVAILABLE, retryable, naming the
//     peer and the region.
func forwardErr(ctx context.Context, sp Span, addr string, trailer metadata.MD, err error) error {
	if err == nil {
		return nil
	}
	st := status.Convert(err)
	cerr := ctx.Err()
	if d, ok := ctx.Deadline(); ok && cerr == nil && !time.Now().Before(d) {
		// The outgoing call carries the caller's deadline and can fail with
		// it a moment before the caller's own context notices: it is
		// still the caller's deadline, not a failure on the way.
		cerr = context.DeadlineExceeded
	}
	if cerr != nil {
		cst := status.FromContextError(cerr)
		return regionStatus(cst.Code(), sp.Name, "%s at store %s: %s (the request's own context: %v)", sp.Name, addr, st.Message(), cerr)
	}
	answered := len(trailer.Get(route.StoreIDHeader)) > 0 || RegionOf(err) != ""
	if answered && st.Code() != codes.Canceled {
		return peerErr(sp, addr, err)
	}
	return regionStatus(codes.Unavailable, sp.Name, "%s at store %s: forwarding failed, retry: %s: %s", sp.Name, addr, st.Code(), st.Message())
}

// peerErr keeps an owner's error and its code. An error that does not name
// sp's region (RegionOf: one about no region) gets the region and the peer
// in its message and the region as its detail.
func peerErr(sp Span, addr string, err error) error {
	if err == nil {
		return nil
	}
	if RegionOf(err) == sp.Name {
		return err
	}
	// The owner's other details (a write conflict's ErrorInfo, say) are
	// part of its answer: they go with it.
	p := status.Convert(err).Proto() // a copy
	p.Message = fmt.Sprintf("%s at store %s: %s", sp.Name, addr, p.Message)
	if ri, err := anypb.New(&errdetails.ResourceInfo{ResourceType: RegionResourceType, ResourceName: sp.Name}); err == nil {
		p.Details = append([]*anypb.Any{ri}, p.Details...)
	}
	return status.FromProto(p).Err()
}

// answerClient is an owner's KV client for one forwarded attempt: it
// records the answer's trailer in *md (unary calls through grpc.Trailer; a
// scan when its stream ends), from which forwardErr tells an owner's answer
// from a failure on the way.
type answerClient struct {
	kvpb.KVClient
	md *metadata.MD
}

func (c answerClient) Put(ctx context.Context, in *kvpb.PutRequest, opts ...grpc.CallOption) (*kvpb.PutResponse, error) {
	return c.KVClient.Put(ctx, in, append(opts, grpc.Trailer(c.md))...)
}

func (c answerClient) Get(ctx context.Context, in *kvpb.GetRequest, opts ...grpc.CallOption) (*kvpb.GetResponse, error) {
	return c.KVClient.Get(ctx, in, append(opts, grpc.Trailer(c.md))...)
}

func (c answerClient) Delete(ctx context.Context, in *kvpb.DeleteRequest, opts ...grpc.CallOption) (*kvpb.DeleteResponse, error) {
	return c.KVClient.Delete(ctx, in, append(opts, grpc.Trailer(c.md))...)
}

func (c answerClient) Batch(ctx context.Context, in *kvpb.BatchRequest, opts ...grpc.CallOption) (*kvpb.BatchResponse, error) {
	return c.KVClient.Batch(ctx, in, append(opts, grpc.Trailer(c.md))...)
}

func (c answerClient) Scan(ctx context.Context, in *kvpb.ScanRequest, opts ...grpc.CallOption) (grpc.ServerStreamingClient[kvpb.ScanResponse], error) {
	st, err := c.KVClient.Scan(ctx, in, opts...)
	if err != nil {
		return nil, err
	}
	return answerStream{st, c.md}, nil
}

func (c answerClient) TxnScan(ctx context.Context, in *kvpb.TxnScanRequest, opts ...grpc.CallOption) (grpc.ServerStreamingClient[kvpb.ScanResponse], error) {
	st, err := c.KVClient.TxnScan(ctx, in, opts...)
	if err != nil {
		return nil, err
	}
	return answerStream{st, c.md}, nil
}

func (c answerClient) TxnGet(ctx context.Context, in *kvpb.TxnGetRequest, opts ...grpc.CallOption) (*kvpb.GetResponse, error) {
	return c.KVClient.TxnGet(ctx, in, append(opts, grpc.Trailer(c.md))...)
}

func (c answerClient) CommitTxn(ctx context.Context, in *kvpb.CommitTxnRequest, opts ...grpc.CallOption) (*kvpb.CommitTxnResponse, error) {
	return c.KVClient.CommitTxn(ctx, in, append(opts, grpc.Trailer(c.md))...)
}

func (c answerClient) Prewrite(ctx context.Context, in *kvpb.PrewriteRequest, opts ...grpc.CallOption) (*kvpb.PrewriteResponse, error) {
	return c.KVClient.Prewrite(ctx, in, append(opts, grpc.Trailer(c.md))...)
}

func (c answerClient) ResolveLocks(ctx context.Context, in *kvpb.ResolveLocksRequest, opts ...grpc.CallOption) (*kvpb.ResolveLocksResponse, error) {
	return c.KVClient.ResolveLocks(ctx, in, append(opts, grpc.Trailer(c.md))...)
}

func (c answerClient) ValidateReads(ctx context.Context, in *kvpb.ValidateReadsRequest, opts ...grpc.CallOption) (*kvpb.ValidateReadsResponse, error) {
	return c.KVClient.ValidateReads(ctx, in, append(opts, grpc.Trailer(c.md))...)
}

func (c answerClient) CheckTxnStatus(ctx context.Context, in *kvpb.CheckTxnStatusRequest, opts ...grpc.CallOption) (*kvpb.CheckTxnStatusResponse, error) {
	return c.KVClient.CheckTxnStatus(ctx, in, append(opts, grpc.Trailer(c.md))...)
}

// answerStream records the trailer when the stream ends. (Read here, in the
// receiving goroutine: gRPC may end a stream from another one.)
type answerStream struct {
	grpc.ServerStreamingClient[kvpb.ScanResponse]
	md *metadata.MD
}

func (s answerStream) Recv() (*kvpb.ScanResponse, error) {
	resp, err := s.ServerStreamingClient.Recv()
	if err != nil {
		*s.md = s.Trailer()
	}
	return resp, err
}

// answering marks this store's answer to a forwarded request (unary) as
// the owner's: the trailer route.StoreIDHeader (see forwardErr).
func (s *KV) answering(ctx context.Context) {
	if forwarded(ctx) {
		_ = grpc.SetTrailer(ctx, metadata.Pairs(route.StoreIDHeader, s.identity()))
	}
}

// answeringStream is answering for a stream.
func (s *KV) answeringStream(stream grpc.ServerStream) {
	if forwarded(stream.Context()) {
		stream.SetTrailer(metadata.Pairs(route.StoreIDHeader, s.identity()))
	}
}

// identity is this store's router identity, or "-" for a store that does
// not forward (another store may still forward to it).
func (s *KV) identity() string {
	if s.fwd != nil && s.fwd.Router != nil {
		return s.fwd.Router.Self()
	}
	return "-"
}

// piece is the part [start, end) of one region a scan reads.
type piece struct {
	span       Span
	start, end []byte // end nil: unbounded
}

// split cuts [start, end) (end nil: unbounded) at region boundaries, in key
// order.
func split(spans []Span, start, end []byte) []piece {
	var out []piece
	for _, sp := range spans {
		if sp.End != nil && bytes.Compare(sp.End, start) <= 0 {
			continue
		}
		if end != nil && bytes.Compare(sp.Start, end) >= 0 {
			break
		}
		p := piece{span: sp, start: maxKey(start, sp.Start), end: end}
		if sp.End != nil && (end == nil || bytes.Compare(sp.End, end) < 0) {
			p.end = sp.End
		}
		out = append(out, p)
	}
	return out
}

// scanRemote streams the piece from its region's owner, at most *left pairs
// when limited. A failed attempt is retried (next owner, refreshed map) only
// while it has emitted nothing: a region is read from one consistent view.
func (s *KV) scanRemote(ctx context.Context, p scanPiece, req *kvpb.ScanRequest, exact bool, left *int, limited bool, emit func(k, v []byte) error) error {
	sub := &kvpb.ScanRequest{Start: p.start, End: p.end, ReadTs: req.ReadTs, Reverse: req.Reverse}
	if limited {
		sub.Limit = uint32(*left)
	}
	op := "scan"
	if exact {
		op = "txn-scan"
	}
	emitted := false
	return s.forward(ctx, op, p.target, func(ctx context.Context, c kvpb.KVClient) error {
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		var stream grpc.ServerStreamingClient[kvpb.ScanResponse]
		var err error
		if exact {
			stream, err = c.TxnScan(ctx, &kvpb.TxnScanRequest{StartTs: *req.ReadTs, Start: sub.Start, End: sub.End, Limit: sub.Limit, UncertaintyLimit: req.UncertaintyLimit, Observed: req.Observed, Reverse: sub.Reverse})
		} else {
			stream, err = c.Scan(ctx, sub)
		}
		if err != nil {
			return err
		}
		for {
			resp, err := stream.Recv()
			if err == io.EOF {
				return nil
			}
			if err != nil && emitted {
				// Retrying would read the rest of the region from
				// another view, or repeat keys.
				return noRetry{err}
			}
			if err != nil {
				return err
			}
			for _, kv := range resp.Pairs {
				if limited && *left == 0 {
					return nil
				}
				emitted = true
				if err := emit(kv.Key, kv.Value); err != nil {
					return noRetry{callerSide{err}}
				}
				*left--
			}
		}
	})
}

// uncovered reports the first key of [start, end) no region of this store
// holds, for a forwarded scan: its forwarder expects the whole range from
// here, and silently returning fewer rows would lose them.
func (s *KV) uncovered(start, end []byte) ([]byte, bool) {
	at := start
	for _, r := range s.store.Assignments() {
		if r.Span.End != nil && bytes.Compare(r.Span.End, at) <= 0 {
			continue
		}
		if bytes.Compare(r.Span.Start, at) > 0 {
			break
		}
		if r.Span.End == nil || (end != nil && bytes.Compare(r.Span.End, end) >= 0) {
			return nil, false
		}
		at = r.Span.End
	}
	return at, true
}
