package client

// Riding through a failover (docs/failover.md §8). A region whose store
// has let its liveness lease run out is served by no store until its new
// owner opens it, seconds later. The stores say so: the dead store itself,
// if it still runs (UNAVAILABLE, reason LEASE_EXPIRED), and any live store
// (UNAVAILABLE, reason REGION_FAILING_OVER, naming the region and the dead
// store). A request retries both, as any stale route, refreshing its table
// between rounds, until the new owner answers or its context ends; then
// the error is UNAVAILABLE with the last answer's details, so a caller
// sees only codes worth retrying, and its text names the region failing
// over.

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/bellows-kv/bellows/internal/contract"
)

// FailingOver is what an error says of a region failing over.
type FailingOver struct {
	// Region is the region's name: the answer's, else the client's
	// table's for the request's key; "" when neither names it.
	Region string
	// Store is the store whose liveness lease ran out: its ordinal, as a
	// live store or the dead store itself names it.
	Store string
	// LeaseExpired: Store answered itself that its lease has run out, at
	// Addr.
	LeaseExpired bool
	Addr         string
	// TakingOver: the region's new owner answered: it is opening the
	// region.
	TakingOver bool
}

// String is the failover in a sentence, e.g. "region-001 is failing over
// (store 1's liveness lease ran out)".
func (f FailingOver) String() string {
	region := f.Region
	if region == "" {
		region = "the region"
	}
	switch {
	case f.LeaseExpired && f.Store != "" && f.Addr != "":
		return fmt.Sprintf("%s is failing over (its store %s, at %s, let its liveness lease run out)", region, f.Store, f.Addr)
	case f.LeaseExpired && f.Addr != "":
		return fmt.Sprintf("%s is failing over (its store, at %s, let its liveness lease run out)", region, f.Addr)
	case f.LeaseExpired && f.Store != "":
		return fmt.Sprintf("%s is failing over (its store %s let its liveness lease run out)", region, f.Store)
	case f.Store == "":
		return fmt.Sprintf("%s is failing over (its store's liveness lease ran out)", region)
	case f.TakingOver:
		return fmt.Sprintf("%s is failing over (store %s's liveness lease ran out; its new owner is opening it)", region, f.Store)
	}
	return fmt.Sprintf("%s is failing over (store %s's liveness lease ran out)", region, f.Store)
}

// IsFailingOver reports whether err says the request's region is failing
// over: a store answered UNAVAILABLE with reason REGION_FAILING_OVER, or
// LEASE_EXPIRED, itself or as the last answer before the request's
// context ended. Such a request may succeed if tried again.
func IsFailingOver(err error) bool {
	_, ok := FailingOverOf(err)
	return ok
}

// FailingOverOf is what err says of the region failing over, when it says
// one is (IsFailingOver).
func FailingOverOf(err error) (FailingOver, bool) {
	if err == nil {
		return FailingOver{}, false
	}
	var f FailingOver
	found := false
	for _, d := range status.Convert(err).Details() {
		info, ok := d.(*errdetails.ErrorInfo)
		if !ok || info.Domain != contract.ErrorDomain {
			continue
		}
		switch info.Reason {
		case contract.RegionFailingOverReason:
			f.Region, f.Store, f.TakingOver = info.Metadata["region"], info.Metadata["store"], info.Metadata["taking_over"] == "true"
			found = true
		case contract.LeaseExpiredReason:
			// An older store names no store ("").
			f.LeaseExpired, f.Store, found = true, info.Metadata["store"], true
		}
	}
	if !found {
		return FailingOver{}, false
	}
	if a, ok := errors.AsType[*answerError](err); ok {
		if f.Region == "" {
			f.Region = a.region
		}
		if f.LeaseExpired {
			f.Addr = a.addr
		}
	}
	return f, true
}

// answerError is a store's answer that a request retries after: the
// answer, the store's address and the request's region by the client's
// table ("" when the table has none).
type answerError struct {
	region, addr string
	err          error
}

func (e *answerError) Error() string { return e.err.Error() }
func (e *answerError) Unwrap() error { return e.err }

// answer wraps err, the answer of the store at addr to a request for key
// (nil: no single key), for retrying and for the error of giving up.
func (c *Client) answer(key []byte, addr string, err error) error {
	region := ""
	if key != nil {
		if r, ok := c.table.Load().lookup(key); ok {
			region = r.Name
		}
	}
	return &answerError{region: region, addr: addr, err: err}
}

// retrying tells Options.Retrying of an answer about to be retried.
func (c *Client) retrying(err error) {
	if c.opts.Retrying != nil {
		c.opts.Retrying(err)
	}
}

// gaveUpError is a request whose context ended while it retried: the
// context's error and the last store's answer.
type gaveUpError struct {
	err  error // the context's
	last error // an *answerError
}

// gaveUp is the error of a request whose context ended (err, the
// context's error) after the stale-route answer last; err itself when
// there was none.
func gaveUp(err, last error) error {
	if last == nil {
		return err
	}
	return &gaveUpError{err: err, last: last}
}

// ended reports whether err, a request's failure, is its context ending
// (ctx's error, or a call's DEADLINE_EXCEEDED or CANCELLED with ctx done).
func ended(ctx context.Context, err error) bool {
	if err == nil || ctx.Err() == nil {
		return false
	}
	c := status.Code(err)
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) || c == codes.DeadlineExceeded || c == codes.Canceled
}

func (e *gaveUpError) Error() string {
	s := fmt.Sprintf("%v (last answer: %v)", e.err, e.last)
	if f, ok := FailingOverOf(e.last); ok {
		s = "bellows client: " + f.String() + ": " + s
	}
	return s
}

func (e *gaveUpError) Unwrap() []error { return []error{e.err, e.last} }

// GRPCStatus is what status.Code and status.Convert see: UNAVAILABLE
// when the last answer was (so a caller that retries on the code retries
// this too), else DEADLINE_EXCEEDED or CANCELLED, as the context ended;
// with the last answer's details (its ErrorInfo reason) and this error's
// text.
func (e *gaveUpError) GRPCStatus() *status.Status {
	last := status.Convert(e.last)
	code := codes.DeadlineExceeded
	switch {
	case errors.Is(e.err, context.Canceled):
		code = codes.Canceled
	case last.Code() == codes.Unavailable:
		code = codes.Unavailable
	}
	p := last.Proto()
	p.Code, p.Message = int32(code), e.Error()
	return status.FromProto(p)
}
