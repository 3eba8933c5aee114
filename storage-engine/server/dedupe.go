package server

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/bellows-kv/bellows/internal/contract"
	kvpb "github.com/bellows-kv/bellows/proto/bellows/kv/v1"
	"github.com/bellows-kv/bellows/storage-engine/region"
)

// Idempotent writes.
//
// A forwarded write can reach its owner more than once: the forwarder
// retries once (next owner, or after refreshing its map) when an attempt
// fails with UNAVAILABLE — which now includes a connection that broke after
// the owner applied the write but before its answer arrived — and a client
// may retry the UNAVAILABLE the forwarder answered. Applied twice, the write
// would get a second, later version: a reader at a timestamp between the
// two would see a concurrent writer's value there, and after the second the
// stale retry's value again.
//
// So every forwarded write (Put, Delete, CompareAndSet, Batch) carries an
// idempotency key, the gRPC metadata RequestIDHeader: the client's own if
// it sent one, else one the first store to receive the call makes, the
// same on the forwarder's retry. The store that applies a write with a key (forwarded
// or not) remembers it per region (table below) with the commit timestamp,
// and answers a request with a key it already applied with that first
// result (same commit_ts, same region) instead of applying it again. A
// request arriving while the first with its key is still being applied
// waits for that one's outcome: its result if it was applied; if it failed
// (then nothing of it is visible) the waiter applies it. A key reused with
// a different request (op, keys or values) is refused with
// INVALID_ARGUMENT. A compare-and-set whose condition did not hold wrote
// nothing and is not remembered: its retry is judged again.
//
// The table moves with its region when the region is released (a SIGTERM,
// a region moving between stores; handover.go): once the region refuses
// writes and the keyed writes in progress have ended, its keys within the
// window are written to the bucket (region.AppliedRequestsKey) before the
// manifest that marks it released, and the store that claims it next (which
// claims only after that manifest) seeds its table from them, keeping each
// key's applied-at time. A duplicate reaching the region's next owner gets
// the first answer too. The request's fingerprint is a SHA-256 of its op,
// keys and values (requestBytes), the same in every store.
//
// A crash (SIGKILL, OOM) loses the in-memory table but not the keys: a
// keyed write's WAL record carries its key and fingerprint
// (region.Batch.WithRequest), the restart's replay hands them back
// (region.ReplayedRequests) and seedApplied puts them in the table, their
// window counted from the restart; and every flush, which deletes the WAL
// segments holding them, first writes the region's keys to the handover
// object (saveApplied, handover.go).
//
// What it does not cover:
//   - a duplicate reaching the next owner of a region, or this store after
//     a crash, when the handover object could not be written at the
//     release or the last flush (logged; the release or flush goes on:
//     availability over the dedupe window), or of a write still in
//     progress after the release's bounded wait (settleTimeout) or when a
//     flush exported the keys;
//   - a duplicate arriving after the key left the table: it keeps, per
//     region, the last dedupeMaxEntries keys applied and only for
//     dedupeMaxAge (by the applying store's wall clock, also after a move),
//     so at high write rates the window is shorter;
//   - a client retry of the forwarder's UNAVAILABLE without its own key:
//     the forwarder made a key for the first call that the client does not
//     know; the retry is a new request. A client that retries writes sends
//     its own RequestIDHeader, the same on every retry.
//
// In those cases a retried write may be applied twice, as before.

// RequestIDHeader is the gRPC metadata key of a write's idempotency key
// (at most maxRequestIDLen bytes).
const RequestIDHeader = contract.RequestIDHeader

const (
	// dedupeMaxEntries bounds the applied keys remembered per region.
	dedupeMaxEntries = 32768
	// dedupeMaxAge bounds how long an applied key is remembered.
	dedupeMaxAge = 2 * time.Minute
	// maxRequestIDLen bounds a client's idempotency key.
	maxRequestIDLen = 128
)

// requestID is the idempotency key of a write this store forwards: the
// client's, else a fresh random one.
func requestID(ctx context.Context) (string, error) {
	if id, ok, err := incomingRequestID(ctx); ok || err != nil {
		return id, err
	}
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b), nil
}

