package liveness

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bellows-kv/bellows/internal/contract"
	"github.com/bellows-kv/bellows/storage-engine/blob"
)

// Keeper renews one store incarnation's liveness lease and answers whether
// it may serve. A failed renewal leaves the last deadline in force, so a
// store cut off from the bucket stops serving by itself when it passes;
// a renewal that finds the incarnation fenced ends serving at once and
// closes Fenced.
type Keeper struct {
	b                  *blob.Bucket
	store, incarnation string
	term, every        time.Duration
	maxOffset          time.Duration
	clock              func() time.Time

	// until is the serving deadline in Unix nanoseconds (0: none);
	// last, the time of the last successful renewal (0: none).
	until, last atomic.Int64

	mu   sync.Mutex // serializes renewals; guards held
	held Record

	fenced     chan struct{}
	fencedOnce sync.Once
}

// NewKeeper is a Keeper for incarnation of store. A zero term, renewEvery
// or clock takes contract.DefaultLivenessTerm,
// contract.DefaultLivenessRenewInterval or time.Now; maxOffset is the
// clocks' bound (contract.DefaultMaxClockOffset by default, given by the
// caller, since 0 is a valid setting).
func NewKeeper(b *blob.Bucket, store, incarnation string, term, renewEvery, maxOffset time.Duration, clock func() time.Time) *Keeper {
	if term <= 0 {
		term = contract.DefaultLivenessTerm
	}
	if renewEvery <= 0 {
		renewEvery = contract.DefaultLivenessRenewInterval
	}
	if clock == nil {
		clock = time.Now
	}
	return &Keeper{b: b, store: store, incarnation: incarnation, term: term, every: renewEvery,
		maxOffset: maxOffset, clock: clock, fenced: make(chan struct{})}
}

// Store is the store whose lease this keeper renews.
func (k *Keeper) Store() string { return k.store }

// Renew makes one renewal: the clock is read before the write, so the
// expiry it records is never later than the term after the write. On
// success the serving deadline moves to the new record's expiry −
// maxOffset; on ErrFenced it drops to none and Fenced closes; on any other
// error it stays where it was.
func (k *Keeper) Renew(ctx context.Context) (Record, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.isFenced() {
		return Record{}, fenced(k.store, k.incarnation, k.held)
	}
	now := k.clock()
	rec, err := Renew(ctx, k.b, k.store, k.incarnation, k.held, now, k.term)
	if errors.Is(err, ErrFenced) {
		k.until.Store(0)
		k.fencedOnce.Do(func() { close(k.fenced) })
		return Record{}, err
	}
	if err != nil {
		return Record{}, err
	}
	k.held = rec
	k.until.Store(ServingUntil(rec, k.maxOffset).UnixNano())
	k.last.Store(now.UnixNano())
	return rec, nil
}

// Run renews at once and then every renew interval until ctx ends
// (ctx.Err()) or the incarnation is fenced (an error matching ErrFenced).
// Failed renewals are retried at the next tick; onError, if not nil, is
// told of each (to log it).
func (k *Keeper) Run(ctx context.Context, onError func(error)) error {
	t := time.NewTicker(k.every)
	defer t.Stop()
	for {
		if _, err := k.Renew(ctx); err != nil {
			if errors.Is(err, ErrFenced) {
				return err
			}
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if onError != nil {
				onError(err)
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

// Serving reports whether the store may serve at now, by its clock:
// now is before its newest record's expiry − maxOffset. Lock-free: one
// atomic load, for every request.
func (k *Keeper) Serving(now time.Time) bool {
	u := k.until.Load()
	return u != 0 && now.UnixNano() < u
}

// ServingUntil is the current serving deadline (the zero time: none).
func (k *Keeper) ServingUntil() time.Time {
	if u := k.until.Load(); u != 0 {
		return time.Unix(0, u)
	}
	return time.Time{}
}

// LastRenewal is when the last successful renewal read the clock (the
// zero time: none yet): now minus it is the renewal lag.
func (k *Keeper) LastRenewal() time.Time {
	if l := k.last.Load(); l != 0 {
		return time.Unix(0, l)
	}
	return time.Time{}
}

// Held is the newest record this incarnation wrote.
func (k *Keeper) Held() Record {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.held
}

// Fenced is closed once a renewal found this incarnation fenced: the store
// closes its regions without releasing them and starts over as a new
// incarnation.
func (k *Keeper) Fenced() <-chan struct{} { return k.fenced }

func (k *Keeper) isFenced() bool {
	select {
	case <-k.fenced:
		return true
	default:
		return false
	}
}
