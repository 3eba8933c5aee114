package walarchive

// The stream as the WAL itself (durability mode Bucket, docs/failover.md
// section 4): every group commit is written to the stream, create-if-absent,
// before it is acknowledged, so the stream holds every acknowledged record
// and a store's loss loses none.
//
// # Invariants
//
//   - The writer commits a segment's parts in order from offset 0 and seals
//     a segment before it commits anything of the next one; the segments of
//     a stream are consecutive from its stream.json's FirstSegment. So the
//     place of the writer's next object is known to anyone who lists the
//     stream: (s, end) and the seal of s when s, its highest segment, is
//     open; (s+1, 0) and the seal of s+1 when s is sealed.
//   - A fence occupies both places create-if-absent: a part of zero bytes,
//     which no writer ever makes, and a seal at the same offset. A writer's
//     next commit or seal then fails, and with it its log (wal.Log fails
//     every later append after an error), so a fenced writer never
//     acknowledges again. A fenced stream reads as a sealed one: readers
//     need nothing new, and a later tenure of the same WAL directory goes on
//     with the next segment.
//   - Every write of a durable stream is create-if-absent: losing a race
//     means another process wrote there, which only a fence does.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/bellows-kv/bellows/storage-engine/blob"
)

// ErrFenced: another store took the region over and fenced this stream; the
// writer may not acknowledge anything more.
var ErrFenced = errors.New("walarchive: the WAL stream is fenced: another store took the region over")

// DefaultCommitTimeout bounds one bucket write of a durable stream: a write
// that hangs fails the log rather than stalling the region for ever.
const DefaultCommitTimeout = 30 * time.Second

// Durable returns a Shipper that is its WAL's replica (wal.Options.Replica):
// every unit is committed to the stream before the log acknowledges it.
// claim is the number of the manifest by which the caller owns the region:
// a stream fenced by a later claim refuses it. minSegment is the lowest
// segment the log may start at (the claimed manifest's WAL position and the
// directory's segments); Durable returns the segment the log must start
// at, above everything the stream holds, and has sealed every segment below
// it, so the stream stays consecutive. Attach the log once it is open.
// ErrFenced: a fence is in the way.
func Durable(ctx context.Context, bucket *blob.Bucket, region, walID, dir string, fromTS, claim, minSegment uint64) (*Shipper, uint64, error) {
	s, err := Resume(ctx, bucket, region, walID, dir, fromTS, nil)
	if err != nil {
		return nil, 0, err
	}
	s.durable = true
	s.CommitTimeout = DefaultCommitTimeout
	parts, err := listParts(ctx, s.stream)
	if err != nil {
		return nil, 0, err
	}
	meta, found, err := s.loadMeta(ctx)
	if err != nil {
		return nil, 0, err
	}
	first := max(minSegment, 1)
	lowest := first // the lowest segment to seal below first
	switch {
	case len(parts) > 0:
		top := parts[len(parts)-1].seg
		first = max(first, top+1)
		lowest = top
		for i := len(parts) - 1; i >= 0 && parts[i].seg == top; i-- {
			if parts[i].sealed {
				lowest = top + 1
			}
		}
	case found && meta.FirstSegment > 0:
		first = max(first, meta.FirstSegment)
		lowest = meta.FirstSegment
	}
	// Where the writer starts, then whether a fence came first: a fencer
	// writes its mark, then reads stream.json. Of the two, at least one
	// sees the other's write, so a writer that misses the mark starts
	// where the fencer will look.
	switch {
	case !found:
		s.meta.FirstSegment = first
		if err := s.putMeta(ctx, true); err != nil {
			if errors.Is(err, blob.ErrExists) {
				return nil, 0, fmt.Errorf("%w (region %s, WAL %s: before its first record)", ErrFenced, region, walID)
			}
			return nil, 0, err
		}
	case meta.FirstSegment == 0 && len(parts) == 0:
		s.meta.FirstSegment = first
		if err := s.putMeta(ctx, false); err != nil {
			return nil, 0, err
		}
	default:
		s.meta.FirstSegment = meta.FirstSegment
	}
	if n, err := newestFence(ctx, s.stream); err != nil {
		return nil, 0, err
	} else if n > claim {
		return nil, 0, fmt.Errorf("%w (region %s, WAL %s: by manifest %d, after this store's claim %d)", ErrFenced, region, walID, n, claim)
	}
	for seg := lowest; seg < first; seg++ {
		if err := s.seal(ctx, seg, s.shipped[seg]); err != nil {
			return nil, 0, err
		}
	}
	return s, first, nil
}

