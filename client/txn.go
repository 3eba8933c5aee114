package client

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"strconv"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/bellows-kv/bellows/internal/contract"
	kvpb "github.com/bellows-kv/bellows/proto/bellows/kv/v1"
)

// ErrConflict matches a *ConflictError.
var ErrConflict = errors.New("bellows client: write conflict")

// ErrTxnLost: the store that began the transaction no longer has it
// (it restarted, or the transaction timed out or was rolled back) and
// nothing of it was written. Run it again from Begin; RunTxn does.
var ErrTxnLost = errors.New("bellows client: transaction lost")

// ErrSnapshotTooOld: a transaction's read found that a region it read may
// have dropped a version its snapshot needs (the read is older than the
// region's retention.gcTTL, or retention.maxVersions > 0, and no pin of its
// start there). Nothing was written; RunTxn runs the
// transaction again with a new start.
var ErrSnapshotTooOld = errors.New("bellows client: snapshot too old")

// ErrReadUncertain matches an *UncertainError.
var ErrReadUncertain = errors.New("bellows client: read uncertain")

// UncertainError: a transaction's read found a version of a key above its
// start timestamp but within its clock uncertainty (docs/clock.md): it may
// have been committed before the transaction began, on a store whose clock
// is ahead of the one that gave the start. Nothing was written. Restart
// the transaction (Txn.Restart; RunTxn does): its next start is above TS.
type UncertainError struct {
	TS      uint64
	Message string
}

func (e *UncertainError) Error() string { return "bellows client: " + e.Message }

func (e *UncertainError) Is(target error) bool { return target == ErrReadUncertain }

// readErr marks a transaction read's SNAPSHOT_TOO_OLD as ErrSnapshotTooOld
// and its READ_UNCERTAIN as an *UncertainError.
func readErr(err error) error {
	if err == nil {
		return nil
	}
	if hasReason(err, contract.SnapshotTooOldReason) {
		return fmt.Errorf("%w: %s", ErrSnapshotTooOld, status.Convert(err).Message())
	}
	for _, d := range status.Convert(err).Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.Reason == contract.ReadUncertainReason {
			ts, perr := strconv.ParseUint(info.Metadata["ts"], 10, 64)
			if perr != nil {
				return fmt.Errorf("bellows client: an uncertain read with malformed details %v: %w", info.Metadata, err)
			}
			return &UncertainError{TS: ts, Message: status.Convert(err).Message()}
		}
	}
	return err
}

// ConflictError is a Commit aborted because a write of Key committed
// after the transaction started (first committer wins), or, with Key nil,
// because a cross-region commit was rolled back (its locks expired before
// it reached its commit point). Nothing of the transaction was written;
// run it again from Begin.
//
// With Read set, the transaction was serializable and Key is one it read
// (by Get or in a Scan's range) that a commit at CommittedTS overwrote
// between its start and its commit (or a transaction that started at
// CommittedTS and had not finished held a lock on it). It matches
// ErrReadConflict as well as ErrConflict.
type ConflictError struct {
	Key         []byte
	CommittedTS uint64
	Read        bool
	Message     string
}

func (e *ConflictError) Error() string { return "bellows client: " + e.Message }

func (e *ConflictError) Is(target error) bool {
	return target == ErrConflict || e.Read && target == ErrReadConflict
}

// ErrReadConflict matches the *ConflictError of a serializable
// transaction whose read was overwritten before it could commit.
var ErrReadConflict = errors.New("bellows client: read conflict")

// Txn is a snapshot-isolation transaction: it reads what committed at or
// before its start timestamp, in every region, and buffers its writes
// until Commit, which commits them atomically wherever they fall (across
// regions by two-phase commit, coordinated by the store that owns the
// first write's region). Not safe for concurrent use.
type Txn struct {
	c *Client
	// id names the transaction at issuer, the store that began it, where
	// its commit and rollback go (see BeginTxn in proto/bellows/kv/v1).
	id, issuer string
	startTS    uint64
	// limit is the uncertainty limit every read carries (0: none), and
	// uncertain the newest version a read found within it: a Restart
	// begins above it, keeping limit.
	limit, uncertain uint64
	// observed is the first clock reading of each store the transaction
	// reached (BeginTxn's, then its reads'): every read sends them, and a
	// store narrows the read's uncertainty to its own (docs/clock.md).
	observed []*kvpb.ObservedClock
	writes   []Mutation
	// badWrite is the first buffered write refused (an invalid time to
	// live): Commit returns it.
	badWrite error
	index    map[string]int // key → its write in writes
	// serializable: Commit validates reads, the keys and ranges the
	// transaction read from the stores (Serializable).
	serializable bool
	reads        []*kvpb.KeySpan
	// expiring are the keys whose get read a value with a time to live:
	// their validation is kept even when written (readsToValidate).
	expiring map[string]bool
}

