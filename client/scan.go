package client

import (
	"bytes"
	"context"
	"errors"
	"io"
	"time"

	"github.com/cenkalti/backoff/v5"

	kvpb "github.com/bellows-kv/bellows/proto/bellows/kv/v1"
)

// ScanOptions shape a Scan.
type ScanOptions struct {
	// Limit bounds the number of pairs; 0 means no limit.
	Limit int
	// ReadTS, when set, reads each region's versions visible at it.
	ReadTS *uint64
	// Reverse returns the keys of [start, end) in descending order, from
	// end down; Limit counts from there (etcd's SortDescend, TiKV's
	// ReverseScan). The range is the same: start below end.
	Reverse bool
}

// KeyValue is one pair of a scan.
type KeyValue struct{ Key, Value []byte }

// Scan returns an iterator over the live keys of [start, end) in key order,
// or descending with opts.Reverse (empty start: the first key; empty end:
// past the last; start after a non-empty end: Err is ErrInvalidRange, in
// either order). It reads one region at a time from its owner (right to
// left when reverse); a stream that breaks (the owner moved, restarted or
// went away) resumes after the last key returned (before it, reverse), at
// the owner the refreshed table names, until the context ends. Close it
// when done.
func (c *Client) Scan(ctx context.Context, start, end []byte, opts ScanOptions) *Iterator {
	ctx, cancel := context.WithCancel(ctx)
	b := backoff.NewExponentialBackOff()
	b.InitialInterval, b.MaxInterval = c.opts.RetryInitial, c.opts.RetryMax
	it := &Iterator{c: c, ctx: ctx, cancel: cancel, from: bytes.Clone(start), end: bytes.Clone(end), opts: opts, retry: b}
	it.to = it.end
	// An inverted range would read nothing and look like an empty one.
	it.err = checkRange(start, end)
	return it
}

// Iterator walks a Scan's pairs. Use:
//
//	it := c.Scan(ctx, start, end, client.ScanOptions{})
//	defer it.Close()
//	for it.Next() {
//		use(it.Key(), it.Value())
//	}
//	if err := it.Err(); err != nil { ... }
type Iterator struct {
	c      *Client
	ctx    context.Context
	cancel context.CancelFunc
	end    []byte
	opts   ScanOptions
	retry  *backoff.ExponentialBackOff
	// snapshot: a transaction's scan (TxnScan at opts.ReadTS), with its
	// uncertainty limit; txn is its transaction (of a snapshot iterator,
	// which it sends the observed clocks of and tells of new ones, and of
	// the overlay over it).
	snapshot         bool
	uncertaintyLimit uint64
	txn              *Txn
	// ov: a transaction's scan, its own writes over a snapshot iterator;
	// the fields below are unused then.
	ov *overlay

	// from is where the next stream starts: the successor of the last key
	// returned, or the start of the next region. A reverse scan's from
	// stays its start; to is where its next stream ends (exclusive): the
	// last key returned, or the start of the region above; empty: past
	// the last key.
	from, to []byte
	// The open stream and the range it covers: [from at opening, segEnd)
	// (empty segEnd: up to end), or reverse [segStart, to at opening).
	stream   receiver
	stop     context.CancelFunc // cancels the open stream
	segEnd   []byte
	segStart []byte
	gen      uint64 // the table generation the stream's route came from
	failures int    // consecutive stale-route failures: which owner to try
	// addr and region are the open stream's store and region ("": the
	// table has none); stale, the last stale-route answer.
	addr, region string
	stale        error

	buf      []*kvpb.KeyValue
	cur      *kvpb.KeyValue
	returned int
	done     bool
	err      error
}

