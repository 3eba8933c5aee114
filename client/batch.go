package client

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v5"

	kvpb "github.com/bellows-kv/bellows/proto/bellows/kv/v1"
)

// GetResult is one key's answer of a BatchGet.
type GetResult struct {
	Key, Value []byte
	Found      bool
}

// batchGetKeyBytes bounds the keys of one BatchGet call; a region's group
// of keys larger than that goes in several calls.
const batchGetKeyBytes = 4 << 20

// batchGetCalls bounds the BatchGet calls one BatchGet has in flight.
const batchGetCalls = 16

// BatchGet reads the newest values of keys, in their order (repeats
// allowed): the keys are grouped by the region the client's table says
// holds them, and each region's group is read in one call to its owner
// (from one view of that region), the regions' calls concurrently. A call
// that finds the route stale — a region moved, or split so that its group
// spans two regions now — refreshes the table and regroups its keys, until
// ctx ends. Regions are read at different moments: for one snapshot of
// every region, use BatchGetAt (each region's versions at one timestamp)
// or a transaction.
func (c *Client) BatchGet(ctx context.Context, keys [][]byte) ([]GetResult, error) {
	return c.batchGet(ctx, keys, nil)
}

// BatchGetAt is BatchGet of the versions visible at readTS in each region.
func (c *Client) BatchGetAt(ctx context.Context, keys [][]byte, readTS uint64) ([]GetResult, error) {
	return c.batchGet(ctx, keys, &readTS)
}

// getGroup is the keys (by index) of one BatchGet call.
type getGroup struct {
	idx    []int
	owners []string // the region's owners, else the seeds
	region string   // "" when the table has none
}

func (c *Client) batchGet(ctx context.Context, keys [][]byte, readTS *uint64) ([]GetResult, error) {
	out := make([]GetResult, len(keys))
	pending := make([]int, len(keys))
	for i, k := range keys {
		if err := checkKey(k); err != nil {
			return nil, fmt.Errorf("key %d: %w", i, err)
		}
		out[i].Key = k
		pending[i] = i
	}
	b := backoff.NewExponentialBackOff()
	b.InitialInterval, b.MaxInterval = c.opts.RetryInitial, c.opts.RetryMax
	var stale error // the last stale-route answer
	for len(pending) > 0 {
		t := c.table.Load()
		groups := groupKeys(t, c.seeds, keys, pending)
		var mu sync.Mutex
		var next []int
		var failed error
		staleRound := false
		sem := make(chan struct{}, batchGetCalls)
		var wg sync.WaitGroup
		for _, g := range groups {
			sem <- struct{}{}
			wg.Go(func() {
				defer func() { <-sem }()
				req := &kvpb.BatchGetRequest{Keys: make([][]byte, len(g.idx)), ReadTs: readTS}
				for j, i := range g.idx {
					req.Keys[j] = keys[i]
				}
				resp, err := c.batchGetCall(ctx, g, req)
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					if ctx.Err() != nil || !staleRoute(err) {
						if failed == nil {
							failed = err
						}
						return
					}
					stale, staleRound = err, true
					next = append(next, g.idx...)
					return
				}
				if len(resp.Results) == 0 || len(resp.Results) > len(g.idx) {
					if failed == nil {
						failed = fmt.Errorf("bellows client: BatchGet of %d keys answered %d results", len(g.idx), len(resp.Results))
					}
					return
				}
				for j, r := range resp.Results {
					out[g.idx[j]].Value, out[g.idx[j]].Found = r.Value, r.Found
				}
				// An answer holding only the first keys' results: ask
				// again for the rest.
				next = append(next, g.idx[len(resp.Results):]...)
			})
		}
		wg.Wait()
		if failed != nil {
			if stale != nil && ended(ctx, failed) {
				return nil, gaveUp(ctx.Err(), stale)
			}
			return nil, failed
		}
		pending = next
		if staleRound {
			c.refreshAfter(t.gen)
			c.retrying(stale)
			select {
			case <-ctx.Done():
				return nil, gaveUp(ctx.Err(), stale)
			case <-time.After(b.NextBackOff()): // backoff, not synchronisation
			}
		}
	}
	return out, nil
}