// Serializable makes a transaction serializable (Begin, RunTxn): besides
// snapshot isolation's write conflicts, its commit fails with a
// *ConflictError matching ErrReadConflict if a key it read, or a key in a
// range it scanned, was written between its start and its commit, so
// write skew and phantoms cannot happen (docs/transactions.md). A
// transaction that writes nothing commits nothing and needs no check: its
// snapshot is serializable as it is.
func Serializable() TxnOption {
	return func(p *txnRetry) { p.serializable = true }
}

// Begin starts a transaction at a start timestamp from the cluster:
// snapshot isolation, or with Serializable serializable. Retry options are
// RunTxn's and ignored here.
func (c *Client) Begin(ctx context.Context, opts ...TxnOption) (*Txn, error) {
	var p txnRetry
	for _, o := range opts {
		o(&p)
	}
	t, err := c.begin(ctx, &kvpb.BeginTxnRequest{})
	if t != nil {
		t.serializable = p.serializable
	}
	return t, err
}

func (c *Client) begin(ctx context.Context, req *kvpb.BeginTxnRequest) (*Txn, error) {
	resp, issuer, err := doAddr(ctx, c, nil, func(ctx context.Context, kv kvpb.KVClient) (*kvpb.BeginTxnResponse, error) {
		return kv.BeginTxn(ctx, req)
	})
	if err != nil {
		return nil, err
	}
	t := &Txn{c: c, id: resp.TxnId, issuer: issuer, startTS: resp.StartTs, limit: resp.UncertaintyLimit, index: map[string]int{}}
	t.observe(resp.Observed)
	return t, nil
}

// Restart rolls t back and begins it again with nothing read or written:
// after an *UncertainError, above the uncertain version and within t's
// first uncertainty limit, so each restart narrows the window and
// restarts end (docs/clock.md); otherwise as Begin does. A restart sees
// every transaction that committed before t first began, as t promised,
// not necessarily those that committed since.
func (t *Txn) Restart(ctx context.Context) (*Txn, error) {
	_ = t.Rollback(ctx)
	req := &kvpb.BeginTxnRequest{}
	if t.uncertain != 0 {
		req = &kvpb.BeginTxnRequest{MinStartTs: t.uncertain, UncertaintyLimit: t.limit}
	}
	next, err := t.c.begin(ctx, req)
	if next != nil {
		next.serializable = t.serializable
	}
	return next, err
}

// observe keeps o if it is the transaction's first reading of its store.
// A restart begins without the readings: they bound the versions written
// after the first attempt reached each store, not after the restart began.
func (t *Txn) observe(o *kvpb.ObservedClock) {
	if o == nil || o.Store == "" {
		return
	}
	for _, x := range t.observed {
		if x.Store == o.Store {
			return
		}
	}
	t.observed = append(t.observed, o)
}

// observedList is what a read of t sends (nil t: none).
func (t *Txn) observedList() []*kvpb.ObservedClock {
	if t == nil {
		return nil
	}
	return t.observed
}

// noteSpan records [start, end) as read from the stores, for a
// serializable commit's validation.
func (t *Txn) noteSpan(start, end []byte) {
	if t.serializable {
		t.reads = append(t.reads, &kvpb.KeySpan{Start: bytes.Clone(start), End: bytes.Clone(end)})
	}
}

// readsToValidate are the reads a serializable commit validates: all but
// the gets of keys the transaction also writes, whose write conflict check
// (nothing of the key committed since the start) is the same check —
// unless the value read expires, which the write conflict check does not
// see (it may expire between the start and the commit).
func (t *Txn) readsToValidate() []*kvpb.KeySpan {
	var out []*kvpb.KeySpan
	for _, sp := range t.reads {
		k := sp.Start
		if len(sp.End) == len(k)+1 && sp.End[len(k)] == 0 && bytes.HasPrefix(sp.End, k) {
			if _, written := t.index[string(k)]; written && !t.expiring[string(k)] {
				continue
			}
		}
		out = append(out, sp)
	}
	return out
}

