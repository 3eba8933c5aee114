// Package txn is the store side of transactions that is not one region's:
// the coordinator of cross-region commits (coordinator.go), the resolver of
// the locks they leave for requests to meet (resolver.go), and the registry
// of the transactions BeginTxn opens (registry.go). A region's own part —
// validation, locks, outcomes — is storage-engine/region's.
//
// It reaches regions only through Store, which the server implements: a
// region is open at this store or served by peers (then each call is
// forwarded to them), so the same code runs a transaction whose regions are
// all here or spread over the cluster. Its errors are gRPC statuses, ready
// for the server's handlers to return.
package txn

import (
	"context"
	"encoding/base64"
	"log/slog"
	"strconv"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/bellows-kv/bellows/internal/contract"
	kvpb "github.com/bellows-kv/bellows/proto/bellows/kv/v1"
	"github.com/bellows-kv/bellows/storage-engine/hlc"
	"github.com/bellows-kv/bellows/storage-engine/region"
)

// Store is what transactions need of the store they run in.
type Store interface {
	// Route finds where key's region is served, as for a request this
	// store received with ctx: open here, assigned here but not open (its
	// Engine says why), or at its owners (Peer). Errors are statuses.
	Route(ctx context.Context, key []byte) (Region, error)
	// Local is this store's assigned regions, open or not.
	Local() []Region
	// Now is the wall clock of lock expiry and of the outcomes' and
	// registered transactions' ages: durations, which a clock offset
	// within the bound only shifts.
	Now() time.Time
	// Clock issues start timestamps (docs/clock.md).
	Clock() *hlc.Clock
}

// Region is one region as a transaction reaches it.
type Region interface {
	// Name is the region's name.
	Name() string
	// Engine is the region open at this store, or the status that says
	// why it is not. Only a region without a Peer is asked.
	Engine() (*region.Region, error)
	// Peer is the region's owners when another store serves it; nil when
	// this store does.
	Peer() Peer
	// Status is an error of this region's engine as a status naming the
	// region.
	Status(err error) error
	// Bounds is the region's keys, [start, end) (nil end: to the last).
	Bounds() (start, end []byte)
}

// Peer forwards the participant calls of one region to the stores that
// serve it.
type Peer interface {
	Prewrite(context.Context, *kvpb.PrewriteRequest) (*kvpb.PrewriteResponse, error)
	ResolveLocks(context.Context, *kvpb.ResolveLocksRequest) error
	CheckTxnStatus(context.Context, *kvpb.CheckTxnStatusRequest) (*kvpb.CheckTxnStatusResponse, error)
	ValidateReads(context.Context, *kvpb.ValidateReadsRequest) error
}

// Options are the transactions' timings (defaults in contract) and where
// they log.
type Options struct {
	// LockTTL is how long a cross-region commit's locks hold before a
	// request that meets one may roll it back.
	LockTTL time.Duration
	// OutcomeRetryWindow keeps a resolved transaction's outcome, and an
	// ended registered transaction, for its commit's retries.
	OutcomeRetryWindow time.Duration
	// OutcomeRetention keeps any outcome, resolved or not.
	OutcomeRetention time.Duration
	// Timeout ends a registered transaction neither committed nor rolled
	// back this long after it began.
	Timeout time.Duration
	Logger  *slog.Logger
}

// internalCtx is ctx (its deadline and cancellation) without the incoming
// request's metadata: the store's own calls to its peers on behalf of a
// request, which may be forwarded itself, may be forwarded again.
func internalCtx(ctx context.Context) context.Context {
	return metadata.NewIncomingContext(ctx, metadata.MD{})
}

// mutationErr prefixes a status error with the mutation it is about.
func mutationErr(i int, err error) error {
	st := status.Convert(err)
	return status.Errorf(st.Code(), "mutation %d: %s", i, st.Message())
}

// ConflictStatus is ABORTED with the conflict as an ErrorInfo.
func ConflictStatus(ce *region.ConflictError) error {
	st := status.New(codes.Aborted, ce.Error())
	if d, err := st.WithDetails(&errdetails.ErrorInfo{Reason: contract.WriteConflictReason, Domain: contract.ErrorDomain, Metadata: map[string]string{
		"key_base64":   base64.StdEncoding.EncodeToString(ce.Key),
		"committed_ts": strconv.FormatUint(ce.CommittedTS, 10),
	}}); err == nil {
		st = d
	}
	return st.Err()
}
