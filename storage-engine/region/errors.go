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
	// ErrOwned: another store owns the region and has not released it.
	ErrOwned = manifest.ErrOwned
	// ErrFenced: another opener owns the region now; this handle refuses
	// writes.
	ErrFenced = manifest.ErrFenced
)