// noteRead keeps the uncertain version a read error names.
func (t *Txn) noteRead(err error) error {
	var ue *UncertainError
	if errors.As(err, &ue) {
		t.uncertain = max(t.uncertain, ue.TS)
	}
	return err
}

// ID is the transaction's id at the store that began it ("" from a store
// that registers none).
func (t *Txn) ID() string { return t.id }

// Rollback ends the transaction without writing anything, so its store
// stops keeping the versions it reads. Rolling back twice, or a
// transaction that timed out, is harmless.
func (t *Txn) Rollback(ctx context.Context) error {
	if t.id == "" {
		return nil
	}
	_, _, err := doAt(ctx, t.c, t.issuer, func(ctx context.Context, kv kvpb.KVClient) (*kvpb.RollbackTxnResponse, error) {
		return kv.RollbackTxn(ctx, &kvpb.RollbackTxnRequest{TxnId: t.id})
	})
	if status.Code(err) == codes.NotFound {
		return nil // the store forgot it: nothing is kept for it
	}
	return err
}

// StartTS is the transaction's snapshot.
func (t *Txn) StartTS() uint64 { return t.startTS }

// Get reads key: the transaction's own write of it if there is one, else
// the value committed at or before the start timestamp.
func (t *Txn) Get(ctx context.Context, key []byte) (value []byte, found bool, err error) {
	if i, ok := t.index[string(key)]; ok {
		w := t.writes[i]
		return w.Value, !w.Delete, nil
	}
	req := &kvpb.TxnGetRequest{StartTs: t.startTS, Key: key, UncertaintyLimit: t.limit, Observed: t.observed}
	resp, err := do(ctx, t.c, key, func(ctx context.Context, kv kvpb.KVClient) (*kvpb.GetResponse, error) {
		return kv.TxnGet(ctx, req)
	})
	if err != nil {
		return nil, false, t.noteRead(readErr(err))
	}
	t.observe(resp.Observed)
	t.noteSpan(key, append(bytes.Clone(key), 0))
	if t.serializable && resp.ExpiryTs != 0 {
		if t.expiring == nil {
			t.expiring = map[string]bool{}
		}
		t.expiring[string(key)] = true
	}
	return resp.Value, resp.Found, nil
}

// Scan returns an iterator over the live keys of [start, end) (empty
// start: the first key; empty end: past the last) in key order (descending
// with opts.Reverse), at most opts.Limit of them (0: all): the snapshot at the start timestamp in
// every region (TxnScan), with the transaction's own writes applied over
// it — those buffered when Scan is called; a write buffered while the
// iterator is open is not seen by it. It streams like Client.Scan (one
// region at a time, resuming a broken stream); opts.ReadTS must be unset
// (a transaction reads at its start). Close it when done; Err is
// ErrSnapshotTooOld when a region may have dropped a version the snapshot
// needs.
func (t *Txn) Scan(ctx context.Context, start, end []byte, opts ScanOptions) *Iterator {
	in := func(k []byte) bool {
		return bytes.Compare(k, start) >= 0 && (len(end) == 0 || bytes.Compare(k, end) < 0)
	}
	var own []Mutation
	deletes := 0
	for _, w := range t.writes {
		if in(w.Key) {
			own = append(own, w)
			if w.Delete {
				deletes++
			}
		}
	}
	slices.SortFunc(own, func(a, b Mutation) int { return bytes.Compare(a.Key, b.Key) })
	if opts.Reverse {
		slices.Reverse(own)
	}
	// Each own delete may hide one stored pair: read that many more.
	stored := ScanOptions{ReadTS: &t.startTS, Reverse: opts.Reverse}
	if opts.Limit > 0 {
		stored.Limit = opts.Limit + deletes
	}
	// The whole range counts as read, though a limit or a caller that
	// stops early reads less of it: more aborts, never fewer.
	t.noteSpan(start, end)
	st := t.c.Scan(ctx, start, end, stored)
	st.snapshot, st.uncertaintyLimit, st.txn = true, t.limit, t
	it := &Iterator{ctx: ctx, cancel: st.Close, opts: ScanOptions{Limit: opts.Limit, Reverse: opts.Reverse}, ov: &overlay{stored: st, own: own}, txn: t}
	if opts.ReadTS != nil {
		it.err = errors.New("bellows client: Txn.Scan with ScanOptions.ReadTS: a transaction reads at its start timestamp")
	}
	return it
}

