// Package fencelog is a numbered history of objects in the bucket,
// <prefix><n> with n ≥ 1 in 20 digits, each written create-if-absent as
// the successor of the object its writer read: the region map's epochs,
// the balancer lease's terms, each store's liveness records. Of two
// writers holding object n, one creates n+1 and the other loses. Collect
// deletes what is old, so the history stays bounded
// (docs/failover.md §7).
//
// Finding the newest without listing the history. A log with a head
// (Log.Head: the region map, which keeps an hour of epochs and every
// epoch from the oldest backup's on) is read from <prefix>head, the number
// of a recent object that each create and each collection writes, or
// <prefix>floor if that is higher: existence checks forward from there
// (n+1, n+3, n+7, … then a bisection) find the newest in a few requests,
// however long the history. Why not a listing from a start key: gocloud's
// blob lists by prefix only (S3's StartAfter and GCS's StartOffset are
// per driver, and a file bucket reads the whole directory anyway). The
// head is only a hint: a missing one, or a number collected under a
// reader, sends the reader to a listing, and nothing a writer decides
// rests on it. A log without a head (the leases, renewed every second or
// so: a head would double their writes) is listed; collection keeps those
// to a few dozen objects.
//
// Invariants:
//   - Object n+1 is created only by a writer that read object n, or found
//     the log empty (n = 0), and that records in it when it was written
//     (Log.Written), by a clock within the clocks' maximum offset of the
//     others.
//   - Collect deletes in ascending order from the lowest object up, never
//     one of the newest Policy.Keep objects nor one its KeepFrom keeps,
//     and object k only once object k+1 was written more than Retention
//     ago (by the collector's clock, less twice the maximum offset). So
//     what is left is the contiguous range from the floor to the newest,
//     besides strays (below).
//   - The floor object exists from before the first deletion on and is
//     never deleted; its number is at or below every object left but
//     strays.
//   - Retention is one constant per log, the same in every process.
//
// Why create-if-absent still fences with deletion: a writer whose view is
// stale may create n+1 in a number collection freed, a stray, which a
// plain create-if-absent log would have refused. Create tells the two
// apart. If its view of n is less than Retention/2 old when its create
// returns, n+1 cannot have been created and collected since (a first n+1
// would be created after that view, and collected at least Retention
// after its successor's write), so the create is the first at n+1. An
// older view is checked after the create: object n still holding what the
// writer read means n was not collected, so neither was n+1 (ascending
// order), and the create was the first; otherwise the create is a stray,
// deleted and refused as taken, unless the writer itself took Retention/2
// or longer between its create and the check: its own n+1 may then have
// been built on and aged past the retention, so n went lawfully, and it
// cannot tell (ErrUnverified: not written, as far as it may act on). A
// stray can outlive its writer's crash; it is below the floor, where a
// reader, who starts at the floor or the head above it, does not look,
// and a listing's maximum never is.
package fencelog

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/bellows-kv/bellows/storage-engine/blob"
)

// Bucket is what a log needs of the bucket; *blob.Bucket has it.
type Bucket interface {
	ReadAll(ctx context.Context, key string) ([]byte, error)
	WriteAll(ctx context.Context, key string, data []byte, ifNotExist bool) error
	Exists(ctx context.Context, key string) (bool, error)
	Delete(ctx context.Context, key string) error
	List(ctx context.Context, prefix string) ([]blob.ObjectInfo, error)
}

var (
	// ErrTaken: another writer created the number first; read the log
	// again.
	ErrTaken = errors.New("fencelog: the number is taken")
	// ErrUnverified: the object was created, but whether it was the
	// number's first cannot be told: the writer paused for half the
	// retention or more. Act as if it was not written; read the log again.
	ErrUnverified = errors.New("fencelog: created, but whether it was the number's first object cannot be told")
)

