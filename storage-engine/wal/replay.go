package wal

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
)

// ReplayStats says what a replay found.
type ReplayStats struct {
	Segments int
	Records  int
	// Bytes is the size of the intact records read, framing included:
	// what recovery replayed.
	Bytes          int64
	TruncatedBytes int64  // bytes cut from a torn tail
	TruncatedSeg   uint64 // segment that had the torn tail, if any
}

// Replay calls fn for every intact record in segments ≥ from, in order. A
// torn or corrupt tail in the newest segment is truncated to the last intact
// record, as a crash mid-write leaves it; damage in an older segment, which
// was fsynced and closed, is an error that names the segment and offset.
func Replay(dir string, from uint64, fn func(seg uint64, payload []byte) error) (ReplayStats, error) {
	var st ReplayStats
	segs, err := Segments(dir)
	if err != nil {
		return st, err
	}
	for i, s := range segs {
		if s < from {
			continue
		}
		st.Segments++
		last := i == len(segs)-1
		path := filepath.Join(dir, SegmentName(s))
		data, err := os.ReadFile(path)
		if err != nil {
			return st, fmt.Errorf("wal: reading segment %d: %w", s, err)
		}
		off := 0
		for off < len(data) {
			payload, n, rerr := decodeRecord(data[off:])
			if rerr != nil {
				if !last {
					return st, fmt.Errorf("wal: segment %d (%s) damaged at offset %d: %v", s, path, off, rerr)
				}
				if err := os.Truncate(path, int64(off)); err != nil {
					return st, fmt.Errorf("wal: truncating torn tail of segment %d: %w", s, err)
				}
				st.TruncatedBytes, st.TruncatedSeg = int64(len(data)-off), s
				break
			}
			if err := fn(s, payload); err != nil {
				return st, err
			}
			st.Records++
			st.Bytes += int64(n)
			off += n
		}
	}
	return st, nil
}

var errTorn = errors.New("torn record")

func decodeRecord(b []byte) ([]byte, int, error) {
	if len(b) < headerLen {
		return nil, 0, fmt.Errorf("%w: %d header bytes", errTorn, len(b))
	}
	n := int(binary.LittleEndian.Uint32(b[4:8]))
	if len(b)-headerLen < n {
		return nil, 0, fmt.Errorf("%w: record of %d bytes has %d", errTorn, n, len(b)-headerLen)
	}
	crc := crc32.Update(0, crcTable, b[4:8])
	crc = crc32.Update(crc, crcTable, b[headerLen:headerLen+n])
	if crc != binary.LittleEndian.Uint32(b[:4]) {
		return nil, 0, fmt.Errorf("checksum mismatch: %w", io.ErrUnexpectedEOF)
	}
	return b[headerLen : headerLen+n], headerLen + n, nil
}

// Records splits b, a run of a segment's bytes that starts at a record,
// into its intact records: it calls fn for each and returns the length of
// the prefix they make up. The bytes after it are a record the writer has
// not finished (or damage, which the caller tells apart by whether the
// segment is still open).
func Records(b []byte, fn func(payload []byte) error) (int, error) {
	off := 0
	for off < len(b) {
		payload, n, err := decodeRecord(b[off:])
		if err != nil {
			return off, nil
		}
		if fn != nil {
			if err := fn(payload); err != nil {
				return off, err
			}
		}
		off += n
	}
	return off, nil
}
