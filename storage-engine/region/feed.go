package region

// A region's change feed (docs/watch.md): the versions committed to a key
// range after a timestamp, as a catch-up scan of what the region holds and
// then, live, each version as the write path adds it to the memstore; and
// resolved timestamps, below which nothing more will come.
//
// # Invariants
//
//   - A subscription is registered before its catch-up scan takes its read
//     state: a version added before the registration is in the memstores
//     or files the scan reads, one added after it is published to the
//     subscription. A version may come both ways; the consumer drops a
//     repeat by (key, timestamp) above its last resolved mark.
//   - Versions of one key are published in commit order: a key's writes
//     hold its latch from the timestamp's choice to the memstore, and a
//     transaction's commit of a locked key is the key's only writer.
//   - ResolvedTS R: every commit at or below R has been added (ReadableAt),
//     no later commit here takes a timestamp at or below R (the clock is
//     past it), and no lock held when R was taken can commit at or below R
//     (R is below the oldest lock's start). A lock prewritten later
//     commits above its prepare timestamp, which is above R.
//   - A subscription never blocks the write path: publishing appends to a
//     buffer bounded in bytes; past the bound the subscription ends with
//     *FeedOverflowError, and its consumer resumes from its last resolved
//     mark.
//
// # Lock order
//
// feeds.mu is a leaf: publish takes it inside the write path (after the
// memstore add, under the keys' latches and, for a transaction record,
// resolveMu); nothing is called while holding it.

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/bellows-kv/bellows/storage-engine/kv"
	"github.com/bellows-kv/bellows/storage-engine/manifest"
)

// Change is one committed version of a key: a put (Value; Expiry when it
// has a time to live) or a delete.
type Change struct {
	Key    []byte
	Value  []byte
	TS     uint64
	Delete bool
	// Expiry is when the value stops being read (0: never; kv.Expiry).
	Expiry uint64
}

// DecodeChanges calls fn with every change WAL record rec commits, as a
// watch delivers it (DecodeVersions): a change feed read from the WAL
// archive (package changefeed) delivers what a watch of the stores does.
func DecodeChanges(rec []byte, fn func(Change)) error {
	_, err := DecodeVersions(rec, func(k kv.InternalKey, v []byte) { fn(changeOf(k.UserKey, k.TS, k.Kind, v)) })
	return err
}

func changeOf(key []byte, ts uint64, kind kv.Kind, stored []byte) Change {
	c := Change{Key: bytes.Clone(key), TS: ts}
	switch kind {
	case kv.KindDelete:
		c.Delete = true
	case kv.KindSetExpiring:
		c.Expiry, _ = kv.Expiry(kind, ts, stored)
		c.Value = bytes.Clone(stored[kv.TTLLen:])
	default:
		c.Value = bytes.Clone(stored)
	}
	return c
}

// FeedOverflowError ends a subscription whose consumer fell behind by more
// than its buffer (Subscribe's bufferBytes).
type FeedOverflowError struct{ BufferBytes int }

func (e *FeedOverflowError) Error() string {
	return fmt.Sprintf("region: the watch fell more than %d bytes behind the writes: resume it from its last resolved timestamp", e.BufferBytes)
}

// Subscription is a live feed of a key range's new versions. Its consumer
// calls Take as often as it delivers (a watch: every progress interval),
// watches Ended for the feed's end, and calls Close when done. Publishing
// wakes no one: a wake-up per write per watch cost more than the watch's
// sending did.
type Subscription struct {
	r          *Region
	start, end []byte
	limit      int
	ended      chan struct{} // closed at the feed's end (err set)
	mu         sync.Mutex
	buf        []Change
	bytes      int
	err        error // the end: an overflow, or the region closing
}

// feeds is a region's subscriptions.
type feeds struct {
	n    atomic.Int32 // len(subs), read without mu on the write path
	mu   sync.Mutex
	subs map[*Subscription]struct{}
}

// Feed is a region's change feed: a value over the region, so that the
// feed's calls are not more methods of Region.
type Feed struct{ r *Region }

// FeedOf is r's change feed.
func FeedOf(r *Region) Feed { return Feed{r} }

// Subscribe registers a feed of the versions added to [start, end) (end
// nil: to the region's end) from now on, buffering at most bufferBytes of
// them for its consumer.
func (fd Feed) Subscribe(start, end []byte, bufferBytes int) (*Subscription, error) {
	r := fd.r
	start, end = r.clip(start, end)
	s := &Subscription{r: r, start: bytes.Clone(start), end: bytes.Clone(end), limit: bufferBytes, ended: make(chan struct{})}
	r.mu.RLock()
	defer r.mu.RUnlock()
	if r.closed {
		return nil, ErrClosed
	}
	f := &r.feeds
	f.mu.Lock()
	if f.subs == nil {
		f.subs = map[*Subscription]struct{}{}
	}
	f.subs[s] = struct{}{}
	f.n.Store(int32(len(f.subs)))
	f.mu.Unlock()
	return s, nil
}

// Ended is closed when the feed ended (Take then returns why): an
// overflow, or the region closing.
func (s *Subscription) Ended() <-chan struct{} { return s.ended }