// incomingRequestID is the request's idempotency key, if it has one.
func incomingRequestID(ctx context.Context) (string, bool, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	ids := md.Get(RequestIDHeader)
	if len(ids) == 0 {
		return "", false, nil
	}
	id := ids[0]
	if id == "" || len(id) > maxRequestIDLen {
		return "", false, status.Errorf(codes.InvalidArgument, "%s: must be 1 to %d bytes, not %d", RequestIDHeader, maxRequestIDLen, len(id))
	}
	return id, true, nil
}

// once applies a write of region a through apply at most once per
// idempotency key (see above): a request without one is applied; one whose
// key this store applied already in a's region gets the first commit
// timestamp. req is the request (its bytes tell a reused key). apply gets
// the key and fingerprint to write into the WAL with the write (nil
// without a key), so that a restart's replay knows them.
func (s *KV) once(ctx context.Context, a *Assignment, req proto.Message, apply func(*region.Request) (uint64, error)) (uint64, error) {
	id, ok, err := incomingRequestID(ctx)
	if err != nil {
		return 0, err
	}
	if !ok {
		return apply(nil)
	}
	b, err := requestBytes(req)
	if err != nil {
		return 0, status.Errorf(codes.Internal, "fingerprinting the request: %v", err)
	}
	rq := &region.Request{ID: id, Fingerprint: fingerprint(b)}
	ts, _, err := s.store.applied.do(ctx, a.Name(), id, b, func() (uint64, error) { return apply(rq) })
	return ts, err
}

// requestBytes is what a write's fingerprint is computed from: its op,
// keys and values, each length-prefixed, so it is the same in every store
// and every version (a table handed over with a region is checked against
// requests another binary received, where proto's deterministic encoding
// is not guaranteed to be equal).
func requestBytes(req proto.Message) ([]byte, error) {
	var b []byte
	field := func(p []byte) {
		b = binary.AppendUvarint(b, uint64(len(p)))
		b = append(b, p...)
	}
	// A time to live only when there is one: a write without one keeps
	// the fingerprint it had before TTLs existed.
	ttl := func(ms uint64) {
		if ms != 0 {
			b = append(b, 'T')
			b = binary.AppendUvarint(b, ms)
		}
	}
	switch r := req.(type) {
	case *kvpb.PutRequest:
		b = append(b, 'P')
		field(r.Key)
		field(r.Value)
		ttl(r.TtlMs)
	case *kvpb.DeleteRequest:
		b = append(b, 'D')
		field(r.Key)
	case *kvpb.CompareAndSetRequest:
		b = append(b, 'C')
		field(r.Key)
		switch e := r.GetCondition().GetExpect().(type) {
		case *kvpb.Condition_Absent:
			b = append(b, 'a')
		case *kvpb.Condition_Value:
			b = append(b, 'v')
			field(e.Value)
		case *kvpb.Condition_Version:
			b = append(b, 't')
			b = binary.AppendUvarint(b, e.Version)
		}
		if r.Delete {
			b = append(b, 'd')
		} else {
			b = append(b, 'p')
			field(r.Value)
			ttl(r.TtlMs)
		}
	case *kvpb.DeleteRangeRequest:
		b = append(b, 'R')
		field(r.Start)
		field(r.End)
	case *kvpb.BatchRequest:
		b = append(b, 'B')
		for _, m := range r.Mutations {
			b = binary.AppendUvarint(b, uint64(m.Op))
			field(m.Key)
			field(m.Value)
			ttl(m.TtlMs)
		}
	default:
		out, err := proto.MarshalOptions{Deterministic: true}.Marshal(req)
		return append([]byte{'?'}, out...), err
	}
	return b, nil
}

// fingerprint digests a request's bytes (requestBytes): the first 8 bytes
// of its SHA-256, stable across processes.
func fingerprint(req []byte) uint64 {
	sum := sha256.Sum256(req)
	return binary.BigEndian.Uint64(sum[:8])
}

