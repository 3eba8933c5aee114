// Package changefeed follows a cluster's committed changes from its bucket
// alone: the WAL archive (package walarchive) that every region's owner
// ships, read with the region map, no store contacted (docs/watch.md,
// "A change feed from the bucket"). It delivers what a watch of the stores
// delivers (region.Change: puts, deletes, transactions' writes at their
// commit timestamps, never an uncommitted one), as CockroachDB's
// changefeeds do: each change once, each key's changes in commit order,
// and resolved marks, a mark R saying that no change at or below R comes
// after it. Changes above the last mark may come before changes below a
// later one; a consumer that needs one order sorts between marks.
//
// # Where a change is read, and when
//
// A stream (one region's WAL from one WAL directory) records a frontier
// (walarchive.Stream.TS): every change at or below it is in the stream. The
// feed reads each stream's new parts once (walarchive.ReadAfter: a cursor
// per stream, so a poll costs what is new) and delivers a change once it
// is at or below the stream's frontier, once the stream is final (its
// owner released the region, or it split or merged away), or once a
// fence stands after it (another store took the region over: a fenced
// writer acknowledges nothing more there, and in durability mode Bucket
// every change it acknowledged is in the stream, beyond its last recorded
// frontier). The resolved mark is the lowest, over the regions of the
// current map that meet the feed's range, of the newest frontier among
// each region's streams, from the same listing of streams whose
// deliverable changes were delivered before it.
//
// # Lag
//
// A region ships its WAL every archive interval (store
// --wal-archive-interval, 5 s by default) and, with nothing new, refreshes
// its frontier every contract.WALArchiveIdleRefresh intervals (a minute by
// default). So changes come about one interval behind the stores, and the
// resolved mark as far behind as the idlest region of the range.
//
// # Invariants
//
//   - A change is read once (its stream's cursor passes it) and delivered
//     once: it waits in its stream's pending list until it may be.
//   - A stream's pending changes are above its frontier, in WAL order, so
//     each key's stay in commit order.
package changefeed

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/bellows-kv/bellows/storage-engine/blob"
	"github.com/bellows-kv/bellows/storage-engine/region"
	"github.com/bellows-kv/bellows/storage-engine/regionmap"
	"github.com/bellows-kv/bellows/storage-engine/walarchive"
)

// DefaultPollInterval is how often a feed reads the archive: a fraction of
// the default archive interval, so a change waits for its ship, not for
// the feed.
const DefaultPollInterval = time.Second

// Options are a feed's settings.
type Options struct {
	// Start and End bound the keys followed, [Start, End); nil End: to the
	// last key.
	Start, End []byte
	// AfterTS: changes committed after it are delivered. 0: from the
	// archive's resolved mark when the feed starts (the changes from then
	// on, as a watch without a start).
	AfterTS uint64
	// PollInterval: how often Run reads the archive (default
	// DefaultPollInterval).
	PollInterval time.Duration
	// Logger reports polls that failed and are retried; nil discards.
	Logger *slog.Logger
	// Metrics, when set, are updated by every poll of Run.
	Metrics *Metrics
}

// Update is what one poll found: the changes it read, each key's in
// commit order and every one above the feed's previous marks, and the
// resolved mark, 0 when it did not advance.
type Update struct {
	Changes  []region.Change
	Resolved uint64
}

// ErrNoArchive: the bucket's archive has no stream for a region of the
// feed's range: the cluster runs without its WAL archive
// (--wal-archive-interval 0), or the region was made a moment ago and
// has not shipped yet.
var ErrNoArchive = errors.New("changefeed: no WAL archive stream for a region of the range")

// ErrBeforeArchive: the feed's start is older than what the archive
// holds.
var ErrBeforeArchive = errors.New("changefeed: the start is before the WAL archive")

// Feed follows a bucket's WAL archive. Not safe for concurrent use.
type Feed struct {
	bucket *blob.Bucket
	opts   Options

	started bool
	// from is the feed's start: every change at or below it is not
	// delivered.
	from     uint64
	resolved uint64
	streams  map[streamID]*streamState
}