// Next advances to the next pair; false at the end or on an error (Err).
func (it *Iterator) Next() bool {
	if it.ov != nil {
		return it.nextMerged()
	}
	for {
		if len(it.buf) > 0 {
			it.cur, it.buf = it.buf[0], it.buf[1:]
			if it.opts.Reverse {
				it.to = it.cur.Key // the response's: never reused
			} else {
				it.from = append(bytes.Clone(it.cur.Key), 0)
			}
			it.returned++
			return true
		}
		if it.done || it.err != nil || (it.opts.Limit > 0 && it.returned >= it.opts.Limit) {
			it.closeStream()
			return false
		}
		if it.stream == nil {
			it.open()
		}
		resp, err := it.stream.Recv()
		switch {
		case err == nil:
			if it.snapshot && it.txn != nil {
				it.txn.observe(resp.Observed)
			}
			it.buf = resp.Pairs
			it.failures = 0
			it.retry.Reset()
		case errors.Is(err, io.EOF):
			// The segment is done: the next starts where it ended.
			it.closeStream()
			switch {
			case it.opts.Reverse && bytes.Compare(it.segStart, it.from) <= 0:
				it.done = true
			case it.opts.Reverse:
				it.to = it.segStart
			case len(it.segEnd) == 0 || (len(it.end) > 0 && bytes.Compare(it.segEnd, it.end) >= 0):
				it.done = true
			default:
				it.from = it.segEnd
			}
		case it.ctx.Err() != nil || !staleRoute(err):
			it.closeStream()
			it.err = err
			if it.stale != nil && ended(it.ctx, err) {
				it.err = gaveUp(it.ctx.Err(), it.stale)
			}
		default:
			// Resume after (reverse: before) the last key returned, at
			// the owner a refreshed table names, after a backoff.
			it.closeStream()
			it.failures++
			it.stale = &answerError{region: it.region, addr: it.addr, err: err}
			it.c.refreshAfter(it.gen)
			it.c.retrying(it.stale)
			select {
			case <-it.ctx.Done():
				it.err = gaveUp(it.ctx.Err(), it.stale)
			case <-time.After(it.retry.NextBackOff()): // backoff, not synchronisation
			}
		}
	}
}

// overlay is a transaction's own writes (in the scan's order) over the
// stored pairs of its snapshot.
type overlay struct {
	stored *Iterator
	own    []Mutation
	i      int  // the next own write
	peeked bool // stored is on a pair not returned yet
	done   bool // stored has no more pairs
}

// nextMerged is Next of a transaction's scan: the stored pairs and the own
// writes merged in the scan's order, an own write replacing (or, a delete,
// hiding) the stored pair of its key.
func (it *Iterator) nextMerged() bool {
	ov := it.ov
	for {
		if it.err != nil || (it.opts.Limit > 0 && it.returned >= it.opts.Limit) {
			ov.stored.Close()
			return false
		}
		if !ov.peeked && !ov.done {
			if ov.stored.Next() {
				ov.peeked = true
			} else if err := ov.stored.Err(); err != nil {
				it.err = it.txn.noteRead(readErr(err))
				return false
			} else {
				ov.done = true
			}
		}
		if ov.i < len(ov.own) && (!ov.peeked || it.order(ov.own[ov.i].Key, ov.stored.Key()) <= 0) {
			m := ov.own[ov.i]
			ov.i++
			if ov.peeked && bytes.Equal(m.Key, ov.stored.Key()) {
				ov.peeked = false // the own write shadows it
			}
			if m.Delete {
				continue
			}
			it.cur = &kvpb.KeyValue{Key: m.Key, Value: m.Value}
			it.returned++
			return true
		}
		if !ov.peeked {
			ov.stored.Close()
			return false
		}
		ov.peeked = false
		it.cur = ov.stored.cur
		it.returned++
		return true
	}
}

// order compares keys in the scan's order.
func (it *Iterator) order(a, b []byte) int {
	if it.opts.Reverse {
		return bytes.Compare(b, a)
	}
	return bytes.Compare(a, b)
}