// dedupe remembers, per region, the idempotency keys of recently applied
// writes and their commit timestamps. The zero value is ready to use.
type dedupe struct {
	// MaxEntries and MaxAge bound each region's table; zero: the defaults.
	MaxEntries int
	MaxAge     time.Duration
	// now is the clock; nil: time.Now.
	now func() time.Time

	mu      sync.Mutex
	regions map[string]*appliedLog
}

// appliedLog is one region's table.
type appliedLog struct {
	byID  map[string]*appliedWrite
	order []*appliedWrite // applied, oldest first (FIFO from head)
	head  int
	// gen counts the keys ever added (applied or seeded); saved is gen
	// as of the last export written to the bucket (markSaved). Equal, the
	// object holds every key the table has, so a release or split need
	// not write it again after its final flush wrote it.
	gen, saved uint64
	// fullAt is when the export last written whole was taken (zero: none
	// since the table began or was seeded): every key applied before it
	// is in the bucket's object, so a tail (exportEncoded with tail) lists
	// only the keys applied since. Seeding adds keys applied long before,
	// so it clears fullAt.
	fullAt time.Time
}

// appliedWrite is one key: being applied (done open), or applied at ts.
type appliedWrite struct {
	id   string
	fp   uint64 // the request's fingerprint
	ts   uint64
	ok   bool          // applied at ts
	at   time.Time     // when it was applied
	done chan struct{} // closed once the first attempt ended
	// enc is the entry's appliedRecord as JSON, made by the first export
	// that lists it and reused by every later one (an applied entry never
	// changes): a region's keys are written at every flush and, while
	// writes are refused, at a split, merge or release's final flush, and
	// encoding 32768 of them each time cost tens of milliseconds there.
	enc []byte
}

// do runs apply for (region, id) unless a request with that key was applied
// already: then it returns the first commit timestamp and dup. A request
// whose key is being applied waits (at most until ctx ends) for the outcome.
func (d *dedupe) do(ctx context.Context, region, id string, req []byte, apply func() (uint64, error)) (ts uint64, dup bool, err error) {
	fp := fingerprint(req)
	for {
		d.mu.Lock()
		log := d.logLocked(region)
		d.evictLocked(log)
		w := log.byID[id]
		if w == nil {
			w = &appliedWrite{id: id, fp: fp, done: make(chan struct{})}
			log.byID[id] = w
			d.mu.Unlock()
			return d.first(log, w, apply)
		}
		d.mu.Unlock()
		if w.fp != fp {
			return 0, false, status.Errorf(codes.InvalidArgument,
				"%s %q was used for a different request in region %s", RequestIDHeader, id, region)
		}
		select {
		case <-w.done:
		case <-ctx.Done():
			return 0, false, status.FromContextError(ctx.Err()).Err()
		}
		d.mu.Lock()
		applied, at := w.ok, w.ts
		d.mu.Unlock()
		if applied {
			return at, true, nil
		}
		// The first attempt failed: nothing of it is visible. Try again
		// (this waiter, or another one, becomes the first).
	}
}

// first applies w's request and records the outcome: applied, the key stays
// until it is evicted; failed (or apply panicked), the key is forgotten so a
// retry applies it. Either way the requests waiting on it go on.
func (d *dedupe) first(log *appliedLog, w *appliedWrite, apply func() (uint64, error)) (ts uint64, dup bool, err error) {
	applied := false
	defer func() {
		d.mu.Lock()
		if applied {
			w.ts, w.ok, w.at = ts, true, d.clock()
			log.order = append(log.order, w)
			log.gen++
			d.evictLocked(log)
		} else if log.byID[w.id] == w {
			delete(log.byID, w.id)
		}
		close(w.done)
		d.mu.Unlock()
	}()
	ts, err = apply()
	applied = err == nil
	return ts, false, err
}

// logLocked is region's table, made if absent.
func (d *dedupe) logLocked(region string) *appliedLog {
	if d.regions == nil {
		d.regions = map[string]*appliedLog{}
	}
	log := d.regions[region]
	if log == nil {
		log = &appliedLog{byID: map[string]*appliedWrite{}}
		d.regions[region] = log
	}
	return log
}