// ScanAll runs the transaction's Scan to its end and returns every pair.
func (t *Txn) ScanAll(ctx context.Context, start, end []byte, opts ScanOptions) ([]KeyValue, error) {
	return t.Scan(ctx, start, end, opts).all()
}

// Put buffers a write of value to key (copied). WithTTL makes it expire
// after its commit timestamp; an invalid one fails Commit.
func (t *Txn) Put(key, value []byte, opts ...WriteOption) {
	ttl, err := ttlOf(opts)
	if err != nil {
		if t.badWrite == nil {
			t.badWrite = fmt.Errorf("bellows client: the write of %q: %w", key, err)
		}
		return
	}
	t.write(Mutation{Key: append([]byte{}, key...), Value: append([]byte{}, value...), TTL: ttl})
}

// Delete buffers a delete of key.
func (t *Txn) Delete(key []byte) { t.write(Mutation{Key: append([]byte{}, key...), Delete: true}) }

func (t *Txn) write(m Mutation) {
	if i, ok := t.index[string(m.Key)]; ok {
		t.writes[i] = m
		return
	}
	t.index[string(m.Key)] = len(t.writes)
	t.writes = append(t.writes, m)
}

// Commit writes the buffered writes atomically if no write of their keys
// committed after the start; else it returns a *ConflictError (matching
// ErrConflict) and writes nothing. A transaction without writes (read
// only) commits without asking the cluster: it never aborts. Retried
// attempts of one Commit (a store restarting, a region moving) carry one
// idempotency key, so a commit whose answer was lost is not applied twice.
func (t *Txn) Commit(ctx context.Context) (WriteResult, error) {
	if t.badWrite != nil {
		_ = t.Rollback(ctx)
		return WriteResult{}, t.badWrite
	}
	if len(t.writes) == 0 {
		// Nothing to commit; end it so its store stops keeping versions
		// for it (best effort: it times out otherwise).
		_ = t.Rollback(ctx)
		return WriteResult{}, nil
	}
	req := &kvpb.CommitTxnRequest{StartTs: t.startTS, Mutations: make([]*kvpb.Mutation, len(t.writes)), Serializable: t.serializable, Reads: t.readsToValidate()}
	for i, m := range t.writes {
		req.Mutations[i] = mutationPB(m)
	}
	ctx = withRequestID(ctx)
	if t.id != "" {
		req.StartTs, req.TxnId = 0, t.id
		resp, attempts, err := doAt(ctx, t.c, t.issuer, func(ctx context.Context, kv kvpb.KVClient) (*kvpb.CommitTxnResponse, error) {
			return kv.CommitTxn(ctx, req)
		})
		switch code := status.Code(err); {
		case err == nil:
			return WriteResult{Region: resp.Region, CommitTS: resp.CommitTs}, nil
		case code == codes.NotFound && attempts == 1, hasReason(err, contract.TxnEndedReason):
			// Refused before anything was written: the first attempt
			// found no such transaction, or it had ended. (A NOT_FOUND
			// after an attempt that may have committed is an unknown
			// outcome, returned as it is.)
			return WriteResult{}, fmt.Errorf("%w: %s", ErrTxnLost, status.Convert(err).Message())
		default:
			return WriteResult{}, conflictFrom(err)
		}
	}
	resp, err := do(ctx, t.c, t.writes[0].Key, func(ctx context.Context, kv kvpb.KVClient) (*kvpb.CommitTxnResponse, error) {
		return kv.CommitTxn(ctx, req)
	})
	if err != nil {
		return WriteResult{}, conflictFrom(err)
	}
	return WriteResult{Region: resp.Region, CommitTS: resp.CommitTs}, nil
}

// conflictFrom turns an ABORTED WRITE_CONFLICT status into a
// *ConflictError; other errors pass through.
func conflictFrom(err error) error {
	st, ok := status.FromError(err)
	if !ok || st.Code() != codes.Aborted {
		return err
	}
	for _, d := range st.Details() {
		info, ok := d.(*errdetails.ErrorInfo)
		if !ok || info.Reason != contract.WriteConflictReason && info.Reason != contract.ReadConflictReason {
			continue
		}
		key, kerr := base64.StdEncoding.DecodeString(info.Metadata["key_base64"])
		ts, terr := strconv.ParseUint(info.Metadata["committed_ts"], 10, 64)
		if kerr != nil || terr != nil {
			return fmt.Errorf("bellows client: a write conflict with malformed details %v: %w", info.Metadata, err)
		}
		return &ConflictError{Key: key, CommittedTS: ts, Read: info.Reason == contract.ReadConflictReason, Message: st.Message()}
	}
	// A cross-region commit rolled back before its commit point.
	return &ConflictError{Message: st.Message()}
}

