//go:build !linux

package wal

import (
	"errors"
	"os"
)

// syncData is a full fsync where fdatasync is not available.
func syncData(f *os.File) error { return f.Sync() }

// allocate is not done where fallocate is not available: segments grow by
// appends.
func allocate(*os.File, int64, int64) error { return errors.ErrUnsupported }
