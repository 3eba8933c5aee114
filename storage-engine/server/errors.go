package server

import (
	"context"
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/bellows-kv/bellows/storage-engine/region"
)

// toStatus maps engine errors to gRPC codes; the message keeps the engine's
// text, which names the region and the problem.
func toStatus(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	code := codes.Internal
	switch {
	case errors.Is(err, region.ErrEmptyKey), errors.Is(err, region.ErrKeyTooLarge),
		errors.Is(err, region.ErrValueTooLarge), errors.Is(err, region.ErrBatchTooLarge),
		errors.Is(err, region.ErrEmptyBatch):
		code = codes.InvalidArgument
	case errors.Is(err, region.ErrClosed), errors.Is(err, region.ErrOwned):
		// Closing, released, or not claimed yet: retry (here, or at the
		// region's next owner).
		code = codes.Unavailable
	case errors.Is(err, region.ErrFenced):
		// This store no longer owns the region: retrying here cannot help.
		code = codes.FailedPrecondition
	case errors.Is(err, context.Canceled):
		code = codes.Canceled
	case errors.Is(err, context.DeadlineExceeded):
		code = codes.DeadlineExceeded
	}
	return status.Error(code, err.Error())
}
