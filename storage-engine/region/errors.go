package region

import (
	"errors"
	"fmt"

	"github.com/bellows-kv/bellows/storage-engine/manifest"
)

var (
	ErrEmptyKey      = errors.New("region: key is empty")
	ErrKeyTooLarge   = errors.New("region: key exceeds 64 KiB")
	ErrValueTooLarge = errors.New("region: value exceeds the configured maximum")
	ErrBatchTooLarge = errors.New("region: batch exceeds the configured maximum")
	ErrEmptyBatch    = errors.New("region: batch is empty")
	ErrClosed        = errors.New("region: closed")
	// ErrReleasing: the region is being handed to another store; retry
	// there.
	ErrReleasing = fmt.Errorf("%w: released to another store", ErrClosed)
	// ErrSplitting: the region is splitting or merging (PrepareSplit,
	// PrepareMerge): its writes are refused until its successors open;
	// retry.
	ErrSplitting = fmt.Errorf("%w: splitting or merging; retry at its successors, which the region map names once the change commits", ErrClosed)
	// ErrCompactionAborted: a compaction (Compact, or one the region
	// started) was abandoned because the region was released or closed
	// while it ran; nothing was installed, so the manifest still names its
	// inputs. Compact it again at the region's next owner.
	ErrCompactionAborted = errors.New("region: compaction aborted")
	// ErrOwned: another store owns the region and has not released it.
	ErrOwned = manifest.ErrOwned
	// ErrFenced: another opener owns the region now; this handle refuses
	// writes.
	ErrFenced = manifest.ErrFenced
)

// OwnedError is the error (matching ErrOwned) that names the store owning a
// region and the number of the manifest that says so.
type OwnedError = manifest.OwnedError

// Error is an error of one region. The engine wraps an error with its
// region's name once, where it first knows the region, so a caller finds the
// region with errors.As instead of reading the message, and adds the name
// itself only to errors that carry none.
type Error struct {
	Region string
	Err    error
}

func (e *Error) Error() string { return "region " + e.Region + ": " + e.Err.Error() }

func (e *Error) Unwrap() error { return e.Err }

// errorf is fmt.Errorf (with %w) wrapped in an *Error of region name.
func errorf(name, format string, args ...any) error {
	return &Error{Region: name, Err: fmt.Errorf(format, args...)}
}

// ErrSnapshotTooOld matches a *SnapshotTooOldError.
var ErrSnapshotTooOld = errors.New("region: snapshot too old")

// SnapshotTooOldError refuses a read at ReadTS that the region can no
// longer answer exactly: its retention (retention.maxVersions > 0, or the
// GC window retention.gcTTL) may have dropped the version such a read
// needs, since a merge judged every version at or below ExactFrom without a
// snapshot pinned at ReadTS. A read at ExactFrom or later, or at a snapshot
// pinned before (SnapshotAt), is exact.
type SnapshotTooOldError struct {
	Region            string
	ReadTS, ExactFrom uint64
}

func (e *SnapshotTooOldError) Error() string {
	return fmt.Sprintf("region %s: snapshot too old: a read at %d may miss versions its retention dropped (retention.gcTTL or retention.maxVersions); reads at %d or later are exact",
		e.Region, e.ReadTS, e.ExactFrom)
}

func (e *SnapshotTooOldError) Is(target error) bool { return target == ErrSnapshotTooOld }

// ErrUncertain matches an *UncertainError.
var ErrUncertain = errors.New("region: read uncertain")

// UncertainError: a read at ReadTS with an uncertainty limit found a
// version of Key at TS, above ReadTS but within the limit: it may have
// been committed before the reader's transaction began, on a store whose
// clock is ahead (docs/clock.md). The transaction must start again above
// TS.
type UncertainError struct {
	Key        []byte
	ReadTS, TS uint64
}

func (e *UncertainError) Error() string {
	return fmt.Sprintf("region: key %q has a version at %d, above the read's %d but within its clock uncertainty: begin again above it", e.Key, e.TS, e.ReadTS)
}

func (e *UncertainError) Is(target error) bool { return target == ErrUncertain }

// ExpiredError: a read whose values must stay live through LiveThrough
// (Uncertainty.LiveThrough) read a value of Key that expires at Expiry, at
// or before it.
type ExpiredError struct {
	Key                 []byte
	Expiry, LiveThrough uint64
}

func (e *ExpiredError) Error() string {
	return fmt.Sprintf("region: the value read of key %q expires at %d, at or before %d", e.Key, e.Expiry, e.LiveThrough)
}
