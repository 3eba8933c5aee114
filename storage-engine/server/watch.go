package server

// Watch: a region's changes as a stream (docs/watch.md). The region's feed
// (storage-engine/region's feed.go) gives the versions; this file routes a
// watch to its region, runs the catch-up then the live phase, and sends
// resolved marks.
//
// A mark R is sent only after every change at or below R has been sent:
// the first mark is the resolved timestamp taken before the catch-up scan
// (whose read state is taken after it, so it holds every version at or
// below it); each later one is taken before the subscription's buffer is
// emptied into the stream (every version at or below it was published
// before the resolved timestamp returned).

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/bellows-kv/bellows/internal/contract"
	kvpb "github.com/bellows-kv/bellows/proto/bellows/kv/v1"
	"github.com/bellows-kv/bellows/storage-engine/region"
)

// watchChunk is about how many bytes of events one answer carries.
const watchChunk = 256 << 10

// Watch implements kvpb.KVServer.
func (s *KV) Watch(req *kvpb.WatchRequest, stream kvpb.KV_WatchServer) error {
	ctx := stream.Context()
	end := req.End
	if len(end) == 0 {
		end = nil
	}
	if end != nil && bytes.Compare(req.Start, end) >= 0 {
		return status.Errorf(codes.InvalidArgument, "watch of [%q, %q): start must be below end", req.Start, end)
	}
	routeKey := req.Start
	if len(routeKey) == 0 {
		routeKey = []byte{0} // the first key there can be: the same region
	}
	// Routed here, not by resolve: a watch is not forwarded (it would tie
	// this store to the owner's stream), and its streams, reopened at
	// every resumption, are not the requests a region's load counts.
	a := s.store.Route(routeKey)
	if a == nil {
		return status.Errorf(codes.Unavailable, "watch from %q: the key's region is not served by this store: watch through its owner (see Regions)", req.Start)
	}
	e, notOpen := a.Engine()
	if e == nil {
		return regionErr(a, notOpen)
	}
	stop := end
	if a.Span.End != nil && (stop == nil || bytes.Compare(a.Span.End, stop) < 0) {
		stop = a.Span.End
	}
	interval := contract.DefaultWatchProgressInterval
	if req.ProgressIntervalMs > 0 {
		interval = time.Duration(req.ProgressIntervalMs) * time.Millisecond
	}
	feed := region.FeedOf(e)
	sub, err := feed.Subscribe(req.Start, stop, contract.WatchBufferBytes)
	if err != nil {
		return regionErr(a, err)
	}
	defer sub.Close()
	resolved, err := feed.ResolvedTS()
	if err != nil {
		return regionErr(a, err)
	}
	w := &watchStream{stream: stream, first: &kvpb.WatchResponse{Region: a.Name()}, sub: sub, set: &s.watches}
	s.watches.add(w)
	defer s.watches.remove(w)
	if !bytes.Equal(stop, end) {
		w.first.RegionEnd = bytes.Clone(stop)
	}
	// The catch-up's changes above resolved may also be in the feed: the
	// feed's copies of those are dropped (take).
	w.overlap = map[changeID]bool{}
	if err := feed.Changes(ctx, req.Start, stop, req.AfterTs, func(c region.Change) error {
		if c.TS > resolved {
			w.overlap[changeID{string(c.Key), c.TS}] = true
			w.overlapTo = max(w.overlapTo, c.TS)
		}
		return w.add(c)
	}); err != nil {
		return regionErr(a, err)
	}
	if err := w.mark(max(resolved, req.AfterTs)); err != nil {
		return err
	}
	tick := time.NewTicker(interval)
	defer tick.Stop()
	settleAfter, stuckSince := 5*interval, time.Now()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-sub.Ended():
			// What it gathered above the last mark comes again to the
			// resumed stream.
			_, err := sub.Take()
			return w.ended(a, err)
		case <-tick.C:
			if cur := s.store.Route(routeKey); cur != a || a.released.Load() {
				s.watches.ended[watchEndRegionChanged].Add(1)
				return regionStatus(codes.Unavailable, a.Name(), "watch of region %s: the region moved, split or merged: resume from resolved_ts %d through its new owners", a.Name(), w.resolved)
			}
			r, err := feed.ResolvedTS()
			if err != nil {
				return w.ended(a, err)
			}
			if r > w.resolved {
				stuckSince = time.Now()
			} else if time.Since(stuckSince) > settleAfter {
				// A lock holds the mark back: one a commit left behind
				// (its region split or moved under the commit) is rolled
				// forward or back at once, not at its TTL.
				s.settleOldestLock(ctx, a, e, r)
				stuckSince = time.Now()
			}
			if err := w.take(a, sub); err != nil {
				return err
			}
			if err := w.mark(r); err != nil {
				return err
			}
		}
	}
}

