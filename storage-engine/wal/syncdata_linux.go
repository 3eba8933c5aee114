package wal

import (
	"os"

	"golang.org/x/sys/unix"
)

// syncData makes f's written bytes durable with fdatasync: it flushes the
// data and the metadata needed to read it back (the file's size), not its
// timestamps, which a full fsync journals on every call. A segment's
// directory entry is synced once, when it is created (openSegment). Pebble
// and RocksDB sync their logs the same way.
func syncData(f *os.File) error {
	for {
		err := unix.Fdatasync(int(f.Fd()))
		if err != unix.EINTR {
			if err != nil {
				return &os.PathError{Op: "fdatasync", Path: f.Name(), Err: err}
			}
			return nil
		}
	}
}