// appliedRecord is one applied key as a region's table is handed over
// (handover.go).
type appliedRecord struct {
	ID string `json:"id"`
	// Digest is the request's fingerprint, 16 hex digits.
	Digest   string `json:"digest"`
	CommitTS uint64 `json:"commit_ts"`
	// AppliedAt is when the write was applied (Unix nanoseconds, the
	// applying store's wall clock): the age the window counts from.
	AppliedAt int64 `json:"applied_at"`
}

// settle waits until no write of region is being applied under a key, or
// ctx ends (then it reports false). Call it once the region refuses writes:
// a write in progress then either was applied (and is in the table when
// settle returns) or failed.
func (d *dedupe) settle(ctx context.Context, region string) bool {
	for {
		var pending *appliedWrite
		d.mu.Lock()
		if log := d.regions[region]; log != nil {
			for _, w := range log.byID {
				if !w.ok {
					pending = w
					break
				}
			}
		}
		d.mu.Unlock()
		if pending == nil {
			return true
		}
		select {
		case <-pending.done:
		case <-ctx.Done():
			return false
		}
	}
}

// export lists region's applied keys still within the window, oldest
// first.
func (d *dedupe) export(region string) []appliedRecord {
	recs, _ := d.exportGen(region)
	return recs
}

// exportGen is export with the table's generation at the export: once the
// records are written, markSaved(region, gen) says so.
func (d *dedupe) exportGen(region string) ([]appliedRecord, uint64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	log := d.regions[region]
	if log == nil {
		return nil, 0
	}
	d.evictLocked(log)
	out := make([]appliedRecord, 0, len(log.order)-log.head)
	for _, w := range log.order[log.head:] {
		if log.byID[w.id] != w {
			continue
		}
		out = append(out, w.record())
	}
	return out, log.gen
}

// exportEncoded is exportGen with each record as JSON (cached per entry,
// see appliedWrite.enc), for writeAppliedEncoded, and the moment of the
// export (for markSaved). With tail, and a whole export written since the
// table was last seeded, it lists only the keys applied since that export
// (full false): what a final flush adds to the object. Otherwise, every
// key (full true).
func (d *dedupe) exportEncoded(region string, tail bool) (recs [][]byte, gen uint64, at time.Time, full bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	at = d.clock()
	log := d.regions[region]
	if log == nil {
		return nil, 0, at, true
	}
	d.evictLocked(log)
	full = !tail || log.fullAt.IsZero()
	live := log.order[log.head:]
	if !full {
		// The FIFO is in applied-at order (first, and reorderLocked after
		// seeding, which forces a whole export anyway): the tail is a
		// suffix. Applied at fullAt itself may be in both: a key read
		// twice is a key seeded once.
		live = live[sort.Search(len(live), func(i int) bool { return !live[i].at.Before(log.fullAt) }):]
	}
	recs = make([][]byte, 0, len(live))
	for _, w := range live {
		if log.byID[w.id] != w {
			continue
		}
		if w.enc == nil {
			// A record of strings and integers always marshals.
			w.enc, _ = json.Marshal(w.record())
		}
		recs = append(recs, w.enc)
	}
	return recs, log.gen, at, full
}

// record is w, applied, as the handover object lists it.
func (w *appliedWrite) record() appliedRecord {
	return appliedRecord{ID: w.id, Digest: fmt.Sprintf("%016x", w.fp), CommitTS: w.ts, AppliedAt: w.at.UnixNano()}
}

// unsavedWhole reports whether region has keys and no whole export of
// them was written since it began or was seeded (a merged region, or a
// split's daughter, before its first flush).
func (d *dedupe) unsavedWhole(region string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	log := d.regions[region]
	return log != nil && len(log.order) > log.head && log.fullAt.IsZero()
}

// markSaved records that region's keys as of generation gen are in the
// bucket's objects; full: written whole, from the export taken at at.
func (d *dedupe) markSaved(region string, gen uint64, at time.Time, full bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if log := d.regions[region]; log != nil {
		log.saved = max(log.saved, gen)
		if full && at.After(log.fullAt) {
			log.fullAt = at
		}
	}
}

// unsaved reports whether region has keys the bucket's object may lack.
func (d *dedupe) unsaved(region string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	log := d.regions[region]
	return log != nil && log.gen != log.saved
}

