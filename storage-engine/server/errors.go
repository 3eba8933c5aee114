package server

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/bellows-kv/bellows/internal/contract"
	"github.com/bellows-kv/bellows/storage-engine/hlc"
	"github.com/bellows-kv/bellows/storage-engine/region"
)

// RegionResourceType is the ResourceType of the errdetails.ResourceInfo a KV
// or Admin error carries when it is about one region; ResourceName is the
// region's name. RegionOf reads it.
const RegionResourceType = "bellows.region"

// toStatus maps engine errors to gRPC codes; the message keeps the engine's
// text, which names the region and the problem. An error of one region
// (region.Error) also carries the region's name as a ResourceInfo detail,
// so a forwarding store and clients find it without reading the message.
func toStatus(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	var tooOld *region.SnapshotTooOldError
	if errors.As(err, &tooOld) {
		return snapshotTooOldStatus(tooOld)
	}
	if errors.Is(err, region.ErrSplitting) {
		return splittingStatus(err)
	}
	var failing *FailingOverError
	if errors.As(err, &failing) {
		return failingOverStatus(failing)
	}
	var uncertain *region.UncertainError
	if errors.As(err, &uncertain) {
		return uncertainStatus(err, uncertain)
	}
	var ahead *hlc.AheadError
	var offset *hlc.OffsetError
	if errors.As(err, &ahead) || errors.As(err, &offset) {
		return clockStatus(err)
	}
	code := codes.Internal
	switch {
	case errors.Is(err, region.ErrEmptyKey), errors.Is(err, region.ErrKeyTooLarge),
		errors.Is(err, region.ErrValueTooLarge), errors.Is(err, region.ErrBatchTooLarge),
		errors.Is(err, region.ErrEmptyBatch), errors.Is(err, region.ErrInvalidCondition), errors.Is(err, region.ErrInvalidTTL):
		code = codes.InvalidArgument
	case errors.Is(err, region.ErrCompactionAborted):
		// The region left this store while its compaction ran; nothing
		// was installed. Compact again at the region's next owner.
		code = codes.Aborted
	case errors.Is(err, region.ErrClosed), errors.Is(err, region.ErrOwned),
		errors.Is(err, region.ErrKeyNotInRegion), errors.Is(err, region.ErrRetired):
		// (A key not in the region, or a retired region: the route is
		// stale after a split; the region map names the new regions.)
		// Closing, released, or not claimed yet: retry (here, or at the
		// region's next owner).
		code = codes.Unavailable
	case errors.Is(err, region.ErrTxnRolledBack):
		code = codes.Aborted
	case errors.Is(err, context.Canceled):
		code = codes.Canceled
	case errors.Is(err, context.DeadlineExceeded):
		code = codes.DeadlineExceeded
	case errors.Is(err, region.ErrLocked):
		// A transaction being committed holds the key: retry.
		code = codes.Unavailable
	case errors.Is(err, region.ErrFenced):
		// This store no longer owns the region: retrying here cannot help.
		code = codes.FailedPrecondition
	}
	var re *region.Error
	if errors.As(err, &re) {
		return regionStatus(code, re.Region, "%s", err.Error())
	}
	return status.Error(code, err.Error())
}

// regionErr is toStatus for an engine error of assignment a's region,
// wrapped in a region.Error of a unless the engine already wrapped it.
func regionErr(a *Assignment, err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	var re *region.Error
	if !errors.As(err, &re) {
		err = &region.Error{Region: a.Name(), Err: err}
	}
	return toStatus(err)
}

// regionStatus is a status error about region name: the code, the message,
// and the region as a ResourceInfo detail.
func regionStatus(code codes.Code, name, format string, args ...any) error {
	st := status.New(code, fmt.Sprintf(format, args...))
	if d, err := st.WithDetails(&errdetails.ResourceInfo{ResourceType: RegionResourceType, ResourceName: name}); err == nil {
		st = d
	}
	return st.Err()
}

// RegionOf is the name of the region a KV or Admin error is about (its
// ResourceInfo detail of type RegionResourceType), or "" when it names none:
// a transport error, or one about no single region.
func RegionOf(err error) string {
	st, ok := status.FromError(err)
	if !ok {
		return ""
	}
	for _, d := range st.Details() {
		if ri, ok := d.(*errdetails.ResourceInfo); ok && ri.ResourceType == RegionResourceType {
			return ri.ResourceName
		}
	}
	return ""
}

// snapshotTooOldStatus is FAILED_PRECONDITION with ErrorInfo reason
// SNAPSHOT_TOO_OLD: retrying the read at the same timestamp cannot help.
// splittingStatus is the UNAVAILABLE of a write refused while its region
// splits, with ErrorInfo reason REGION_SPLITTING: a client retries it as
// any UNAVAILABLE, and one that reads the reason knows to learn the region
// map again.
func splittingStatus(err error) error {
	st := status.New(codes.Unavailable, err.Error())
	var re *region.Error
	name := ""
	if errors.As(err, &re) {
		name = re.Region
	}
	info := &errdetails.ErrorInfo{Reason: contract.RegionSplittingReason, Domain: contract.ErrorDomain, Metadata: map[string]string{"region": name}}
	if d, derr := st.WithDetails(info, &errdetails.ResourceInfo{ResourceType: RegionResourceType, ResourceName: name}); derr == nil {
		st = d
	}
	return st.Err()
}

func uncertainStatus(err error, e *region.UncertainError) error {
	st := status.New(codes.Aborted, err.Error())
	if d, derr := st.WithDetails(&errdetails.ErrorInfo{Reason: contract.ReadUncertainReason, Domain: contract.ErrorDomain, Metadata: map[string]string{
		"ts": strconv.FormatUint(e.TS, 10), "read_ts": strconv.FormatUint(e.ReadTS, 10)}}); derr == nil {
		st = d
	}
	return st.Err()
}

func clockStatus(err error) error {
	st := status.New(codes.Unavailable, err.Error())
	if d, derr := st.WithDetails(&errdetails.ErrorInfo{Reason: contract.ClockOffsetReason, Domain: contract.ErrorDomain}); derr == nil {
		st = d
	}
	return st.Err()
}

func snapshotTooOldStatus(e *region.SnapshotTooOldError) error {
	st := status.New(codes.FailedPrecondition, e.Error())
	info := &errdetails.ErrorInfo{Reason: contract.SnapshotTooOldReason, Domain: contract.ErrorDomain, Metadata: map[string]string{
		"region": e.Region, "read_ts": strconv.FormatUint(e.ReadTS, 10), "exact_from_ts": strconv.FormatUint(e.ExactFrom, 10)}}
	if d, err := st.WithDetails(info, &errdetails.ResourceInfo{ResourceType: RegionResourceType, ResourceName: e.Region}); err == nil {
		st = d
	}
	return st.Err()
}
