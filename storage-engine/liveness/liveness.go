// Package liveness is the stores' liveness leases in the bucket
// (docs/failover.md §3): each store renews a numbered object history
// liveness/<store>/<k>, written create-if-absent, every renew interval with
// an expiry one term ahead; the balancer declares a store dead by writing
// the next record with fenced set, once the newest record's expiry plus the
// clocks' maximum offset has passed by its clock. Of a renewal and a fence
// racing for one number exactly one is written, so a store is either alive
// or fenced, never both.
//
// A store serves only while now < expiry − maxOffset of its newest record
// (ServingUntil). A fenced incarnation can never renew again; a new
// incarnation of the store (a restarted process) joins above the fence.
//
// The functions here are the protocol, one bucket round at a time; Keeper
// runs a store's renewals and answers, lock-free, whether it may serve.
package liveness

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

const prefix = "liveness/"

// history is how many records are kept behind the newest: Current lists
// them all, so the history must stay short.
const history = 8

var (
	// ErrFenced: this incarnation of the store has been declared dead (a
	// fence names it) or superseded (a newer incarnation of the same store
	// holds the lease). It must stop serving for good; the process starts
	// over as a new incarnation.
	ErrFenced = errors.New("liveness: fenced")
	// ErrLost: a renewal kept losing the race for the next record to
	// writes that do not end this incarnation (a fence of an older
	// incarnation, a newer record of its own). Retry.
	ErrLost = errors.New("liveness: lost the race for the next record")
)

// Record is record K of a store's liveness lease.
type Record struct {
	K           uint64    `json:"k"`
	Store       string    `json:"store"`
	Incarnation string    `json:"incarnation"`
	Expiry      time.Time `json:"expiry"`
	// Fenced: the balancer declared Incarnation dead; it never renews
	// again.
	Fenced bool `json:"fenced"`
}

func (r Record) String() string {
	if r.K == 0 {
		return "no record"
	}
	s := fmt.Sprintf("%s (incarnation %s, expiry %s", Object(r.Store, r.K), r.Incarnation, r.Expiry.Format(time.RFC3339Nano))
	if r.Fenced {
		s += ", fenced"
	}
	return s + ")"
}

// Object is the bucket key of record k of store's lease.
func Object(store string, k uint64) string { return fmt.Sprintf("%s%s/%020d", prefix, store, k) }

func storePrefix(store string) string { return prefix + store + "/" }

// ServingUntil is the serving rule: the holder of rec may serve while its
// clock reads before expiry − maxOffset. A fenced record, or none, allows
// nothing (the zero time).
func ServingUntil(rec Record, maxOffset time.Duration) time.Time {
	if rec.K == 0 || rec.Fenced {
		return time.Time{}
	}
	return rec.Expiry.Add(-maxOffset)
}

func checkStore(store string) error {
	if store == "" || strings.ContainsAny(store, "/") {
		return fmt.Errorf("liveness: store id %q: want a non-empty name without '/'", store)
	}
	return nil
}

// Current is the newest record of store's lease, K 0 when it never had one.
func Current(ctx context.Context, b *blob.Bucket, store string) (Record, error) {
	if err := checkStore(store); err != nil {
		return Record{}, err
	}
	p := storePrefix(store)
	objs, err := b.List(ctx, p)
	if err != nil {
		return Record{}, fmt.Errorf("liveness: listing %s: %w", p, err)
	}
	var newest uint64
	for _, o := range objs {
		if k, err := strconv.ParseUint(strings.TrimPrefix(o.Key, p), 10, 64); err == nil && k > newest {
			newest = k
		}
	}
	if newest == 0 {
		return Record{}, nil
	}
	return read(ctx, b, store, newest)
}

func read(ctx context.Context, b *blob.Bucket, store string, k uint64) (Record, error) {
	data, err := b.ReadAll(ctx, Object(store, k))
	if err != nil {
		return Record{}, fmt.Errorf("liveness: reading %s: %w", Object(store, k), err)
	}
	var r Record
	if err := json.Unmarshal(data, &r); err != nil {
		return Record{}, fmt.Errorf("liveness: decoding %s: %w", Object(store, k), err)
	}
	if r.K != k || r.Store != store {
		return Record{}, fmt.Errorf("liveness: %s claims record %d of store %q", Object(store, k), r.K, r.Store)
	}
	return r, nil
}

// write creates rec create-if-absent (blob.ErrExists when its number is
// taken) and, once written, deletes the record history places behind it,
// best effort: one delete a write keeps the listing short.
func write(ctx context.Context, b *blob.Bucket, rec Record) error {
	data, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	if err := b.WriteAll(ctx, Object(rec.Store, rec.K), data, true); err != nil {
		if errors.Is(err, blob.ErrExists) {
			return err
		}
		return fmt.Errorf("liveness: writing %s: %w", Object(rec.Store, rec.K), err)
	}
	if rec.K > history {
		_ = b.Delete(ctx, Object(rec.Store, rec.K-history))
	}
	return nil
}