func (s *Shipper) putMeta(ctx context.Context, ifNotExist bool) error {
	b, err := jsonIndent(s.meta)
	if err != nil {
		return err
	}
	return s.stream.WriteAll(ctx, streamName, b, ifNotExist)
}

const fencePrefix = "fence-"

func fenceKey(claim uint64) string { return fmt.Sprintf("%s%020d", fencePrefix, claim) }

// newestFence is the highest manifest number that fenced the stream (0:
// none).
func newestFence(ctx context.Context, stream *blob.Bucket) (uint64, error) {
	objs, err := stream.List(ctx, fencePrefix)
	if err != nil {
		return 0, err
	}
	var n uint64
	for _, o := range objs {
		var v uint64
		if _, err := fmt.Sscanf(o.Key[len(fencePrefix):], "%d", &v); err == nil {
			n = max(n, v)
		}
	}
	return n, nil
}

// Attach gives a shipper its log, once the log is open (Durable, or Resume
// with a nil log).
func (s *Shipper) Attach(log Log) { s.log = log }

// NextSegment is the lowest segment above everything the stream holds: a
// log that ships to it starts there or above, never over an earlier
// tenure's parts.
func (s *Shipper) NextSegment() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	var next uint64
	for seg := range s.shipped {
		next = max(next, seg+1)
	}
	for seg := range s.sealed {
		next = max(next, seg+1)
	}
	return next
}

func (s *Shipper) loadMeta(ctx context.Context) (Stream, bool, error) {
	b, err := s.stream.ReadAll(ctx, streamName)
	if errors.Is(err, blob.ErrNotFound) {
		return Stream{}, false, nil
	}
	if err != nil {
		return Stream{}, false, err
	}
	var m Stream
	if err := json.Unmarshal(b, &m); err != nil {
		return Stream{}, false, fmt.Errorf("walarchive: %s%s: %w", StreamPrefix(s.meta.Region, s.meta.WALID), streamName, err)
	}
	return m, true, nil
}

func (s *Shipper) opContext() (context.Context, context.CancelFunc) {
	if s.CommitTimeout <= 0 {
		return context.WithCancel(context.Background())
	}
	return context.WithTimeout(context.Background(), s.CommitTimeout)
}

// Commit writes bytes [off, off+len(records)) of segment seg to the stream
// (wal.Replica). ErrFenced: the place is taken.
func (s *Shipper) Commit(seg uint64, off int64, records []byte) error {
	ctx, cancel := s.opContext()
	defer cancel()
	if err := s.stream.WriteAll(ctx, partKey(seg, off), records, true); err != nil {
		if errors.Is(err, blob.ErrExists) {
			return fmt.Errorf("%w (region %s, WAL %s, segment %d at %d)", ErrFenced, s.meta.Region, s.meta.WALID, seg, off)
		}
		return err
	}
	s.mu.Lock()
	s.shipped[seg] = off + int64(len(records))
	s.committed = true
	s.committedBytes += int64(len(records))
	s.mu.Unlock()
	return nil
}

// Seal records that segment seg ended at size bytes (wal.Replica).
func (s *Shipper) Seal(seg uint64, size int64) error {
	ctx, cancel := s.opContext()
	defer cancel()
	return s.seal(ctx, seg, size)
}

func (s *Shipper) seal(ctx context.Context, seg uint64, size int64) error {
	var bound uint64
	if s.Clock != nil {
		bound = s.Clock()
	}
	if err := s.stream.WriteAll(ctx, sealedKey(seg), []byte(fmt.Sprintf("%d %d", size, bound)), true); err != nil {
		if errors.Is(err, blob.ErrExists) {
			return fmt.Errorf("%w (region %s, WAL %s, sealing segment %d)", ErrFenced, s.meta.Region, s.meta.WALID, seg)
		}
		return err
	}
	s.mu.Lock()
	s.sealed[seg] = true
	s.shipped[seg] = max(s.shipped[seg], size)
	s.mu.Unlock()
	return nil
}

