package client

// Watches (docs/watch.md): one stream per region the watched range spans,
// each resumed from its own last resolved mark when it breaks (a region
// split, merged or moved, a store restarted or failed over, a watcher
// that fell behind). The Watcher delivers changes only once every part of
// the range has resolved past them, in commit-timestamp order, so its
// position is one timestamp: every change at or below the last mark it
// delivered has been delivered, none above it. A change a resumed stream
// sends again (above its mark) is dropped by key and commit timestamp; a
// stream itself sends each change once (the store drops the overlap of its
// catch-up and its live feed).

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/cenkalti/backoff/v5"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/bellows-kv/bellows/internal/contract"
	kvpb "github.com/bellows-kv/bellows/proto/bellows/kv/v1"
)

// WatchEvent is one committed change: a put of Value (expiring at Expiry
// when it has a time to live, 0: never) or a delete, at CommitTS.
type WatchEvent struct {
	Key      []byte
	Value    []byte
	CommitTS uint64
	Delete   bool
	Expiry   uint64
}

// WatchUpdate is what one Watcher.Next delivers: the changes committed
// after the previous update's Resolved and at or below this one's, in
// commit-timestamp order (a transaction's changes share one timestamp,
// ordered by key). Resolved is the watch's position: resume it with
// WatchOptions.AfterTS = Resolved and nothing is missed or repeated.
type WatchUpdate struct {
	Events   []WatchEvent
	Resolved uint64
}

// WatchOptions are a watch's settings.
type WatchOptions struct {
	// AfterTS: changes committed after it are delivered (0: every change
	// the regions retain; a time before the retained history fails the
	// watch with ErrSnapshotTooOld).
	AfterTS uint64
	// ProgressInterval: how often the stores send resolved marks, which is
	// how often updates come and bounds their delay (0: the stores'
	// default, 50 ms).
	ProgressInterval time.Duration
}

// Watcher follows a watch; Next blocks until the next update. Not safe for
// concurrent use; Close it.
type Watcher struct {
	c        *Client
	ctx      context.Context
	cancel   context.CancelFunc
	opts     WatchOptions
	msgs     chan watchMsg
	parts    map[int]*watchPart
	nextID   int
	pending  []WatchEvent
	resolved uint64
	cur      WatchUpdate
	err      error
}

// eventID names a change: its key and commit timestamp.
type eventID struct {
	key string
	ts  uint64
}

// watchPart is a key range one stream serves.
type watchPart struct {
	start, end []byte
	resolved   uint64
	// resent: a resumed stream sends again the changes above resolved that
	// an earlier one sent, at or below resent; pendingAtResume names them
	// (nil when none may come again).
	resent          uint64
	pendingAtResume map[eventID]bool
}

// watchMsg is what a part's stream tells the Watcher: events, a mark, its
// range's end moved to end (the region ends there: a new part takes the
// rest), or the error that ends the watch.
type watchMsg struct {
	part     int
	events   []*kvpb.WatchEvent
	resolved uint64
	split    []byte
	resumed  bool // a new stream of the part starts
	err      error
}

// Watch follows every change committed to [start, end) (empty end: past
// the last key) after opts.AfterTS, across the regions the range spans and
// through their splits, merges, moves and failovers.
func (c *Client) Watch(ctx context.Context, start, end []byte, opts WatchOptions) *Watcher {
	ctx, cancel := context.WithCancel(ctx)
	w := &Watcher{c: c, ctx: ctx, cancel: cancel, opts: opts, msgs: make(chan watchMsg, 16), parts: map[int]*watchPart{}, resolved: opts.AfterTS}
	if len(end) > 0 && bytes.Compare(start, end) >= 0 {
		w.err = fmt.Errorf("bellows client: watch of [%q, %q): start must be below end", start, end)
		return w
	}
	w.startPart(bytes.Clone(start), bytes.Clone(end), opts.AfterTS)
	return w
}

func (w *Watcher) startPart(start, end []byte, after uint64) *watchPart {
	id := w.nextID
	w.nextID++
	p := &watchPart{start: start, end: end, resolved: after}
	w.parts[id] = p
	go w.follow(id, start, end, after)
	return p
}

// expectRepeats notes that a new stream of part p will send again what
// was received of p's range above its mark (pending).
func (w *Watcher) expectRepeats(p *watchPart) {
	p.pendingAtResume = map[eventID]bool{}
	for _, e := range w.pending {
		if e.CommitTS > p.resolved && bytes.Compare(e.Key, p.start) >= 0 && (len(p.end) == 0 || bytes.Compare(e.Key, p.end) < 0) {
			p.pendingAtResume[eventID{string(e.Key), e.CommitTS}] = true
			p.resent = max(p.resent, e.CommitTS)
		}
	}
}

// Next waits for the next update; false when the watch ended (Err says
// why: nil after Close or the context's end).
func (w *Watcher) Next() bool {
	for w.err == nil {
		select {
		case <-w.ctx.Done():
			return false
		case m := <-w.msgs:
			if m.err != nil {
				w.err = m.err
				return false
			}
			if w.apply(m) {
				return true
			}
		}
	}
	return false
}