// open starts the stream for the segment holding it.from: to the end of
// its region at the region's owner or, when no owner is known, to the end
// of the scan at a seed (which forwards across regions). A reverse scan's
// segment is the one holding the keys just below it.to, from there down
// to its region's start, or to the scan's start at a seed.
func (it *Iterator) open() {
	t := it.c.table.Load()
	it.gen = t.gen
	targets := it.c.seeds
	it.region = ""
	req := &kvpb.ScanRequest{Start: it.from, End: it.end, ReadTs: it.opts.ReadTS, Reverse: it.opts.Reverse}
	if it.opts.Reverse {
		req.End = it.to
		if r, ok := t.lookupBelow(it.to); ok {
			it.region = r.Name
			if len(r.Owners) > 0 {
				targets = r.Owners
				if bytes.Compare(r.Start, it.from) > 0 {
					req.Start = r.Start
				}
			}
		}
		it.segStart = req.Start
	} else {
		if r, ok := t.lookup(it.from); ok {
			it.region = r.Name
			if len(r.Owners) > 0 {
				targets = r.Owners
				if len(r.End) > 0 && (len(it.end) == 0 || bytes.Compare(r.End, it.end) < 0) {
					req.End = r.End
				}
			}
		}
		it.segEnd = req.End
	}
	addr := targets[it.failures%len(targets)]
	it.addr = addr
	if it.opts.Limit > 0 {
		req.Limit = uint32(it.opts.Limit - it.returned)
	}
	ctx, stop := context.WithCancel(it.ctx)
	it.stop = stop
	cc, err := it.c.conn(addr)
	if err == nil && it.snapshot {
		it.stream, err = kvpb.NewKVClient(cc).TxnScan(ctx, &kvpb.TxnScanRequest{StartTs: *req.ReadTs, Start: req.Start, End: req.End, Limit: req.Limit, UncertaintyLimit: it.uncertaintyLimit, Observed: it.txn.observedList(), Reverse: req.Reverse})
	} else if err == nil {
		it.stream, err = kvpb.NewKVClient(cc).Scan(ctx, req)
	}
	if err != nil {
		it.stream = failedStream{err}
	}
}

func (it *Iterator) closeStream() {
	if it.stop != nil {
		it.stop()
	}
	it.stream, it.stop = nil, nil
}

// Key is the current pair's key; valid until the next call to Next.
func (it *Iterator) Key() []byte { return it.cur.GetKey() }

// Value is the current pair's value; valid until the next call to Next.
func (it *Iterator) Value() []byte { return it.cur.GetValue() }

// Err is the error that ended the iteration, if any.
func (it *Iterator) Err() error { return it.err }

// Close ends the iteration and its stream.
func (it *Iterator) Close() {
	it.closeStream()
	if it.cancel != nil {
		it.cancel()
	}
}

// PrefixEnd is the end of the range of keys that begin with prefix: the
// prefix's successor (its last byte below 0xff incremented, what follows it
// dropped), or nil — no upper bound — when prefix is empty or all 0xff.
func PrefixEnd(prefix []byte) []byte {
	for i := len(prefix) - 1; i >= 0; i-- {
		if prefix[i] < 0xff {
			end := bytes.Clone(prefix[:i+1])
			end[i]++
			return end
		}
	}
	return nil
}

// ScanPrefix is Scan of the live keys that begin with prefix (empty: every
// key), in key order (descending with opts.Reverse): [prefix,
// PrefixEnd(prefix)).
func (c *Client) ScanPrefix(ctx context.Context, prefix []byte, opts ScanOptions) *Iterator {
	return c.Scan(ctx, prefix, PrefixEnd(prefix), opts)
}

// ScanAll runs the scan to its end and returns every pair.
func (c *Client) ScanAll(ctx context.Context, start, end []byte, opts ScanOptions) ([]KeyValue, error) {
	return c.Scan(ctx, start, end, opts).all()
}

// all drains and closes the iterator.
func (it *Iterator) all() ([]KeyValue, error) {
	defer it.Close()
	var out []KeyValue
	for it.Next() {
		out = append(out, KeyValue{Key: it.Key(), Value: it.Value()})
	}
	return out, it.Err()
}

// receiver is the part of a scan stream the iterator uses.
type receiver interface {
	Recv() (*kvpb.ScanResponse, error)
}

// failedStream is a stream that could not be opened: its Recv returns why,
// so Next handles it like a stream that broke.
type failedStream struct{ err error }

func (f failedStream) Recv() (*kvpb.ScanResponse, error) { return nil, f.err }