// seed adds the applied keys handed over with region (export) to its
// table, keeping their applied-at times: those already beyond the window
// are dropped by the next eviction, and a key the table has already is
// kept as it is. It returns how many were added.
func (d *dedupe) seed(region string, recs []appliedRecord) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	log := d.logLocked(region)
	added := 0
	for _, r := range recs {
		fp, err := strconv.ParseUint(r.Digest, 16, 64)
		if err != nil || r.ID == "" || log.byID[r.ID] != nil {
			continue
		}
		w := &appliedWrite{id: r.ID, fp: fp, ts: r.CommitTS, ok: true, at: time.Unix(0, r.AppliedAt), done: make(chan struct{})}
		close(w.done)
		d.addLocked(log, w)
		added++
	}
	d.reorderLocked(log)
	return added
}

// addLocked adds applied entry w, whose key log lacks, to log.
func (d *dedupe) addLocked(log *appliedLog, w *appliedWrite) {
	log.byID[w.id] = w
	log.order = append(log.order, w)
	log.gen++
}

// reorderLocked puts log's FIFO back in applied-at order after entries
// were added out of it (eviction takes the oldest from the head), and
// evicts. Those entries are not in the bucket's object: the next export
// written is a whole one.
func (d *dedupe) reorderLocked(log *appliedLog) {
	log.fullAt = time.Time{}
	live := log.order[log.head:]
	sort.SliceStable(live, func(i, j int) bool { return live[i].at.Before(live[j].at) })
	d.evictLocked(log)
}

// inherit adds region from's applied keys to region to's table, as seed
// does with from's export, without formatting and parsing each record (a
// split's daughters inherit their parent's keys while writes are refused:
// 32768 records cost about 10 ms that way). The entries are shared: an
// applied key's entry does not change once applied. It returns how many
// were added.
func (d *dedupe) inherit(from, to string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	src := d.regions[from]
	if src == nil {
		return 0
	}
	d.evictLocked(src)
	log := d.logLocked(to)
	live := src.order[src.head:]
	fresh := len(log.byID) == 0 && len(log.order) == log.head
	if fresh {
		// A daughter's new table: sized once, not grown 15 times (the
		// copy is under d.mu, which every keyed write of the store takes).
		log.byID = make(map[string]*appliedWrite, len(live))
		log.order = make([]*appliedWrite, 0, len(live))
	}
	added := 0
	for _, w := range live {
		// A fresh table holds no key yet, and src lists each live one once.
		if src.byID[w.id] != w || !w.ok || (!fresh && log.byID[w.id] != nil) {
			continue
		}
		d.addLocked(log, w)
		added++
	}
	if fresh {
		// The source's FIFO is in applied-at order, so the copy is too:
		// no sort (it was half of a 32768-key inherit). A fresh table
		// has written nothing: its fullAt is zero.
		d.evictLocked(log)
	} else {
		d.reorderLocked(log)
	}
	return added
}

// maxEntries is how many keys each region's table holds.
func (d *dedupe) maxEntries() int {
	if d.MaxEntries > 0 {
		return d.MaxEntries
	}
	return dedupeMaxEntries
}

// evictLocked drops the applied keys beyond MaxEntries or older than MaxAge,
// oldest first.
func (d *dedupe) evictLocked(log *appliedLog) {
	maxN, maxAge := d.maxEntries(), d.MaxAge
	if maxAge <= 0 {
		maxAge = dedupeMaxAge
	}
	now := d.clock()
	for log.head < len(log.order) {
		w := log.order[log.head]
		if len(log.order)-log.head <= maxN && now.Sub(w.at) <= maxAge {
			break
		}
		if log.byID[w.id] == w {
			delete(log.byID, w.id)
		}
		log.order[log.head] = nil
		log.head++
	}
	// Compact the FIFO once its dead head is at least half of it.
	if log.head > 0 && log.head*2 >= len(log.order) {
		log.order = append(log.order[:0], log.order[log.head:]...)
		log.head = 0
	}
}

func (d *dedupe) clock() time.Time {
	if d.now != nil {
		return d.now()
	}
	return time.Now()
}