// settleOldestLock asks the resolver to settle the oldest lock of region
// e if it holds the resolved timestamp r back: a lock whose transaction
// committed or rolled back is resolved to match; one still being committed
// stays (no wait).
func (s *KV) settleOldestLock(ctx context.Context, a *Assignment, e *region.Region, r uint64) {
	_ = s.resolver.WithLocksNoWait(ctx, s.txnRegion(target{local: a, eng: e}), func() error {
		if l, ok := region.FeedOf(e).OldestLock(); ok && l.StartTS <= r+1 {
			return &region.LockedError{Key: l.Key, Lock: l}
		}
		return nil
	})
}

// watchStream is one watch's answers being built and sent.
type watchStream struct {
	stream   kvpb.KV_WatchServer
	sub      *region.Subscription
	set      *watchSet
	first    *kvpb.WatchResponse // the first answer's header, until sent
	resp     kvpb.WatchResponse
	size     int
	resolved uint64 // the last mark sent
	// overlap are the catch-up's changes the live feed may send again
	// (none above overlapTo).
	overlap   map[changeID]bool
	overlapTo uint64
	// markedAt is when the last mark was sent (Unix nanoseconds; the
	// stream's start before the first), read by the metrics.
	markedAt atomic.Int64
}

// watchSet is a store's open watches and what they have sent, for the
// metrics (RegisterWatchMetrics).
type watchSet struct {
	mu      sync.Mutex
	open    map[*watchStream]struct{}
	events  atomic.Uint64
	ended   [watchEndReasons]atomic.Uint64
	started atomic.Uint64
}

// Why watches end, the reason label of bellows_watch_ended_total.
const (
	watchEndOverflow = iota
	watchEndRegionChanged
	watchEndReasons
)

var watchEndLabels = [watchEndReasons]string{"overflow", "region-changed"}

func (s *watchSet) add(w *watchStream) {
	w.markedAt.Store(time.Now().UnixNano())
	s.mu.Lock()
	if s.open == nil {
		s.open = map[*watchStream]struct{}{}
	}
	s.open[w] = struct{}{}
	s.mu.Unlock()
	s.started.Add(1)
}

func (s *watchSet) remove(w *watchStream) {
	s.mu.Lock()
	delete(s.open, w)
	s.mu.Unlock()
}

// stats are the open watches' count, buffered bytes, and the longest time
// since one of them got a mark.
func (s *watchSet) stats() (open int, buffered int, oldestMark time.Duration) {
	now := time.Now().UnixNano()
	s.mu.Lock()
	defer s.mu.Unlock()
	for w := range s.open {
		buffered += w.sub.Buffered()
		oldestMark = max(oldestMark, time.Duration(now-w.markedAt.Load()))
	}
	return len(s.open), buffered, oldestMark
}

func (w *watchStream) add(c region.Change) error {
	w.resp.Events = append(w.resp.Events, &kvpb.WatchEvent{Key: c.Key, Value: c.Value, CommitTs: c.TS, Delete: c.Delete, ExpiryTs: c.Expiry})
	if w.size += len(c.Key) + len(c.Value) + 16; w.size >= watchChunk {
		return w.flush()
	}
	return nil
}