// Renew writes the next record of store's lease for incarnation at now,
// expiring at now + term, and returns it. held is the newest record this
// incarnation wrote (the one Renew last returned), or the zero Record
// when it holds none yet: a process start, which joins.
//
// Joining writes above the newest record, whoever wrote it, unless that
// record fences this very incarnation. Renewing writes held.K+1 (one
// PUT, no read); when the number is taken, the newest record decides:
// a fence of this incarnation, or any record of another incarnation
// written after held (this one was superseded), is ErrFenced, for good; a
// record of this incarnation (an earlier write that failed ambiguously
// yet landed) is renewed above. ErrLost after a few such rounds.
func Renew(ctx context.Context, b *blob.Bucket, store, incarnation string, held Record, now time.Time, term time.Duration) (Record, error) {
	if err := checkStore(store); err != nil {
		return Record{}, err
	}
	if incarnation == "" {
		return Record{}, errors.New("liveness: an empty incarnation")
	}
	if held.K > 0 && (held.Store != store || held.Incarnation != incarnation) {
		return Record{}, fmt.Errorf("liveness: renewing store %s as incarnation %s with another's record %v", store, incarnation, held)
	}
	joining := held.K == 0
	next := held.K + 1
	if joining {
		cur, err := Current(ctx, b, store)
		if err != nil {
			return Record{}, err
		}
		if cur.Fenced && cur.Incarnation == incarnation {
			return Record{}, fenced(store, incarnation, cur)
		}
		next = cur.K + 1
	}
	for range 3 {
		rec := Record{K: next, Store: store, Incarnation: incarnation, Expiry: now.Add(term).UTC()}
		err := write(ctx, b, rec)
		if err == nil {
			return rec, nil
		}
		if !errors.Is(err, blob.ErrExists) {
			return Record{}, err
		}
		cur, err := Current(ctx, b, store)
		if err != nil {
			return Record{}, err
		}
		switch {
		case cur.K < next:
			return Record{}, fmt.Errorf("liveness: %s exists but the newest record listed is %v", Object(store, next), cur)
		case cur.Incarnation == incarnation && cur.Fenced:
			return Record{}, fenced(store, incarnation, cur)
		case cur.Incarnation == incarnation:
			next = cur.K + 1 // our own write landed after all
		case joining && cur.Fenced:
			next = cur.K + 1 // an older incarnation's fence: join above it
		case joining:
			// Another incarnation renewed meanwhile: a process of this
			// store still running while this one starts. The newer one
			// (this) takes over; the other finds itself superseded.
			next = cur.K + 1
		default:
			return Record{}, fmt.Errorf("%w: store %s, incarnation %s: superseded by %v", ErrFenced, store, incarnation, cur)
		}
	}
	return Record{}, fmt.Errorf("%w: store %s, incarnation %s, up to record %d", ErrLost, store, incarnation, next)
}

func fenced(store, incarnation string, rec Record) error {
	return fmt.Errorf("%w: store %s, incarnation %s: declared dead by %v", ErrFenced, store, incarnation, rec)
}

// Fence declares store dead at now, by the caller's clock, if the newest
// record's expiry plus maxOffset has passed: it writes the next record,
// fenced, naming the same incarnation, create-if-absent. It returns true
// and the fence when the store is fenced (by this call or an earlier one);
// false and the newest record when the store holds its lease: the expiry
// has not passed, or its renewal won the race for the number. A store
// that never had a record is not fenced (there is nothing to fence; it
// serves nothing).
func Fence(ctx context.Context, b *blob.Bucket, store string, now time.Time, maxOffset time.Duration) (bool, Record, error) {
	cur, err := Current(ctx, b, store)
	if err != nil || cur.K == 0 {
		return false, cur, err
	}
	if cur.Fenced {
		return true, cur, nil
	}
	if !now.After(cur.Expiry.Add(maxOffset)) {
		return false, cur, nil
	}
	f := Record{K: cur.K + 1, Store: store, Incarnation: cur.Incarnation, Expiry: cur.Expiry, Fenced: true}
	if err := write(ctx, b, f); err != nil {
		if !errors.Is(err, blob.ErrExists) {
			return false, cur, err
		}
		won, err := read(ctx, b, store, f.K)
		if err != nil {
			return false, cur, err
		}
		// Another balancer's fence of the same record, or the renewal.
		return won.Fenced && won.Incarnation == cur.Incarnation, won, nil
	}
	return true, f, nil
}

// Dead reports whether incarnation of store can serve no more: the newest
// record of its lease fences it, or belongs to a newer incarnation (which
// joined only once this one's lease had run out: AwaitPredecessor). A
// region its manifest says this incarnation claimed may then be taken over
// without waiting for a release (docs/failover.md §4).
func Dead(ctx context.Context, b *blob.Bucket, store, incarnation string) (bool, error) {
	cur, err := Current(ctx, b, store)
	if err != nil || cur.K == 0 {
		return false, err
	}
	return cur.Incarnation != incarnation || cur.Fenced, nil
}

// AwaitPredecessor waits, before a new incarnation of store first renews,
// until the newest record's holder cannot serve any more: its expiry plus
// maxOffset has passed by clock, or it is fenced, or there is none. A
// process restarted on another node while its predecessor still runs (cut
// off, paused) so never serves beside it, and Dead may count a superseded
// incarnation as gone. It returns the record it waited for.
func AwaitPredecessor(ctx context.Context, b *blob.Bucket, store, incarnation string, maxOffset time.Duration, clock func() time.Time) (Record, error) {
	if clock == nil {
		clock = time.Now
	}
	cur, err := Current(ctx, b, store)
	if err != nil || cur.K == 0 || cur.Fenced || cur.Incarnation == incarnation {
		return cur, err
	}
	wait := cur.Expiry.Add(maxOffset).Sub(clock())
	if wait <= 0 {
		return cur, nil
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return cur, ctx.Err()
	case <-t.C:
		return cur, nil
	}
}
