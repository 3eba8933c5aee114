// Package walarchive is the continuous WAL archive (docs/backup.md, section
// 2): a region's owner ships its WAL segments to the bucket as they grow
// (Shipper), and a point-in-time restore reads them back (Read) within the
// window the archive proves complete (Coverage).
//
// Layout, under wal-archive/<region>/<walID>/ (one stream per region and
// owner's WAL directory, which a restart keeps and a move or a lost volume
// changes):
//
//	<seg>-<off>.part   the bytes [off, off+size) of segment seg: whole records
//	<seg>.sealed       segment seg is closed: its size, and a bound on every
//	                   timestamp in it (0: unknown)
//	stream.json        the stream's frontier (Stream)
//
// # Invariants
//
//   - A stream's parts of one segment are contiguous from offset 0, and its
//     sealed segments are consecutive: a Shipper resumes from what the
//     bucket holds (a process killed mid-ship re-ships the segment's tail,
//     never skips it), and Read refuses a stream with a hole, naming it.
//   - stream.json's TS is written only after every record that a version at
//     or below TS can be in is shipped (the region's frontier rule,
//     region.ArchiveFrontier); Final says nothing more will follow.
//   - A segment is marked archived to the log (wal.Log.MarkArchivedBelow)
//     only once it is sealed in the bucket: the volume keeps it until then.
package walarchive

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/bellows-kv/bellows/storage-engine/blob"
)

// Prefix is where the archive lives in a cluster's bucket.
const Prefix = "wal-archive/"

const streamName = "stream.json"

// StreamPrefix is the directory of region's stream from WAL directory walID.
func StreamPrefix(region, walID string) string {
	return Prefix + region + "/" + walID + "/"
}

// Stream is what stream.json says of one stream.
type Stream struct {
	Region string `json:"region"`
	WALID  string `json:"walID"`
	// FromTS: every version at or below it was in the region's SSTs when
	// the stream began; the stream holds the records after it.
	FromTS uint64 `json:"fromTS"`
	// TS is the frontier: every record with a version at or below it is
	// in the archive.
	TS uint64 `json:"ts"`
	// Final: the owner closed the region and shipped its last record.
	Final bool `json:"final,omitempty"`
	// SealedBelow: every segment below it is sealed in the archive.
	SealedBelow uint64 `json:"sealedBelow"`
	// FirstSegment is where a durable stream (Durable) began: its writer's
	// first object is there. 0: a stream shipped behind its log.
	FirstSegment uint64    `json:"firstSegment,omitempty"`
	Updated      time.Time `json:"updated"`
}

func partKey(seg uint64, off int64) string { return fmt.Sprintf("%016d-%012d.part", seg, off) }
func sealedKey(seg uint64) string          { return fmt.Sprintf("%016d.sealed", seg) }

// part is one object of a stream.
type part struct {
	seg    uint64
	off    int64
	size   int64
	sealed bool   // a .sealed object: size is the segment's
	maxTS  uint64 // a .sealed object's bound on the segment's timestamps (0: unknown)
}

func parseKey(o blob.ObjectInfo) (part, bool) {
	name := o.Key[strings.LastIndexByte(o.Key, '/')+1:]
	if s, ok := strings.CutSuffix(name, ".sealed"); ok {
		seg, err := strconv.ParseUint(s, 10, 64)
		return part{seg: seg, sealed: true}, err == nil
	}
	s, ok := strings.CutSuffix(name, ".part")
	if !ok {
		return part{}, false
	}
	segS, offS, ok := strings.Cut(s, "-")
	if !ok {
		return part{}, false
	}
	seg, err1 := strconv.ParseUint(segS, 10, 64)
	off, err2 := strconv.ParseInt(offS, 10, 64)
	return part{seg: seg, off: off, size: o.Size}, err1 == nil && err2 == nil
}

