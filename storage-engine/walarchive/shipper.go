package walarchive

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/bellows-kv/bellows/storage-engine/blob"
	"github.com/bellows-kv/bellows/storage-engine/wal"
)

func recordsOf(b []byte, fn func([]byte) error) (int, error) { return wal.Records(b, fn) }

// Log is what a Shipper needs of the WAL it ships (wal.Log).
type Log interface {
	// Written waits until every append so far is in its segment file.
	Written() error
	// WriterSegment is the open segment: those below never grow again.
	WriterSegment() uint64
	// MarkArchivedBelow lets the log remove the segments below n.
	MarkArchivedBelow(n uint64) error
}

// Shipper ships one region's WAL directory to its stream. One goroutine of
// the region calls Ship; a Durable shipper's Commit and Seal come from the
// log's writer meanwhile, and mu guards what both touch (shipped, sealed).
type Shipper struct {
	mu      sync.Mutex
	durable bool // Commit and Seal ship every unit; Ship only records the frontier
	// committed: a Commit since the last Ship, whose frontier then moves;
	// committedBytes, what those Commits wrote (the Ship's ShippedBytes).
	committed      bool
	committedBytes int64
	// CommitTimeout bounds each bucket write of Commit and Seal.
	CommitTimeout time.Duration
	stream        *blob.Bucket
	dir           string
	log           Log
	meta          Stream
	shipped       map[uint64]int64 // bytes of each segment in the archive
	sealed        map[uint64]bool
	pending       int64 // bytes on the volume not in the archive, at the last Ship
	// Clock, if set, is read after a closed segment's bytes are: its reading
	// bounds every timestamp in the segment, and the seal records it, so
	// retention (Prune) can tell a segment no restore needs.
	Clock func() uint64
	// IdleRefresh: a Ship that finds nothing to ship rewrites stream.json
	// only every IdleRefresh calls (0: every call), so an idle region's
	// frontier costs a bucket write now and then, not at every interval.
	IdleRefresh int
	idle        int
	// owed: the last recorded frontier came with records, and may lie
	// below some of them (the caller computes it a clock offset behind
	// now); the next Ship records its frontier, quiet or not, so a burst's
	// last records are covered one interval after it, not at the next
	// idle refresh.
	owed bool
	// oldestUnshipped is when a Ship first left bytes behind that are still
	// not shipped (zero: none): the archive's lag.
	oldestUnshipped time.Time
}

// Resume returns a Shipper for region's stream from WAL directory dir
// (identity walID), continuing from what the bucket holds: a process killed
// mid-ship re-ships the tail of the segment it was shipping. fromTS is the
// region's FlushedTS when it opened; a resumed stream keeps its own, older
// one.
func Resume(ctx context.Context, bucket *blob.Bucket, region, walID, dir string, fromTS uint64, log Log) (*Shipper, error) {
	s := &Shipper{
		stream:  bucket.Prefixed(StreamPrefix(region, walID)),
		dir:     dir,
		log:     log,
		meta:    Stream{Region: region, WALID: walID, FromTS: fromTS},
		shipped: map[uint64]int64{},
		sealed:  map[uint64]bool{},
	}
	prev, err := LoadStream(ctx, bucket, region, walID)
	switch {
	case err == nil:
		s.meta.FromTS = min(prev.FromTS, fromTS)
		s.meta.TS = prev.TS
		s.meta.SealedBelow = prev.SealedBelow
	case !errors.Is(err, blob.ErrNotFound):
		return nil, err
	}
	parts, err := listParts(ctx, s.stream)
	if err != nil {
		return nil, err
	}
	for _, p := range parts {
		if p.sealed {
			s.sealed[p.seg] = true
			continue
		}
		s.shipped[p.seg] = max(s.shipped[p.seg], p.off+p.size)
	}
	return s, nil
}

// Status is what a Ship left.
type Status struct {
	// PendingBytes is what the volume holds that the archive does not.
	PendingBytes int64
	// Lag is how long the oldest of those bytes has waited (0: none).
	Lag time.Duration
	// ShippedBytes is what this Ship uploaded.
	ShippedBytes int64
}