// take adds what sub holds, or ends the watch as sub ended (what it held
// above the last mark comes again to the resumed stream).
func (w *watchStream) take(a *Assignment, sub *region.Subscription) error {
	changes, err := sub.Take()
	if err != nil {
		return w.ended(a, err)
	}
	for _, c := range changes {
		if c.TS <= w.overlapTo && w.overlap[changeID{string(c.Key), c.TS}] {
			continue
		}
		if err := w.add(c); err != nil {
			return err
		}
	}
	// Every version the catch-up read was published before it began, so
	// before this take: later ones are new.
	w.overlap, w.overlapTo = nil, 0
	return nil
}

// changeID names a change: its key and commit timestamp.
type changeID struct {
	key string
	ts  uint64
}

// mark sends the events gathered, then the resolved mark r when it is new.
func (w *watchStream) mark(r uint64) error {
	advanced := r > w.resolved
	if advanced {
		w.resp.ResolvedTs, w.resolved = r, r
	}
	err := w.flush()
	if err == nil && advanced {
		w.markedAt.Store(time.Now().UnixNano())
	}
	return err
}

func (w *watchStream) flush() error {
	if len(w.resp.Events) == 0 && w.resp.ResolvedTs == 0 && w.first == nil {
		return nil
	}
	if w.first != nil {
		w.resp.Region, w.resp.RegionEnd = w.first.Region, w.first.RegionEnd
		w.first = nil
	}
	err := w.stream.Send(&w.resp)
	w.set.events.Add(uint64(len(w.resp.Events)))
	w.resp = kvpb.WatchResponse{}
	w.size = 0
	return err
}

// ended is the status a watch ends with when its region's feed ended.
func (w *watchStream) ended(a *Assignment, err error) error {
	var overflow *region.FeedOverflowError
	switch {
	case errors.As(err, &overflow):
		w.set.ended[watchEndOverflow].Add(1)
		return regionStatus(codes.ResourceExhausted, a.Name(), "watch of region %s: the watcher fell more than %d bytes behind the writes: resume from resolved_ts %d", a.Name(), overflow.BufferBytes, w.resolved)
	case errors.Is(err, region.ErrClosed):
		w.set.ended[watchEndRegionChanged].Add(1)
		return regionStatus(codes.Unavailable, a.Name(), "watch of region %s: the region closed here (moved, split, merged or the store stopping): resume from resolved_ts %d", a.Name(), w.resolved)
	}
	return regionErr(a, err)
}

// RegisterWatchMetrics registers the metrics of kv's watches with reg.
func RegisterWatchMetrics(reg prometheus.Registerer, kv *KV) {
	w := &kv.watches
	reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "bellows_watches",
			Help: "Watch streams this store serves (one per region a client's watch spans)."},
			func() float64 { n, _, _ := w.stats(); return float64(n) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "bellows_watches_started_total",
			Help: "Watch streams this store began serving (a resumed watch counts again)."},
			func() float64 { return float64(w.started.Load()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "bellows_watch_events_total",
			Help: "Changes this store sent to watches (a change sent again to a resumed watch counts again)."},
			func() float64 { return float64(w.events.Load()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "bellows_watch_buffered_bytes",
			Help: "Bytes of changes this store holds for its watches that their streams have not taken yet; each watch ends past contract.WatchBufferBytes."},
			func() float64 { _, b, _ := w.stats(); return float64(b) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "bellows_watch_resolved_age_seconds",
			Help: "The longest time since one of this store's watch streams was sent a resolved mark (0: none open): it grows when a region's resolved timestamp stops advancing, a lock held long or a consumer not reading."},
			func() float64 { _, _, d := w.stats(); return d.Seconds() }),
	)
	for i, l := range watchEndLabels {
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "bellows_watch_ended_total",
			Help:        "Watch streams this store ended for their clients to resume, by reason: overflow (the consumer fell behind its buffer) or region-changed (a split, merge, move or the store stopping).",
			ConstLabels: prometheus.Labels{"reason": l}},
			func() float64 { return float64(w.ended[i].Load()) }))
	}
}
