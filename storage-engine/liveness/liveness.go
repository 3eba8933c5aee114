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
//
// A store's records are a fencelog.Log without a head: a head would
// double the renewals' writes, and Collect, which the balancer runs, keeps
// the history to a few dozen records, which a reader lists. A record is
// written as the successor of one read or written (a renewal's held
// record, a Current), so a renewal after a pause long enough for its
// number to have been taken and collected still loses (fencelog.Create).
package liveness

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/bellows-kv/bellows/internal/contract"
	"github.com/bellows-kv/bellows/storage-engine/blob"
	"github.com/bellows-kv/bellows/storage-engine/regionmap/fencelog"
)

const prefix = "liveness/"

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
	// Written is when the record was written, by its writer's clock (a
	// fence's expiry is its predecessor's, earlier): Collect measures
	// the predecessor's age from it.
	Written time.Time `json:"written,omitzero"`

	// entry is the record's object as read or written: the next write on
	// it checks against it.
	entry fencelog.Entry
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
func Object(store string, k uint64) string { return recordLog(nil, store).Key(k) }

func storePrefix(store string) string { return prefix + store + "/" }

// retention of the records: a variable only so that tests run the
// protocol at their pace; every process uses the default (fencelog's
// invariants).
var retention = contract.DefaultLeaseLogRetention

// recordLog is store's lease in b.
func recordLog(b fencelog.Bucket, store string) fencelog.Log {
	return fencelog.Log{Bucket: b, Prefix: storePrefix(store), Retention: retention,
		Written: func(data []byte) (time.Time, error) {
			var r Record
			err := json.Unmarshal(data, &r)
			if r.Written.IsZero() {
				return r.Expiry, err
			}
			return r.Written, err
		}}
}

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
	e, err := recordLog(b, store).Newest(ctx)
	if err != nil {
		return Record{}, fmt.Errorf("liveness: reading store %s's newest record: %w", store, err)
	}
	if e.N == 0 {
		return Record{entry: e}, nil
	}
	return decode(store, e)
}

func read(ctx context.Context, b *blob.Bucket, store string, k uint64) (Record, error) {
	e, err := recordLog(b, store).Read(ctx, k)
	if err != nil {
		return Record{}, fmt.Errorf("liveness: reading %s: %w", Object(store, k), err)
	}
	return decode(store, e)
}

func decode(store string, e fencelog.Entry) (Record, error) {
	var r Record
	if err := json.Unmarshal(e.Data, &r); err != nil {
		return Record{}, fmt.Errorf("liveness: decoding %s: %w", Object(store, e.N), err)
	}
	if r.K != e.N || r.Store != store {
		return Record{}, fmt.Errorf("liveness: %s claims record %d of store %q", Object(store, e.N), r.K, r.Store)
	}
	r.entry = e
	return r, nil
}

// write creates rec, record prev.K+1, create-if-absent, on prev as read or
// written (prev.K 0: none), and returns it as written. An error matching
// blob.ErrExists: the number is taken.
func write(ctx context.Context, b *blob.Bucket, prev, rec Record) (Record, error) {
	rec.Written = time.Now().UTC()
	data, err := json.Marshal(rec)
	if err != nil {
		return Record{}, err
	}
	pe := prev.entry
	if pe.N != prev.K || (pe.Data == nil && prev.K > 0) {
		// Not read here (a caller's copy): compare what is stored by
		// content.
		pe = fencelog.Entry{N: prev.K}
	}
	same := func(stored []byte) bool {
		var r Record
		return json.Unmarshal(stored, &r) == nil && r.K == prev.K && r.Store == prev.Store &&
			r.Incarnation == prev.Incarnation && r.Fenced == prev.Fenced && r.Expiry.Equal(prev.Expiry) && r.Written.Equal(prev.Written)
	}
	e, err := recordLog(b, rec.Store).Create(ctx, pe, data, same)
	if err != nil {
		if errors.Is(err, fencelog.ErrTaken) {
			if !errors.Is(err, blob.ErrExists) {
				err = fmt.Errorf("%w: %w", blob.ErrExists, err) // a stray: as good as taken
			}
			return Record{}, err
		}
		return Record{}, fmt.Errorf("liveness: writing %s: %w", Object(rec.Store, rec.K), err)
	}
	rec.entry = e
	return rec, nil
}

// Stores lists the stores that have liveness records in b: the cluster's,
// and any a scale-down removed, whose records stay until collected.
func Stores(ctx context.Context, b *blob.Bucket) ([]string, error) {
	stores, err := b.Dirs(ctx, prefix)
	if err != nil {
		return nil, fmt.Errorf("liveness: listing the stores with records: %w", err)
	}
	return stores, nil
}

// Collect deletes store's records superseded longer than
// contract.DefaultLeaseLogRetention before now, besides the newest
// contract.DefaultFencingLogKeep (docs/failover.md §7). maxOffset bounds
// the writers' clocks' offsets from this one. The balancer runs it; it is
// safe beside renewals, fences and readers. It returns how many it
// deleted.
func Collect(ctx context.Context, b *blob.Bucket, store string, now time.Time, maxOffset time.Duration) (int, error) {
	if err := checkStore(store); err != nil {
		return 0, err
	}
	n, err := recordLog(b, store).Collect(ctx, now, fencelog.Policy{Keep: contract.DefaultFencingLogKeep, MaxOffset: maxOffset})
	if err != nil {
		return n, fmt.Errorf("liveness: collecting store %s's records: %w", store, err)
	}
	return n, nil
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
	prev := held // the record the next write succeeds
	if joining {
		cur, err := Current(ctx, b, store)
		if err != nil {
			return Record{}, err
		}
		if cur.Fenced && cur.Incarnation == incarnation {
			return Record{}, fenced(store, incarnation, cur)
		}
		prev = cur
	}
	for range 3 {
		next := prev.K + 1
		rec, err := write(ctx, b, prev, Record{K: next, Store: store, Incarnation: incarnation, Expiry: now.Add(term).UTC()})
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
			prev = cur // our own write landed after all
		case joining && cur.Fenced:
			prev = cur // an older incarnation's fence: join above it
		case joining:
			// Another incarnation renewed meanwhile: a process of this
			// store still running while this one starts. The newer one
			// (this) takes over; the other finds itself superseded.
			prev = cur
		default:
			return Record{}, fmt.Errorf("%w: store %s, incarnation %s: superseded by %v", ErrFenced, store, incarnation, cur)
		}
	}
	return Record{}, fmt.Errorf("%w: store %s, incarnation %s, up to record %d", ErrLost, store, incarnation, prev.K+1)
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
	f, err := write(ctx, b, cur, Record{K: cur.K + 1, Store: store, Incarnation: cur.Incarnation, Expiry: cur.Expiry, Fenced: true})
	if err != nil {
		if !errors.Is(err, blob.ErrExists) {
			return false, cur, err
		}
		won, err := read(ctx, b, store, cur.K+1)
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