// Log is one numbered history.
type Log struct {
	Bucket Bucket
	// Prefix holds the log's objects, ending in "/".
	Prefix string
	// Head: creates and collections keep <Prefix>head, and readers start
	// from it; false: readers list the log.
	Head bool
	// Retention is how long an object stays after its successor was
	// written (at least; and the newest few stay whatever their age).
	Retention time.Duration
	// Written is when an object's writer wrote it, by its clock, from its
	// bytes (the zero time: long ago).
	Written func(data []byte) (time.Time, error)
}

// Entry is an object of the log as its reader or writer has it.
type Entry struct {
	N    uint64
	Data []byte
	// Seen is a time by which no object above N had been created: the
	// start of the read that found N newest, or of N's create. The zero
	// time: not known, and a create on it checks.
	Seen time.Time
}

// Key is the bucket key of object n.
func (l Log) Key(n uint64) string { return fmt.Sprintf("%s%020d", l.Prefix, n) }

func (l Log) headKey() string  { return l.Prefix + "head" }
func (l Log) floorKey() string { return l.Prefix + "floor" }

// since is how long ago t was by the monotonic clock and by the wall
// clock, whichever says longer: a suspended machine's monotonic clock
// stands still, a stepped wall clock may go back.
func since(t time.Time) time.Duration {
	if t.IsZero() {
		return 1<<63 - 1
	}
	return max(time.Since(t), time.Now().Round(0).Sub(t.Round(0)))
}

// fresh reports whether a view taken at seen may still be acted on
// without a check: see the package comment.
func (l Log) fresh(seen time.Time) bool { return since(seen) < l.Retention/2 }

// Newest reads the log's newest object; N 0: the log is empty. An object
// collected between finding and reading it (the reader paused longer than
// the retention) sends the reader round again, the last time by a listing.
func (l Log) Newest(ctx context.Context) (Entry, error) {
	const attempts = 3
	for attempt := 1; ; attempt++ {
		seen := time.Now()
		n, err := l.newest(ctx, attempt < attempts)
		if err != nil || n == 0 {
			return Entry{Seen: seen}, err
		}
		data, err := l.Bucket.ReadAll(ctx, l.Key(n))
		if errors.Is(err, blob.ErrNotFound) && attempt < attempts {
			continue
		}
		if err != nil {
			return Entry{}, err
		}
		return Entry{N: n, Data: data, Seen: seen}, nil
	}
}

// Read reads object n (blob.ErrNotFound: none, or collected). Its Seen is
// unknown: n need not be the newest.
func (l Log) Read(ctx context.Context, n uint64) (Entry, error) {
	data, err := l.Bucket.ReadAll(ctx, l.Key(n))
	if err != nil {
		return Entry{}, err
	}
	return Entry{N: n, Data: data}, nil
}

// Exists reports whether object n exists.
func (l Log) Exists(ctx context.Context, n uint64) (bool, error) {
	return l.Bucket.Exists(ctx, l.Key(n))
}

// newest is the number of the newest object, from the head when useHead
// and the log keeps one, else by a listing.
func (l Log) newest(ctx context.Context, useHead bool) (uint64, error) {
	if !l.Head || !useHead {
		return l.listed(ctx, false)
	}
	head, err := l.number(ctx, l.headKey())
	if err != nil {
		return 0, err
	}
	floor, err := l.number(ctx, l.floorKey())
	if err != nil {
		return 0, err
	}
	if start := max(head, floor); start > 0 {
		return l.probe(ctx, start)
	}
	return l.listed(ctx, false)
}

// probe finds the newest object from start, taken to exist (the read of
// the answer checks): above the floor the objects are contiguous, so the
// first missing number past a present one bounds the newest.
func (l Log) probe(ctx context.Context, start uint64) (uint64, error) {
	present, step := start, uint64(1)
	var absent uint64
	for {
		ok, err := l.Exists(ctx, present+step)
		if err != nil {
			return 0, err
		}
		if !ok {
			absent = present + step
			break
		}
		present += step
		step *= 2
	}
	for absent-present > 1 {
		mid := present + (absent-present)/2
		ok, err := l.Exists(ctx, mid)
		if err != nil {
			return 0, err
		}
		if ok {
			present = mid
		} else {
			absent = mid
		}
	}
	return present, nil
}