// Fence stops region's stream from WAL walID for good (docs/failover.md
// section 4), on behalf of the owner that claimed the region by manifest
// claim: once it returns nil, the stream's writer can make no record durable
// any more, and every record it acknowledged is in the stream, in front of
// the fence. A stream that does not exist yet is fenced before its first
// record. It returns where the fence stands.
func Fence(ctx context.Context, bucket *blob.Bucket, region, walID string, claim uint64) (seg uint64, off int64, err error) {
	stream := bucket.Prefixed(StreamPrefix(region, walID))
	if err := stream.WriteAll(ctx, fenceKey(claim), nil, true); err != nil && !errors.Is(err, blob.ErrExists) {
		return 0, 0, err
	}
	seg, off, done, err := writerNextPlace(ctx, stream, region, walID)
	if err != nil || done {
		return 0, 0, err
	}
	// Walk forward from the place the listing showed, one object at a
	// time, rather than listing again: a writer still running moves on
	// while a listing of its whole stream is read, and a fence that
	// re-listed after every lost race would chase it for ever.
	for attempt := 0; ; attempt++ {
		if attempt > maxFenceSteps {
			return 0, 0, fmt.Errorf("walarchive: fencing region %s, WAL %s: the writer kept moving on past segment %d", region, walID, seg)
		}
		if err := ctx.Err(); err != nil {
			return 0, 0, err
		}
		if err := stream.WriteAll(ctx, partKey(seg, off), nil, true); err != nil {
			if !errors.Is(err, blob.ErrExists) {
				return 0, 0, err
			}
			b, err := stream.ReadAll(ctx, partKey(seg, off))
			if err != nil {
				return 0, 0, err
			}
			if len(b) > 0 {
				off += int64(len(b)) // the writer committed there first
				continue
			}
			// An earlier fence's part: seal behind it.
		}
		if err := stream.WriteAll(ctx, sealedKey(seg), []byte(fmt.Sprintf("%d 0", off)), true); err != nil {
			if !errors.Is(err, blob.ErrExists) {
				return 0, 0, err
			}
			// Sealed already, by the writer (which goes on in seg+1; its
			// parts end where this fence's part stands, or it could not
			// have been written) or by an earlier fence: fence the next
			// segment too. A repeated Fence so costs an empty segment,
			// never a record.
			seg, off = seg+1, 0
			continue
		}
		return seg, off, nil
	}
}

// maxFenceSteps bounds the objects a fence steps over behind a writer that
// is still running. A store stops writing when its lease ends, before its
// regions are fenced (docs/failover.md section 5), so a fence meets at most
// the commits in flight at that moment.
const maxFenceSteps = 100000

// writerNextPlace lists stream and returns the place of its writer's next
// object (the package's invariants), or done when the stream has no writer
// and is fenced already: either nothing was ever written (the fence has
// taken the first write's place) or its stream.json is a fence's or a
// Local-mode stream's that shipped nothing.
func writerNextPlace(ctx context.Context, stream *blob.Bucket, region, walID string) (seg uint64, off int64, done bool, err error) {
	for {
		parts, err := listParts(ctx, stream)
		if err != nil {
			return 0, 0, false, err
		}
		if len(parts) > 0 {
			top := parts[len(parts)-1]
			seg = top.seg
			sealed := false
			for _, p := range parts {
				if p.seg != seg {
					continue
				}
				if p.sealed {
					sealed = true
					continue
				}
				if p.off == off {
					off += p.size
				}
			}
			if sealed {
				return seg + 1, 0, false, nil
			}
			return seg, off, false, nil
		}
		b, err := stream.ReadAll(ctx, streamName)
		switch {
		case errors.Is(err, blob.ErrNotFound):
			// No writer started: take its first write's place.
			fenced, _ := jsonIndent(Stream{Region: region, WALID: walID, Updated: time.Now().UTC()})
			if err := stream.WriteAll(ctx, streamName, fenced, true); err == nil {
				return 0, 0, true, nil
			} else if !errors.Is(err, blob.ErrExists) {
				return 0, 0, false, err
			}
			continue // a writer started meanwhile
		case err != nil:
			return 0, 0, false, err
		}
		var m Stream
		if err := json.Unmarshal(b, &m); err != nil {
			return 0, 0, false, fmt.Errorf("walarchive: %s%s: %w", StreamPrefix(region, walID), streamName, err)
		}
		if m.FirstSegment == 0 {
			// Written by a fence, or a stream shipped behind its log
			// (Local mode) that shipped nothing: a writer starting now
			// sees the fence's mark.
			return 0, 0, true, nil
		}
		return m.FirstSegment, 0, false, nil
	}
}