// batchGetCall asks the group's owners in turn (or a seed, which
// forwards); the first answer, or the last stale-route error.
func (c *Client) batchGetCall(ctx context.Context, g *getGroup, req *kvpb.BatchGetRequest) (*kvpb.BatchGetResponse, error) {
	var last error
	for _, addr := range g.owners {
		cc, err := c.conn(addr)
		if err != nil {
			return nil, err
		}
		resp, err := kvpb.NewKVClient(cc).BatchGet(ctx, req)
		if err == nil || ctx.Err() != nil || !staleRoute(err) {
			return resp, err
		}
		last = &answerError{region: g.region, addr: addr, err: err}
	}
	return nil, last
}

// groupKeys groups the pending keys by the region t says holds them, in
// calls of at most batchGetKeyBytes of keys; a key of no known region (or
// of one without a known owner) goes alone, through the seeds.
func groupKeys(t *table, seeds []string, keys [][]byte, pending []int) []*getGroup {
	var groups []*getGroup
	open := map[string]*getGroup{} // by region name: its group being filled
	size := map[*getGroup]int{}
	for _, i := range pending {
		r, ok := t.lookup(keys[i])
		if !ok || len(r.Owners) == 0 {
			groups = append(groups, &getGroup{idx: []int{i}, owners: seeds, region: r.Name})
			continue
		}
		g := open[r.Name]
		if g == nil || size[g]+len(keys[i]) > batchGetKeyBytes {
			g = &getGroup{owners: r.Owners, region: r.Name}
			open[r.Name] = g
			groups = append(groups, g)
		}
		g.idx = append(g.idx, i)
		size[g] += len(keys[i])
	}
	return groups
}

// DeleteRangeResult is what a DeleteRange did: how many keys it deleted,
// and each atomic commit's region and timestamp, in key order (none when
// the range held no live key).
type DeleteRangeResult struct {
	Deleted int
	Commits []WriteResult
}

// DeleteRange deletes every live key of [start, end) (empty start: from the
// first key; empty end: to the last). Each region's part of the range is
// deleted atomically — one batch of tombstones at one commit timestamp —
// as long as its live keys fit in one batch (MaxBatchBytes of keys); a
// larger part takes several batches, and a range over several regions
// one or more per region, in key order: the whole range is NOT deleted
// atomically (for that, delete the keys in a transaction). A key written
// into the range while DeleteRange runs may survive it. When a call fails,
// the result says what the calls before it deleted; calling DeleteRange
// again finishes the work.
func (c *Client) DeleteRange(ctx context.Context, start, end []byte) (DeleteRangeResult, error) {
	var res DeleteRangeResult
	if err := checkRange(start, end); err != nil {
		return res, err
	}
	if len(start) > MaxKeyBytes || len(end) > MaxKeyBytes+1 {
		return res, fmt.Errorf("%w: a range bound of %d bytes, the limit is %s (MaxKeyBytes)", ErrKeyTooLarge, max(len(start), len(end)), limit(MaxKeyBytes))
	}
	from := bytes.Clone(start)
	for {
		if len(end) > 0 && bytes.Compare(from, end) >= 0 {
			return res, nil
		}
		req := &kvpb.DeleteRangeRequest{Start: from, End: end}
		// Each call is one logical write: one idempotency key for all of
		// its attempts.
		resp, err := do(withRequestID(ctx), c, from, func(ctx context.Context, kv kvpb.KVClient) (*kvpb.DeleteRangeResponse, error) {
			return kv.DeleteRange(ctx, req)
		})
		if err != nil {
			return res, err
		}
		res.Deleted += int(resp.Deleted)
		if resp.CommitTs != 0 && resp.Deleted > 0 {
			res.Commits = append(res.Commits, WriteResult{Region: resp.Region, CommitTS: resp.CommitTs})
		}
		if len(resp.Resume) == 0 {
			return res, nil
		}
		if bytes.Compare(resp.Resume, from) < 0 || (bytes.Equal(resp.Resume, from) && resp.Deleted == 0 && resp.CommitTs == 0) {
			return res, fmt.Errorf("bellows client: DeleteRange from %q: the store answered resume %q, which makes no progress", from, resp.Resume)
		}
		from = resp.Resume
	}
}

// DeletePrefix deletes every live key that begins with prefix (empty: every
// key): DeleteRange of [prefix, PrefixEnd(prefix)), atomic per region and
// batch, not across them.
func (c *Client) DeletePrefix(ctx context.Context, prefix []byte) (DeleteRangeResult, error) {
	return c.DeleteRange(ctx, prefix, PrefixEnd(prefix))
}