// listed is the highest (or, lowest, the lowest) number a listing of the
// log shows; 0: none.
func (l Log) listed(ctx context.Context, lowest bool) (uint64, error) {
	objs, err := l.Bucket.List(ctx, l.Prefix)
	if err != nil {
		return 0, fmt.Errorf("listing %s: %w", l.Prefix, err)
	}
	var found uint64
	for _, o := range objs {
		n, err := strconv.ParseUint(strings.TrimPrefix(o.Key, l.Prefix), 10, 64)
		if err != nil || n == 0 {
			continue // the head, the floor
		}
		if found == 0 || (lowest && n < found) || (!lowest && n > found) {
			found = n
		}
	}
	return found, nil
}

// number reads the number a head or floor object holds; 0: none.
func (l Log) number(ctx context.Context, key string) (uint64, error) {
	data, err := l.Bucket.ReadAll(ctx, key)
	if errors.Is(err, blob.ErrNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	n, err := strconv.ParseUint(strings.TrimSpace(string(data)), 10, 64)
	if err != nil {
		return 0, nil // a hint that does not parse is no hint
	}
	return n, nil
}

func (l Log) writeNumber(ctx context.Context, key string, n uint64) error {
	return l.Bucket.WriteAll(ctx, key, []byte(strconv.FormatUint(n, 10)+"\n"), false)
}

// Create writes data as object prev.N+1, create-if-absent, and returns it.
// ErrTaken: another writer has that number; ErrUnverified: see the
// package comment. same tells whether the bytes now stored as prev.N are
// what the writer read (nil: prev.Data, byte for byte); it is asked only
// when prev's view is not fresh.
func (l Log) Create(ctx context.Context, prev Entry, data []byte, same func(stored []byte) bool) (Entry, error) {
	n := prev.N + 1
	start := time.Now()
	if err := l.Bucket.WriteAll(ctx, l.Key(n), data, true); err != nil {
		if errors.Is(err, blob.ErrExists) {
			return Entry{}, fmt.Errorf("%w: %w", ErrTaken, err)
		}
		return Entry{}, err
	}
	mine := Entry{N: n, Data: data, Seen: start}
	if !l.fresh(prev.Seen) {
		first, err := l.first(ctx, prev, same)
		switch {
		case err != nil:
			return Entry{}, fmt.Errorf("%w: %s: checking object %d: %v", ErrUnverified, l.Key(n), prev.N, err)
		case !first && l.fresh(start):
			// A stray in a number collection freed: ours to remove.
			_ = l.Bucket.Delete(ctx, l.Key(n))
			return Entry{}, fmt.Errorf("%w: %s was created and collected before this writer's stale view of object %d", ErrTaken, l.Key(n), prev.N)
		case !first:
			return Entry{}, fmt.Errorf("%w: %s (%v between its write and the check)", ErrUnverified, l.Key(n), since(start).Round(time.Second))
		}
	}
	if l.Head && l.fresh(start) {
		// Best effort: a stale or missing head costs readers requests,
		// never a wrong answer.
		_ = l.writeNumber(ctx, l.headKey(), n)
	}
	return mine, nil
}

// first reports whether a create of prev.N+1 that succeeded was the
// number's first: prev.N still holds what the writer read (for prev.N 0:
// nothing was ever collected).
func (l Log) first(ctx context.Context, prev Entry, same func([]byte) bool) (bool, error) {
	if prev.N == 0 {
		collected, err := l.Bucket.Exists(ctx, l.floorKey())
		return !collected, err
	}
	stored, err := l.Bucket.ReadAll(ctx, l.Key(prev.N))
	if errors.Is(err, blob.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if same == nil {
		return bytes.Equal(stored, prev.Data), nil
	}
	return same(stored), nil
}

// Policy says what Collect keeps besides the retention.
type Policy struct {
	// Keep: the newest Keep objects stay, whatever their age (at least 1).
	Keep int
	// MaxOffset bounds the writers' clocks' offsets from the collector's.
	MaxOffset time.Duration
	// KeepFrom, if set, is asked (only when something is old enough to go)
	// for the lowest number that must stay with everything above it
	// (0: none).
	KeepFrom func(ctx context.Context) (uint64, error)
}

// Collect deletes, from the lowest object up, every object k whose
// successor was written more than the retention before now (by this
// clock) and which the policy does not keep. It returns how many it
// deleted. It is safe beside creates, readers and other collections.
func (l Log) Collect(ctx context.Context, now time.Time, p Policy) (int, error) {
	newest, err := l.Newest(ctx)
	keep := uint64(max(p.Keep, 1))
	if err != nil || newest.N <= keep {
		return 0, err
	}
	if l.Head && l.fresh(newest.Seen) {
		// A log written before heads were kept gets one; the one a create
		// left may lag. Either way the head names an object that stays.
		if err := l.writeNumber(ctx, l.headKey(), newest.N); err != nil {
			return 0, err
		}
	}
	hi := newest.N - keep
	lo, err := l.number(ctx, l.floorKey())
	if err != nil {
		return 0, err
	}
	hasFloor := lo > 0
	if !hasFloor {
		if lo, err = l.listed(ctx, true); err != nil || lo == 0 {
			return 0, err
		}
	}
	if lo > hi {
		return 0, nil
	}
	c, ok, err := l.lastOld(ctx, lo, hi, now.Add(-l.Retention-2*p.MaxOffset))
	if err != nil || !ok {
		return 0, err
	}
	if p.KeepFrom != nil {
		from, err := p.KeepFrom(ctx)
		if err != nil {
			return 0, err
		}
		if from > 0 && from <= c {
			if from <= lo {
				return 0, nil
			}
			c = from - 1
		}
	}
	// The floor exists before anything goes: a create of object 1 looks
	// for it.
	if !hasFloor {
		if err := l.writeNumber(ctx, l.floorKey(), lo); err != nil {
			return 0, err
		}
	}
	deleted := 0
	for k := lo; k <= c; k++ {
		if err := l.Bucket.Delete(ctx, l.Key(k)); err != nil {
			return deleted, err
		}
		deleted++
	}
	return deleted, l.writeNumber(ctx, l.floorKey(), c+1)
}

// lastOld is the highest k in [lo, hi] whose successor was written before
// cutoff, by bisection: writes follow the numbers' order, each writer's
// clock within the offset the cutoff allows for.
func (l Log) lastOld(ctx context.Context, lo, hi uint64, cutoff time.Time) (uint64, bool, error) {
	old := func(k uint64) (bool, error) {
		data, err := l.Bucket.ReadAll(ctx, l.Key(k+1))
		if errors.Is(err, blob.ErrNotFound) {
			return true, nil // below the floor a previous pass left: gone already
		}
		if err != nil {
			return false, err
		}
		w, err := l.Written(data)
		if err != nil {
			return false, fmt.Errorf("%s: %w", l.Key(k+1), err)
		}
		return w.Before(cutoff), nil
	}
	if ok, err := old(hi); err != nil || ok {
		return hi, ok, err
	}
	if ok, err := old(lo); err != nil || !ok {
		return 0, false, err
	}
	yes, no := lo, hi
	for no-yes > 1 {
		mid := yes + (no-yes)/2
		ok, err := old(mid)
		if err != nil {
			return 0, false, err
		}
		if ok {
			yes = mid
		} else {
			no = mid
		}
	}
	return yes, true, nil
}
