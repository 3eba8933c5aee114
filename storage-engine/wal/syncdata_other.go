//go:build !linux

package wal

import "os"

// syncData is a full fsync where fdatasync is not available.
func syncData(f *os.File) error { return f.Sync() }