type streamID struct{ region, walID string }

// streamState is where the feed is in one stream.
type streamState struct {
	// cursor is the place of the stream's next unread part.
	cursor walarchive.Cursor
	// pending are the changes read and not delivered yet: above the
	// stream's frontier, in a live and unfenced segment. In WAL order.
	pending []pendingChange
	// fenceSeg is the newest fence's segment (fenced: one was met).
	fenceSeg uint64
	fenced   bool
	// finished: the stream was final at frontier finishedTS and was read
	// to its end. A later tenure of the same WAL directory (the region
	// back on the store it left) goes on in the same stream, rewriting
	// its stream.json: only a final stream at the same frontier is
	// skipped.
	finished   bool
	finishedTS uint64
}

type pendingChange struct {
	seg uint64
	region.Change
}

// New returns a feed of bucket's archive; Poll or Run follow it.
func New(bucket *blob.Bucket, opts Options) *Feed {
	if opts.PollInterval <= 0 {
		opts.PollInterval = DefaultPollInterval
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	return &Feed{bucket: bucket, opts: opts, streams: map[streamID]*streamState{}}
}

// Resolved is the newest resolved mark delivered (the feed's start before
// the first).
func (f *Feed) Resolved() uint64 { return f.resolved }

// Run polls every PollInterval until ctx ends, calling fn with each update
// that has changes or a new mark; fn's error ends it. A poll that fails
// (the bucket not answering, a region not archived yet) is retried at the
// next interval; a start before the archive is not.
func (f *Feed) Run(ctx context.Context, fn func(Update) error) error {
	t := time.NewTicker(f.opts.PollInterval)
	defer t.Stop()
	for {
		u, err := f.Poll(ctx)
		f.opts.Metrics.observe(u, f.resolved, err)
		if errors.Is(err, ErrBeforeArchive) {
			return err
		}
		if err != nil && ctx.Err() == nil {
			f.opts.Logger.Warn("reading the WAL archive; retrying", "err", err)
		}
		if len(u.Changes) > 0 || u.Resolved > 0 {
			if err := fn(u); err != nil {
				return err
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

// Poll reads the archive once: the changes it holds beyond what the feed
// delivered, and the resolved mark when it advanced. When some streams
// cannot be read it returns the others' changes with the error: the feed
// has moved past those changes, so they must be delivered; the mark does
// not advance until every stream was read.
func (f *Feed) Poll(ctx context.Context) (Update, error) {
	streams, err := walarchive.Streams(ctx, f.bucket)
	if err != nil {
		return Update{}, err
	}
	m, err := regionmap.Load(ctx, f.bucket)
	if err != nil {
		return Update{}, fmt.Errorf("changefeed: the region map: %w", err)
	}
	mark, markErr := f.mark(m, streams)
	if !f.started {
		if markErr != nil && f.opts.AfterTS == 0 {
			return Update{}, markErr // no "now" to start from yet
		}
		if err := f.start(m, streams, mark); err != nil {
			return Update{}, err
		}
	}
	// A stream that cannot be read now (a part a writer has not finished,
	// the bucket failing) is read again at the next poll; the others'
	// changes are delivered, and the mark waits.
	var u Update
	var errs []error
	for _, s := range streams {
		changes, err := f.read(ctx, s)
		if err != nil {
			errs = append(errs, fmt.Errorf("changefeed: region %s's stream from WAL %s: %w", s.Region, s.WALID, err))
			continue
		}
		u.Changes = append(u.Changes, changes...)
	}
	// Each key's changes in commit order, whichever streams they came
	// from; within a timestamp, by key.
	slices.SortStableFunc(u.Changes, func(a, b region.Change) int {
		if c := cmp.Compare(a.TS, b.TS); c != 0 {
			return c
		}
		return bytes.Compare(a.Key, b.Key)
	})
	if len(errs) == 0 && markErr == nil && mark > f.resolved {
		f.resolved, u.Resolved = mark, mark
	}
	return u, errors.Join(errs...)
}

// start places the feed: after AfterTS, or after the archive's mark now.
// A start before what the archive holds of a region that has no parents
// (one of the cluster's first regions, whose whole history its streams
// are) is refused: its changes before its oldest stream are gone.
func (f *Feed) start(m regionmap.Map, streams []walarchive.Stream, mark uint64) error {
	f.from = f.opts.AfterTS
	if f.from == 0 {
		f.from = mark
	}
	oldest := map[string]uint64{}
	for _, s := range streams {
		if v, ok := oldest[s.Region]; !ok || s.FromTS < v {
			oldest[s.Region] = s.FromTS
		}
	}
	for _, r := range m.Region {
		if v, ok := oldest[r.Name]; ok && f.meets(r) && len(r.Parents) == 0 && f.from < v {
			return fmt.Errorf("%w: region %s's archive holds its changes after %d, the start is %d: start at or after %d", ErrBeforeArchive, r.Name, v, f.from, v)
		}
	}
	f.resolved, f.started = f.from, true
	return nil
}

// mark is the resolved mark streams give: the lowest, over m's regions
// that meet the range, of the newest frontier of each region's streams.
func (f *Feed) mark(m regionmap.Map, streams []walarchive.Stream) (uint64, error) {
	newest := map[string]uint64{}
	for _, s := range streams {
		newest[s.Region] = max(newest[s.Region], s.TS)
	}
	mark, found := uint64(0), false
	for _, r := range m.Region {
		if !f.meets(r) {
			continue
		}
		ts, ok := newest[r.Name]
		if !ok {
			return 0, fmt.Errorf("%w: %s", ErrNoArchive, r.Name)
		}
		if !found || ts < mark {
			mark, found = ts, true
		}
	}
	return mark, nil
}

// meets says whether region r holds keys of the feed's range.
func (f *Feed) meets(r regionmap.Region) bool {
	if f.opts.End != nil && bytes.Compare(r.Start, f.opts.End) >= 0 {
		return false
	}
	return r.End == nil || bytes.Compare(r.End, f.opts.Start) > 0
}

func (f *Feed) inRange(key []byte) bool {
	return bytes.Compare(key, f.opts.Start) >= 0 && (f.opts.End == nil || bytes.Compare(key, f.opts.End) < 0)
}

// read returns s's changes that the feed has not delivered and may now:
// up to its frontier, and beyond it in a final stream or a fenced
// segment. It reads only the parts added since the last read (a cursor),
// and keeps the changes it may not deliver yet.
func (f *Feed) read(ctx context.Context, s walarchive.Stream) ([]region.Change, error) {
	id := streamID{s.Region, s.WALID}
	st := f.streams[id]
	if st == nil {
		st = &streamState{}
		f.streams[id] = st
	}
	if st.finished && s.Final && s.TS == st.finishedTS {
		return nil, nil
	}
	// Read into fresh, kept only when the whole read succeeds: a failed
	// one is done again from the same cursor.
	var fresh []pendingChange
	next, fenceSeg, fenced, err := walarchive.ReadAfter(ctx, f.bucket, s, st.cursor, f.from, func(seg uint64, rec []byte) error {
		return region.DecodeChanges(rec, func(c region.Change) {
			if c.TS > f.from && f.inRange(c.Key) {
				fresh = append(fresh, pendingChange{seg: seg, Change: c})
			}
		})
	})
	if errors.Is(err, blob.ErrNotFound) && s.Final {
		// Pruned between the listing and the read (a backup's retention
		// removes final streams): nothing of it is wanted any more.
		st.finished, st.finishedTS, st.pending = true, s.TS, nil
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	st.cursor, st.pending = next, append(st.pending, fresh...)
	if fenced {
		st.fenceSeg, st.fenced = max(st.fenceSeg, fenceSeg), true
	}
	var out []region.Change
	kept := st.pending[:0]
	for _, p := range st.pending {
		if s.Final || p.TS <= s.TS || (st.fenced && p.seg <= st.fenceSeg) {
			out = append(out, p.Change)
		} else {
			kept = append(kept, p)
		}
	}
	st.pending = kept
	st.finished, st.finishedTS = s.Final, s.TS
	return out, nil
}
