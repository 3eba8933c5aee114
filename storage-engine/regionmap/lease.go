package regionmap

// The balancer lease: which store plans moves and merges (docs/regions.md
// §1). It is a numbered object history regionmap-lease/<n>, written
// create-if-absent like the map itself: a holder renews by committing n+1
// before its expiry; another store may commit n+1 only once the expiry
// plus the clocks' maximum offset has passed by its own clock. Of two
// contenders for one number one wins; the other is told who holds it.
//
// The lease only keeps two balancers from planning at once. Safety does
// not rest on it: every map change is the map's own create-if-absent
// commit, so a holder that lost its lease without knowing (a long pause)
// is fenced by any commit made meanwhile and plans again on the new map.
//
// The terms are a fencelog.Log without a head: a term is written every
// second or so, and CollectLeaseTerms keeps the history to a few dozen
// objects, which a reader lists.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/bellows-kv/bellows/internal/contract"
	"github.com/bellows-kv/bellows/storage-engine/blob"
	"github.com/bellows-kv/bellows/storage-engine/regionmap/fencelog"
)

const leasePrefix = "regionmap-lease/"

// Lease is one term of the balancer lease.
type Lease struct {
	N      uint64    `json:"n"`
	Holder string    `json:"holder"`
	Expiry time.Time `json:"expiry"`
	// Written is when the term was written, by its writer's clock (terms
	// written before it was recorded: their expiry, which is later).
	Written time.Time `json:"written,omitzero"`

	entry fencelog.Entry
}

// LeaseObject is the bucket key of lease term n.
func LeaseObject(n uint64) string { return leaseLog(nil).Key(n) }

func leaseLog(b fencelog.Bucket) fencelog.Log {
	return fencelog.Log{Bucket: b, Prefix: leasePrefix, Retention: leaseRetention,
		Written: func(data []byte) (time.Time, error) {
			var l Lease
			err := json.Unmarshal(data, &l)
			if l.Written.IsZero() {
				return l.Expiry, err
			}
			return l.Written, err
		}}
}

// CurrentLease is the newest lease term, N 0 when none was ever taken.
func CurrentLease(ctx context.Context, b *blob.Bucket) (Lease, error) {
	e, err := leaseLog(b).Newest(ctx)
	if err != nil {
		return Lease{}, fmt.Errorf("regionmap: reading the balancer lease: %w", err)
	}
	if e.N == 0 {
		return Lease{entry: e}, nil
	}
	var l Lease
	if err := json.Unmarshal(e.Data, &l); err != nil {
		return Lease{}, fmt.Errorf("regionmap: decoding %s: %w", LeaseObject(e.N), err)
	}
	if l.N != e.N {
		return Lease{}, fmt.Errorf("regionmap: %s claims term %d", LeaseObject(e.N), l.N)
	}
	l.entry = e
	return l, nil
}

// AcquireLease takes or renews the balancer lease for holder at time now,
// for term length d. It returns the lease and true when holder holds it
// until the returned expiry; the current lease and false when another
// store does (its term has not run out, or it won the race for the next
// term). maxOffset is the bound on clock offsets between stores: a lease
// is taken from another holder only after expiry + maxOffset, so that
// holder, whose clock may be behind, has stopped acting by then.
func AcquireLease(ctx context.Context, b *blob.Bucket, holder string, now time.Time, d, maxOffset time.Duration) (Lease, bool, error) {
	cur, err := CurrentLease(ctx, b)
	if err != nil {
		return Lease{}, false, err
	}
	if cur.N > 0 && cur.Holder != holder && !now.After(cur.Expiry.Add(maxOffset)) {
		return cur, false, nil
	}
	next := Lease{N: cur.N + 1, Holder: holder, Expiry: now.Add(d), Written: time.Now().UTC()}
	data, err := json.Marshal(next)
	if err != nil {
		return Lease{}, false, err
	}
	e, err := leaseLog(b).Create(ctx, cur.entry, data, nil)
	if errors.Is(err, fencelog.ErrTaken) {
		won, err := CurrentLease(ctx, b)
		return won, won.Holder == holder && won.Expiry.After(now), err
	}
	if err != nil {
		return Lease{}, false, fmt.Errorf("regionmap: writing the balancer lease %d: %w", next.N, err)
	}
	next.entry = e
	return next, true, nil
}

// CollectLeaseTerms deletes the lease's terms superseded longer than
// contract.DefaultLeaseLogRetention before now, besides the newest
// contract.DefaultFencingLogKeep (docs/failover.md §7). maxOffset bounds
// the holders' clocks' offsets from this one. It returns how many it
// deleted.
func CollectLeaseTerms(ctx context.Context, b *blob.Bucket, now time.Time, maxOffset time.Duration) (int, error) {
	n, err := leaseLog(b).Collect(ctx, now, fencelog.Policy{Keep: contract.DefaultFencingLogKeep, MaxOffset: maxOffset})
	if err != nil {
		return n, fmt.Errorf("regionmap: collecting the balancer lease's terms: %w", err)
	}
	return n, nil
}
