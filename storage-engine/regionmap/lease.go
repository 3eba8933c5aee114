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

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/bellows-kv/bellows/storage-engine/blob"
)

const leasePrefix = "regionmap-lease/"

// leaseHistory is how many lease objects are kept behind the newest: a
// reader lists them all, so the history must stay short.
const leaseHistory = 8

// Lease is one term of the balancer lease.
type Lease struct {
	N      uint64    `json:"n"`
	Holder string    `json:"holder"`
	Expiry time.Time `json:"expiry"`
}

// LeaseObject is the bucket key of lease term n.
func LeaseObject(n uint64) string { return fmt.Sprintf("%s%020d", leasePrefix, n) }

// CurrentLease is the newest lease term, N 0 when none was ever taken.
func CurrentLease(ctx context.Context, b *blob.Bucket) (Lease, error) {
	n, err := newestLease(ctx, b)
	if err != nil || n == 0 {
		return Lease{}, err
	}
	data, err := b.ReadAll(ctx, LeaseObject(n))
	if err != nil {
		return Lease{}, fmt.Errorf("regionmap: reading the balancer lease %d: %w", n, err)
	}
	var l Lease
	if err := json.Unmarshal(data, &l); err != nil {
		return Lease{}, fmt.Errorf("regionmap: decoding %s: %w", LeaseObject(n), err)
	}
	if l.N != n {
		return Lease{}, fmt.Errorf("regionmap: %s claims term %d", LeaseObject(n), l.N)
	}
	return l, nil
}

func newestLease(ctx context.Context, b *blob.Bucket) (uint64, error) {
	objs, err := b.List(ctx, leasePrefix)
	if err != nil {
		return 0, fmt.Errorf("regionmap: listing the balancer lease: %w", err)
	}
	var newest uint64
	for _, o := range objs {
		if n, err := strconv.ParseUint(strings.TrimPrefix(o.Key, leasePrefix), 10, 64); err == nil && n > newest {
			newest = n
		}
	}
	return newest, nil
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
	next := Lease{N: cur.N + 1, Holder: holder, Expiry: now.Add(d)}
	data, err := json.Marshal(next)
	if err != nil {
		return Lease{}, false, err
	}
	if err := b.WriteAll(ctx, LeaseObject(next.N), data, true); err != nil {
		if errors.Is(err, blob.ErrExists) {
			won, err := CurrentLease(ctx, b)
			return won, won.Holder == holder && won.Expiry.After(now), err
		}
		return Lease{}, false, fmt.Errorf("regionmap: writing the balancer lease %d: %w", next.N, err)
	}
	if next.N > leaseHistory {
		// Best effort: a term left behind is only listed, never read.
		for n := next.N - leaseHistory; n > 0; n-- {
			if err := b.Delete(ctx, LeaseObject(n)); err != nil {
				break
			}
		}
	}
	return next, true, nil
}