// apply takes m in; true when the watch's mark moved and cur is the update.
func (w *Watcher) apply(m watchMsg) bool {
	p := w.parts[m.part]
	if m.split != nil {
		// The new part's stream starts from the mark: what the earlier
		// stream sent of its range above it comes again.
		q := w.startPart(bytes.Clone(m.split), p.end, p.resolved)
		p.end = m.split
		w.expectRepeats(q)
		return false
	}
	if m.resumed {
		w.expectRepeats(p)
		return false
	}
	for _, e := range m.events {
		if e.CommitTs <= p.resolved { // the watch's mark is at or below every part's
			continue
		}
		if e.CommitTs <= p.resent && p.pendingAtResume[eventID{string(e.Key), e.CommitTs}] {
			continue
		}
		w.pending = append(w.pending, WatchEvent{Key: e.Key, Value: e.Value, CommitTS: e.CommitTs, Delete: e.Delete, Expiry: e.ExpiryTs})
	}
	p.resolved = max(p.resolved, m.resolved)
	if p.resolved >= p.resent {
		p.pendingAtResume = nil
	}
	low := p.resolved
	for _, q := range w.parts {
		low = min(low, q.resolved)
	}
	if low <= w.resolved {
		return false
	}
	var out, keep []WatchEvent
	for _, e := range w.pending {
		if e.CommitTS <= low {
			out = append(out, e)
		} else {
			keep = append(keep, e)
		}
	}
	slices.SortStableFunc(out, func(a, b WatchEvent) int {
		if c := cmp.Compare(a.CommitTS, b.CommitTS); c != 0 {
			return c
		}
		return bytes.Compare(a.Key, b.Key)
	})
	w.pending, w.resolved = keep, low
	w.cur = WatchUpdate{Events: out, Resolved: low}
	return true
}

// Update is the update Next delivered.
func (w *Watcher) Update() WatchUpdate { return w.cur }

// Err is what ended the watch: ErrSnapshotTooOld when AfterTS is older
// than a region's retained history, or a refusal no retry mends.
func (w *Watcher) Err() error { return w.err }

// Close ends the watch and its streams.
func (w *Watcher) Close() { w.cancel() }

// send hands m to Next; false when the watch is closed.
func (w *Watcher) send(m watchMsg) bool {
	select {
	case w.msgs <- m:
		return true
	case <-w.ctx.Done():
		return false
	}
}

// follow runs part id's streams, [start, end) from after, resuming each
// broken one from its last mark, until the watch ends.
func (w *Watcher) follow(id int, start, end []byte, after uint64) {
	b := backoff.NewExponentialBackOff()
	b.InitialInterval, b.MaxInterval = w.c.opts.RetryInitial, w.c.opts.RetryMax
	for streams := 0; w.ctx.Err() == nil; streams++ {
		if streams > 0 && !w.send(watchMsg{part: id, resumed: true}) {
			return
		}
		err := w.stream(id, start, &end, &after, b)
		if w.ctx.Err() != nil {
			return
		}
		if permanentWatchError(err) {
			w.send(watchMsg{part: id, err: readErr(err)})
			return
		}
		w.c.refreshAfter(w.c.table.Load().gen)
		if err := sleepCtx(w.ctx, b.NextBackOff()); err != nil {
			return
		}
	}
}

// stream runs one Watch stream for part id; it returns why it ended.
func (w *Watcher) stream(id int, start []byte, end *[]byte, after *uint64, b *backoff.ExponentialBackOff) error {
	t := w.c.table.Load()
	targets := w.c.seeds
	key := start
	if len(key) == 0 {
		key = []byte{0}
	}
	if r, ok := t.lookup(key); ok && len(r.Owners) > 0 {
		targets = r.Owners
	}
	var lastErr error
	for _, addr := range targets {
		cc, err := w.c.conn(addr)
		if err != nil {
			return err
		}
		ctx, cancel := context.WithCancel(w.ctx)
		s, err := kvpb.NewKVClient(cc).Watch(ctx, &kvpb.WatchRequest{Start: start, End: *end, AfterTs: *after, ProgressIntervalMs: uint32(w.opts.ProgressInterval.Milliseconds())})
		for err == nil {
			var resp *kvpb.WatchResponse
			if resp, err = s.Recv(); err != nil {
				break
			}
			b.Reset()
			if len(resp.RegionEnd) > 0 {
				*end = resp.RegionEnd
				if !w.send(watchMsg{part: id, split: resp.RegionEnd}) {
					break
				}
			}
			if !w.send(watchMsg{part: id, events: resp.Events, resolved: resp.ResolvedTs}) {
				break
			}
			*after = max(*after, resp.ResolvedTs)
		}
		cancel()
		if errors.Is(err, io.EOF) {
			err = status.Error(codes.Unavailable, "the watch stream ended")
		}
		if permanentWatchError(err) || w.ctx.Err() != nil {
			return err
		}
		lastErr = err
	}
	return lastErr
}

// permanentWatchError: a refusal a retry from the same mark would get
// again.
func permanentWatchError(err error) bool {
	switch status.Code(err) {
	case codes.InvalidArgument, codes.PermissionDenied, codes.Unauthenticated, codes.Unimplemented:
		return true
	case codes.FailedPrecondition:
		return hasReason(err, contract.SnapshotTooOldReason)
	}
	return false
}