// RunTxn runs f in a transaction and commits it. While the attempt fails
// in a way that left nothing written and that a new snapshot may fix — a
// write conflict (ErrConflict), a lost transaction (ErrTxnLost), a read
// refused as too old (ErrSnapshotTooOld, from f) — it waits a jittered,
// exponentially growing backoff and runs f again from a new Begin, at most
// the maximum number of attempts (DefaultTxnMaxAttempts, WithTxnMaxAttempts)
// and never past ctx. f must be safe to run more than once (it sees a newer
// snapshot each time); a transaction f fails is rolled back. A read found
// uncertain (ErrReadUncertain, from f: another store's clock is ahead)
// runs f again at once, from Txn.Restart: above the version it found.
//
// When it gives up it returns a *TxnGaveUpError matching ErrTooManyAttempts
// or the context's error, and the last attempt's error (errors.Is and
// errors.As see both). Any other error — f's own, or a commit whose outcome
// is unknown — is returned as it is, after one attempt of it.
func (c *Client) RunTxn(ctx context.Context, f func(ctx context.Context, t *Txn) error, opts ...TxnOption) (WriteResult, error) {
	p := txnRetry{maxAttempts: DefaultTxnMaxAttempts, initial: DefaultTxnRetryInitial, max: DefaultTxnRetryMax, sleep: sleepCtx}
	for _, o := range opts {
		o(&p)
	}
	b := p.backoff()
	var last error // the last attempt's retryable failure
	var prev *Txn  // the last attempt, when it read an uncertain version
	for attempt := 1; ; attempt++ {
		var t *Txn
		var err error
		if prev != nil {
			t, err = prev.Restart(ctx)
		} else {
			t, err = c.Begin(ctx, opts...)
		}
		if err != nil {
			if last != nil && ctx.Err() != nil {
				// The deadline came during this Begin: nothing of this
				// attempt happened, so the earlier attempt says why.
				return WriteResult{}, &TxnGaveUpError{Attempts: attempt - 1, Reason: ctx.Err(), Last: last}
			}
			return WriteResult{}, err
		}
		res, err, again := t.run(ctx, f)
		if !again {
			return res, err
		}
		last, prev = err, nil
		if errors.Is(err, ErrReadUncertain) {
			prev = t
		}
		if attempt >= p.maxAttempts {
			return WriteResult{}, &TxnGaveUpError{Attempts: attempt, Reason: ErrTooManyAttempts, Last: last}
		}
		if ctx.Err() != nil {
			return WriteResult{}, &TxnGaveUpError{Attempts: attempt, Reason: ctx.Err(), Last: last}
		}
		if prev != nil {
			// Not contention: the next start is above the uncertain
			// version, and the window is narrower.
			continue
		}
		if err := p.sleep(ctx, b.NextBackOff()); err != nil {
			return WriteResult{}, &TxnGaveUpError{Attempts: attempt, Reason: err, Last: last}
		}
	}
}

// run is one attempt of RunTxn on t: f, then the commit. again says that
// nothing of it was written and a new snapshot may succeed: f's read was
// refused as too old, or the commit was refused (conflict, lost). Any
// other error of f is the caller's to handle, even one that happens to
// match ErrConflict (a nested transaction's, say); an unknown outcome is
// never run again, since that could apply the transaction twice.
func (t *Txn) run(ctx context.Context, f func(ctx context.Context, t *Txn) error) (res WriteResult, err error, again bool) {
	if err := f(ctx, t); err != nil {
		_ = t.Rollback(ctx)
		return WriteResult{}, err, errors.Is(err, ErrSnapshotTooOld) || errors.Is(err, ErrReadUncertain)
	}
	res, err = t.Commit(ctx)
	return res, err, errors.Is(err, ErrConflict) || errors.Is(err, ErrTxnLost)
}

// hasReason reports whether err is a status with an ErrorInfo of reason.
func hasReason(err error, reason string) bool {
	for _, d := range status.Convert(err).Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.Reason == reason {
			return true
		}
	}
	return false
}