// Ship uploads every whole record the WAL's files hold that the archive
// does not, seals the segments the writer closed, lets the log remove
// those, and then records frontier as the stream's TS (final: the region
// is closed and its log with it). The caller computes frontier before
// calling (region.ArchiveFrontier): the records it covers were appended
// before, and Ship waits until they are written.
func (s *Shipper) Ship(ctx context.Context, frontier uint64, final bool) (Status, error) {
	var st Status
	if !final {
		if err := s.log.Written(); err != nil {
			return st, err
		}
	}
	if s.durable {
		return s.recordDurable(ctx, frontier, final)
	}
	segs, err := wal.Segments(s.dir)
	if err != nil {
		return st, err
	}
	writer := uint64(0)
	if !final {
		writer = s.log.WriterSegment()
	}
	sealedBelow := s.meta.SealedBelow
	for _, seg := range segs {
		closed := final || seg < writer
		if s.sealed[seg] {
			sealedBelow = max(sealedBelow, seg+1)
			continue
		}
		n, size, err := s.shipSegment(ctx, seg, closed)
		if err != nil {
			return st, err
		}
		st.ShippedBytes += n
		if closed {
			var bound uint64
			if s.Clock != nil {
				bound = s.Clock()
			}
			if err := s.stream.WriteAll(ctx, sealedKey(seg), []byte(fmt.Sprintf("%d %d", s.shipped[seg], bound)), true); err != nil {
				if errors.Is(err, blob.ErrExists) {
					err = fmt.Errorf("%w (region %s, WAL %s, sealing segment %d)", ErrFenced, s.meta.Region, s.meta.WALID, seg)
				}
				return st, err
			}
			s.sealed[seg] = true
			sealedBelow = max(sealedBelow, seg+1)
		} else {
			st.PendingBytes += size - s.shipped[seg]
		}
	}
	// Only a prefix of sealed segments may go: the log removes below a bound.
	removable := uint64(0)
	for _, seg := range segs {
		if !s.sealed[seg] {
			break
		}
		removable = seg + 1
	}
	if removable > 0 {
		if err := s.log.MarkArchivedBelow(removable); err != nil {
			return st, err
		}
	}
	quiet := !final && st.ShippedBytes == 0 && sealedBelow == s.meta.SealedBelow
	if s.idle++; !quiet || s.owed || s.idle > s.IdleRefresh || s.meta.Updated.IsZero() {
		s.idle, s.owed = 0, !quiet
		s.meta.TS = max(s.meta.TS, frontier)
		s.meta.Final = final
		s.meta.SealedBelow = sealedBelow
		s.meta.Updated = time.Now().UTC()
		if err := s.writeMeta(ctx); err != nil {
			return st, err
		}
	}
	s.pending = st.PendingBytes
	if st.PendingBytes == 0 {
		s.oldestUnshipped = time.Time{}
	} else if s.oldestUnshipped.IsZero() {
		s.oldestUnshipped = time.Now()
	}
	if !s.oldestUnshipped.IsZero() {
		st.Lag = time.Since(s.oldestUnshipped)
	}
	return st, nil
}

// shipSegment uploads seg's whole records past what the archive holds and
// returns the bytes uploaded and the file's size. A closed segment whose
// tail is not a whole record is damaged: shipping stops there with an error
// rather than sealing a segment that replay would refuse.
func (s *Shipper) shipSegment(ctx context.Context, seg uint64, closed bool) (int64, int64, error) {
	path := filepath.Join(s.dir, wal.SegmentName(seg))
	f, err := os.Open(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return 0, 0, nil
		}
		return 0, 0, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return 0, 0, err
	}
	off := s.shipped[seg]
	if fi.Size() <= off {
		// Nothing new, or a file cut below what was shipped (an async
		// log's unsynced tail lost with the machine): the archive keeps
		// the longer history.
		return 0, fi.Size(), nil
	}
	b := make([]byte, fi.Size()-off)
	if _, err := f.ReadAt(b, off); err != nil && !errors.Is(err, io.EOF) {
		return 0, 0, err
	}
	n, _ := wal.Records(b, nil)
	if closed && n < len(b) {
		return 0, 0, fmt.Errorf("walarchive: segment %s is closed but damaged at offset %d", path, off+int64(n))
	}
	if n == 0 {
		return 0, fi.Size(), nil
	}
	// Create-if-absent: the listing at Resume told where this writer's
	// parts end, so a part already there is a fence (docs/failover.md).
	if err := s.stream.WriteAll(ctx, partKey(seg, off), b[:n], true); err != nil {
		if errors.Is(err, blob.ErrExists) {
			err = fmt.Errorf("%w (region %s, WAL %s, segment %d at %d)", ErrFenced, s.meta.Region, s.meta.WALID, seg, off)
		}
		return 0, 0, err
	}
	s.shipped[seg] = off + int64(n)
	return int64(n), fi.Size(), nil
}

// recordDurable is Ship for a Durable shipper: its log's writer committed
// and sealed every record already, so only the log's files below its open
// segment are let go and the frontier recorded.
func (s *Shipper) recordDurable(ctx context.Context, frontier uint64, final bool) (Status, error) {
	var st Status
	s.mu.Lock()
	sealedBelow := s.meta.SealedBelow
	for seg := range s.sealed {
		sealedBelow = max(sealedBelow, seg+1)
	}
	committed := s.committed
	st.ShippedBytes, s.committed, s.committedBytes = s.committedBytes, false, 0
	s.mu.Unlock()
	if sealedBelow > 0 && s.log != nil && !final {
		if err := s.log.MarkArchivedBelow(sealedBelow); err != nil {
			return st, err
		}
	}
	active := committed || sealedBelow != s.meta.SealedBelow || final
	if s.idle++; active || s.owed || s.idle > s.IdleRefresh || s.meta.Updated.IsZero() {
		s.idle, s.owed = 0, active
		s.meta.TS = max(s.meta.TS, frontier)
		s.meta.Final = final
		s.meta.SealedBelow = sealedBelow
		s.meta.Updated = time.Now().UTC()
		if err := s.writeMeta(ctx); err != nil {
			return st, err
		}
	}
	return st, nil
}

func (s *Shipper) writeMeta(ctx context.Context) error {
	b, err := jsonIndent(s.meta)
	if err != nil {
		return err
	}
	return s.stream.WriteAll(ctx, streamName, b, false)
}

// Frontier is the stream's TS as last recorded.
func (s *Shipper) Frontier() uint64 { return s.meta.TS }
