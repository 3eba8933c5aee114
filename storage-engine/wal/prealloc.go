package wal

// Allocating a segment's file ahead of its writes. An fdatasync after an
// append that grows a file must also make the new size durable: on ext4 and
// xfs, a journal commit for every acknowledged write. Within the file's
// size it flushes the data alone. So the writer extends a segment's file a
// chunk at a time ahead of its writes (fallocate without KEEP_SIZE: the new
// space reads as zeros and the size moves once per chunk), and cuts the
// file to its records when it closes the segment. A crash leaves the open
// segment ending in zeros, which replay and the archive's shipper read as
// its end. BenchmarkSyncedAppend measures the two.
//
// Pebble preallocates its WAL files keeping their size (FALLOC_FL_KEEP_SIZE),
// which leaves the size's journal commit in every sync, and recycles old
// log files, which a region's WAL, one per region, would pay for in disk:
// a chunk costs each region at most preallocateChunk of its volume.

import "bytes"

// preallocateChunk is how far ahead of its writes a segment's file is
// allocated. A variable for the benchmark's baseline (0: never).
var preallocateChunk int64 = 4 << 20

// allocateFor makes sure the segment's file is allocated for n more bytes
// at off, extending it by whole chunks. A file system that refuses is
// written by appends from then on: allocation is never what fails a write.
// fileMu is held.
func (l *Log) allocateFor(n int64) {
	if l.noPrealloc || preallocateChunk <= 0 || l.off+n <= l.allocated {
		return
	}
	size := (l.off+n)/preallocateChunk*preallocateChunk + preallocateChunk
	if err := allocate(l.f, l.allocated, size-l.allocated); err != nil {
		l.noPrealloc = true
		if fi, serr := l.f.Stat(); serr == nil {
			l.allocated = fi.Size() // what a partial allocation left
		}
		return
	}
	l.allocated = size
}

// Unwritten reports whether b, the rest of a segment from a record
// boundary, is space allocated ahead and never written: all zeros. It is
// the segment's end, not damage (no record's header is zero: the checksum
// of a zero length is not).
func Unwritten(b []byte) bool {
	for len(b) > 0 {
		n := min(len(b), len(zeros))
		if !bytes.Equal(b[:n], zeros[:n]) {
			return false
		}
		b = b[n:]
	}
	return true
}

var zeros = make([]byte, 4096)