// listParts returns the stream's parts and sealed markers, ordered by
// segment and offset (the keys' order), with each sealed size read. The
// sealed markers are read readAhead at a time: a takeover lists a stream
// of hundreds of segments, and one GET after another would cost it
// seconds against an object store.
func listParts(ctx context.Context, stream *blob.Bucket) ([]part, error) {
	objs, err := stream.List(ctx, "")
	if err != nil {
		return nil, err
	}
	var parts []part
	for _, o := range objs {
		if p, ok := parseKey(o); ok {
			parts = append(parts, p)
		}
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(readAhead)
	for i := range parts {
		if !parts[i].sealed {
			continue
		}
		p := &parts[i]
		g.Go(func() error {
			key := sealedKey(p.seg)
			b, err := stream.ReadAll(gctx, key)
			if err != nil {
				return err
			}
			size, bound, _ := strings.Cut(strings.TrimSpace(string(b)), " ")
			if p.size, err = strconv.ParseInt(size, 10, 64); err != nil {
				return fmt.Errorf("walarchive: %s: %w", key, err)
			}
			if bound != "" {
				if p.maxTS, err = strconv.ParseUint(bound, 10, 64); err != nil {
					return fmt.Errorf("walarchive: %s: %w", key, err)
				}
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	return parts, nil
}

// readAhead is how many of a stream's objects a reader fetches at once. A
// durable stream holds one part per group commit, so a replay reads
// hundreds of small objects whose cost is the store's per-request latency,
// not its bandwidth.
const readAhead = 32

// LoadStream reads region's stream.json from WAL directory walID;
// blob.ErrNotFound: no such stream.
func LoadStream(ctx context.Context, bucket *blob.Bucket, region, walID string) (Stream, error) {
	b, err := bucket.ReadAll(ctx, StreamPrefix(region, walID)+streamName)
	if err != nil {
		return Stream{}, err
	}
	var s Stream
	if err := json.Unmarshal(b, &s); err != nil {
		return Stream{}, fmt.Errorf("walarchive: %s: %w", StreamPrefix(region, walID)+streamName, err)
	}
	return s, nil
}

// Streams lists every stream in bucket's archive. It lists the archive's
// regions and their WAL directories, one level at a time, not their parts:
// stores write a part per group commit while it runs.
func Streams(ctx context.Context, bucket *blob.Bucket) ([]Stream, error) {
	regions, err := bucket.Dirs(ctx, Prefix)
	if err != nil {
		return nil, err
	}
	var out []Stream
	for _, region := range regions {
		walIDs, err := bucket.Dirs(ctx, Prefix+region+"/")
		if err != nil {
			return nil, err
		}
		for _, walID := range walIDs {
			s, err := LoadStream(ctx, bucket, region, walID)
			if err != nil {
				if errors.Is(err, blob.ErrNotFound) {
					continue // no stream.json (yet), or deleted since the listing
				}
				return nil, err
			}
			out = append(out, s)
		}
	}
	return out, nil
}

// ErrGap: a stream's archive has a hole, so a restore through it would miss
// records.
var ErrGap = errors.New("walarchive: the archive has a gap")

// Read calls fn with every archived record of stream s, in WAL order,
// except those of the stream's first segments that are sealed with every
// timestamp at or below after (which a restore from a backup at after does
// not need, and which retention may have deleted in part). It refuses
// (ErrGap) a stream whose parts are not contiguous or whose sealed segments
// are not consecutive, naming the first hole.
func Read(ctx context.Context, bucket *blob.Bucket, s Stream, after uint64, fn func(payload []byte) error) error {
	return ReadSegments(ctx, bucket, s, after, func(_ uint64, payload []byte) error { return fn(payload) })
}

// ReadSegments is Read that also names each record's segment.
func ReadSegments(ctx context.Context, bucket *blob.Bucket, s Stream, after uint64, fn func(seg uint64, payload []byte) error) error {
	stream := bucket.Prefixed(StreamPrefix(s.Region, s.WALID))
	parts, err := listParts(ctx, stream)
	if err != nil {
		return err
	}
	parts = parts[len(skippable(parts, after)):]
	if err := checkContiguous(s, parts); err != nil {
		return err
	}
	var data []part
	for _, p := range parts {
		if !p.sealed && p.size > 0 {
			data = append(data, p)
		}
	}
	fetch := prefetch(ctx, stream, data)
	defer fetch.stop()
	for i, p := range data {
		b, err := fetch.get(i)
		if err != nil {
			return err
		}
		n, err := recordsOf(b, func(payload []byte) error { return fn(p.seg, payload) })
		if err != nil {
			return err
		}
		if n != len(b) {
			return fmt.Errorf("%w: region %s, WAL %s: part %s is damaged at offset %d", ErrGap, s.Region, s.WALID, partKey(p.seg, p.off), p.off+int64(n))
		}
	}
	return nil
}

// Cursor is a reader's place in a stream: the segment and offset its next
// part begins at. The zero Cursor is before the stream's first record.
type Cursor struct {
	Seg uint64
	Off int64
}

// ReadAfter calls fn with every record of stream s from cursor c on, in
// WAL order, with its segment, and returns the cursor past the last part
// it read and the segment of the newest fence it met (fenced false: none;
// a fence is a zero-byte part, Fence). A reader that follows a stream
// calls it again with the cursor it returned: from there it lists only
// the segments at and after the cursor's, so a poll costs what is new,
// not the whole stream (a durable stream holds an object per group
// commit). From the zero cursor it reads as Read does from after.
func ReadAfter(ctx context.Context, bucket *blob.Bucket, s Stream, c Cursor, after uint64, fn func(seg uint64, payload []byte) error) (next Cursor, fenceSeg uint64, fenced bool, err error) {
	stream := bucket.Prefixed(StreamPrefix(s.Region, s.WALID))
	var parts []part
	if c == (Cursor{}) {
		all, err := listParts(ctx, stream)
		if err != nil {
			return c, 0, false, err
		}
		skipped := skippable(all, after)
		if n := len(skipped); n > 0 {
			c = Cursor{Seg: skipped[n-1].seg + 1}
		}
		parts = all[len(skipped):]
		if err := checkContiguous(s, parts); err != nil {
			return c, 0, false, err
		}
		if len(parts) > 0 {
			c = Cursor{Seg: parts[0].seg}
		}
	} else if parts, err = partsFrom(ctx, stream, s, c); err != nil {
		return c, 0, false, err
	}
	var data []part
	for _, p := range parts {
		switch {
		case p.sealed:
		case p.size == 0:
			fenceSeg, fenced = p.seg, true
		default:
			data = append(data, p)
		}
	}
	fetch := prefetch(ctx, stream, data)
	defer fetch.stop()
	for i, p := range data {
		b, err := fetch.get(i)
		if err != nil {
			return c, fenceSeg, fenced, err
		}
		n, err := recordsOf(b, func(payload []byte) error { return fn(p.seg, payload) })
		if err != nil {
			return c, fenceSeg, fenced, err
		}
		if n != len(b) {
			return c, fenceSeg, fenced, fmt.Errorf("%w: region %s, WAL %s: part %s is damaged at offset %d", ErrGap, s.Region, s.WALID, partKey(p.seg, p.off), p.off+int64(n))
		}
		c = Cursor{Seg: p.seg, Off: p.off + p.size}
	}
	// Past a sealed segment read to its end: the next one.
	for _, p := range parts {
		if p.sealed && p.seg == c.Seg && p.size == c.Off {
			c = Cursor{Seg: c.Seg + 1}
		}
	}
	return c, fenceSeg, fenced, nil
}

// partsFrom lists the parts of stream s from cursor c on: its segment's
// from its offset, then each next segment while the one before it is
// sealed, one listing per segment. A part that does not start where the
// one before it ended is a hole.
func partsFrom(ctx context.Context, stream *blob.Bucket, s Stream, c Cursor) ([]part, error) {
	var out []part
	for seg, off := c.Seg, c.Off; ; seg, off = seg+1, 0 {
		objs, err := stream.List(ctx, fmt.Sprintf("%016d", seg))
		if err != nil {
			return nil, err
		}
		var sealed *part
		for _, o := range objs {
			p, ok := parseKey(o)
			if !ok || p.seg != seg {
				continue
			}
			if p.sealed {
				b, err := stream.ReadAll(ctx, sealedKey(seg))
				if err != nil {
					return nil, err
				}
				size, _, _ := strings.Cut(strings.TrimSpace(string(b)), " ")
				if p.size, err = strconv.ParseInt(size, 10, 64); err != nil {
					return nil, fmt.Errorf("walarchive: %s: %w", sealedKey(seg), err)
				}
				sealed = &p
				continue
			}
			if p.off < off {
				continue // read before
			}
			if p.off != off {
				return nil, fmt.Errorf("%w: region %s, WAL %s: segment %d has no part at offset %d (the next is at %d)", ErrGap, s.Region, s.WALID, seg, off, p.off)
			}
			out = append(out, p)
			off += p.size
		}
		if sealed == nil {
			return out, nil
		}
		if sealed.size != off {
			return nil, fmt.Errorf("%w: region %s, WAL %s: segment %d was sealed at %d bytes, its parts hold %d", ErrGap, s.Region, s.WALID, seg, sealed.size, off)
		}
		out = append(out, *sealed)
	}
}

// prefetcher reads a list of parts in order, up to readAhead ahead of
// the one its reader waits for.
//
// Each fetch owns a channel of capacity 1, so a fetch never blocks on a
// reader that has returned; stop cancels the fetches in flight, and each
// ends by itself.
type prefetcher struct {
	ctx     context.Context
	cancel  context.CancelFunc
	stream  *blob.Bucket
	parts   []part
	results []chan fetched
	started int
}

type fetched struct {
	b   []byte
	err error
}

func prefetch(ctx context.Context, stream *blob.Bucket, parts []part) *prefetcher {
	ctx, cancel := context.WithCancel(ctx)
	return &prefetcher{ctx: ctx, cancel: cancel, stream: stream, parts: parts, results: make([]chan fetched, len(parts))}
}

// get returns part i's bytes; parts are got in order, each once.
func (f *prefetcher) get(i int) ([]byte, error) {
	for f.started < len(f.parts) && f.started <= i+readAhead {
		p, ch := f.parts[f.started], make(chan fetched, 1)
		f.results[f.started] = ch
		go func() {
			b, err := f.stream.ReadAll(f.ctx, partKey(p.seg, p.off))
			ch <- fetched{b, err}
		}()
		f.started++
	}
	r := <-f.results[i]
	f.results[i] = nil
	return r.b, r.err
}

func (f *prefetcher) stop() { f.cancel() }

// skippable is the prefix of parts (ordered) made of whole segments sealed
// with every timestamp at or below after.
func skippable(parts []part, after uint64) []part {
	sealedAt := map[uint64]uint64{}
	for _, p := range parts {
		if p.sealed {
			sealedAt[p.seg] = p.maxTS
		}
	}
	n := 0
	for n < len(parts) {
		if b, ok := sealedAt[parts[n].seg]; !ok || b == 0 || b > after {
			break
		}
		n++
	}
	return parts[:n]
}

// Prune deletes, in every stream of bucket's archive, the segments sealed
// with every timestamp at or below before (the oldest backup a restore can
// start from), oldest first and each segment's seal last, so that an
// interrupted prune leaves a stream that Read still accepts; and the
// streams that ended cleanly (final) with nothing left. It returns the
// objects it deleted.
func Prune(ctx context.Context, bucket *blob.Bucket, before uint64) (int, error) {
	streams, err := Streams(ctx, bucket)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, s := range streams {
		stream := bucket.Prefixed(StreamPrefix(s.Region, s.WALID))
		parts, err := listParts(ctx, stream)
		if err != nil {
			return n, err
		}
		gone := skippable(parts, before)
		for _, p := range gone {
			if p.sealed {
				continue
			}
			if err := stream.Delete(ctx, partKey(p.seg, p.off)); err != nil {
				return n, err
			}
			n++
		}
		for _, p := range gone {
			if !p.sealed {
				continue
			}
			if err := stream.Delete(ctx, sealedKey(p.seg)); err != nil {
				return n, err
			}
			n++
		}
		if s.Final && s.TS <= before && len(gone) == len(parts) {
			if err := stream.Delete(ctx, streamName); err != nil {
				return n, err
			}
			n++
		}
	}
	return n, nil
}

// checkContiguous returns an ErrGap naming the first hole in parts.
func checkContiguous(s Stream, parts []part) error {
	gap := func(format string, args ...any) error {
		return fmt.Errorf("%w: region %s, WAL %s: %s", ErrGap, s.Region, s.WALID, fmt.Sprintf(format, args...))
	}
	var (
		seg     uint64
		started bool
		end     int64 // of seg's parts so far
		sealed  bool  // seg is sealed
	)
	for _, p := range parts {
		if !started || p.seg != seg {
			if started && !sealed {
				return gap("segment %d is followed by %d but was never sealed", seg, p.seg)
			}
			if started && p.seg != seg+1 {
				return gap("segments %d to %d are missing", seg+1, p.seg-1)
			}
			seg, end, sealed, started = p.seg, 0, false, true
		}
		if p.sealed {
			if end != p.size {
				return gap("segment %d was sealed at %d bytes, its parts hold %d", seg, p.size, end)
			}
			sealed = true
			continue
		}
		if p.off != end {
			return gap("segment %d has bytes %d to %d missing", seg, end, p.off)
		}
		end += p.size
	}
	if started && s.SealedBelow > seg+1 {
		return gap("segments %d to %d were sealed but are missing", seg+1, s.SealedBelow-1)
	}
	return nil
}

func jsonIndent(v any) ([]byte, error) { return json.MarshalIndent(v, "", "  ") }