// Take returns the buffered changes, oldest first, and the error that
// ended the subscription, if it did.
func (s *Subscription) Take() ([]Change, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.buf
	s.buf, s.bytes = nil, 0
	return out, s.err
}

// Buffered is how many bytes of changes the subscription holds untaken.
func (s *Subscription) Buffered() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.bytes
}

// Close unregisters the subscription.
func (s *Subscription) Close() {
	f := &s.r.feeds
	f.mu.Lock()
	delete(f.subs, s)
	f.n.Store(int32(len(f.subs)))
	f.mu.Unlock()
}

// stop ends s with err (the first one stays). The caller holds s.mu.
func (s *Subscription) stopLocked(err error) {
	if s.err == nil {
		s.err = err
		close(s.ended)
	}
}

// publish hands the versions just added at ts (one batch's, or a
// transaction record's at its commit timestamp) to the subscriptions whose
// range holds them.
func (f *feeds) publish(ops []op, ts uint64) {
	if f.n.Load() == 0 {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	// Each change is made once and shared: subscribers never modify one.
	changes := make([]Change, len(ops))
	for i, o := range ops {
		changes[i] = changeOf(o.key, ts, o.kind, o.value)
	}
	for s := range f.subs {
		s.mu.Lock()
		for _, c := range changes {
			if s.err != nil {
				break
			}
			if bytes.Compare(c.Key, s.start) < 0 || (s.end != nil && bytes.Compare(c.Key, s.end) >= 0) {
				continue
			}
			if s.bytes += len(c.Key) + len(c.Value) + 32; s.bytes > s.limit {
				s.buf, s.bytes = nil, 0
				s.stopLocked(&FeedOverflowError{BufferBytes: s.limit})
				break
			}
			s.buf = append(s.buf, c)
		}
		s.mu.Unlock()
	}
}

// closeAll ends every subscription with err: the region is closing.
func (f *feeds) closeAll(err error) {
	f.mu.Lock()
	subs := make([]*Subscription, 0, len(f.subs))
	for s := range f.subs {
		subs = append(subs, s)
	}
	f.mu.Unlock()
	for _, s := range subs {
		s.mu.Lock()
		s.stopLocked(err)
		s.mu.Unlock()
	}
}

// ResolvedTS makes the region readable at its clock's now and returns a
// timestamp at or below which it holds every version it ever will (see the
// top of this file).
func (fd Feed) ResolvedTS() (uint64, error) {
	r := fd.r
	t := r.opts.Clock.Now()
	if err := r.ReadableAt(t); err != nil {
		return 0, err
	}
	if m := r.txn.minLockStart(); m != 0 && m-1 < t {
		t = m - 1
	}
	return t, nil
}

// OldestLock is the held lock with the oldest start, which holds the
// resolved timestamp back (ResolvedTS).
func (fd Feed) OldestLock() (manifest.TxnLock, bool) { return fd.r.txn.oldestLock() }

// Changes calls f with every version the region holds of a key in [start,
// end) (end nil: to its end) committed after after, keys in order and
// each key's versions oldest first: the catch-up scan of a subscription
// registered before it. It fails with a *SnapshotTooOldError when the
// region's retention may have dropped a version after after.
func (fd Feed) Changes(ctx context.Context, start, end []byte, after uint64, f func(Change) error) error {
	r := fd.r
	start, end = r.clip(start, end)
	st := iterStates.Get().(*iterState)
	rs := &st.rs
	if err := r.acquireInto(rs, kv.MaxTimestamp); err != nil {
		st.reset()
		iterStates.Put(st)
		return err
	}
	defer func() {
		_ = st.merge.Close()
		rs.release()
		st.reset()
		iterStates.Put(st)
	}()
	if after < rs.exactFrom {
		return &SnapshotTooOldError{Region: r.opts.Name, ReadTS: after, ExactFrom: rs.exactFrom}
	}
	st.merge.Init(st.iterators(ctx, start, end, after))
	in := &st.merge
	ok := in.First()
	if start != nil {
		ok = in.SeekGE(kv.MakeSearchKey(start, kv.MaxTimestamp))
	}
	// A key's versions come newest first: keep them, then call f oldest
	// first.
	var key []byte
	var versions []Change
	flushKey := func() error {
		for i := len(versions) - 1; i >= 0; i-- {
			if err := f(versions[i]); err != nil {
				return err
			}
		}
		versions = versions[:0]
		return nil
	}
	for ; ok; ok = in.Next() {
		k := in.Key()
		if end != nil && bytes.Compare(k.UserKey, end) >= 0 {
			break
		}
		if !bytes.Equal(k.UserKey, key) {
			if err := flushKey(); err != nil {
				return err
			}
			key = append(key[:0], k.UserKey...)
		}
		if k.TS <= after {
			// Older than the catch-up: files holding only such versions
			// are not read at all (children), a memstore's are passed.
			continue
		}
		versions = append(versions, changeOf(k.UserKey, k.TS, k.Kind, in.Value()))
		if err := ctx.Err(); err != nil {
			return err
		}
	}
	if err := in.Err(); err != nil {
		return err
	}
	return flushKey()
}
