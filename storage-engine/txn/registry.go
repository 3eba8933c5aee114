package txn

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"sync"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/bellows-kv/bellows/internal/contract"
	kvpb "github.com/bellows-kv/bellows/proto/bellows/kv/v1"
	"github.com/bellows-kv/bellows/storage-engine/region"
)

// The registry of the transactions BeginTxn opens (txn ids). A registered transaction
// lives at the store that began it, in memory: CommitTxn and RollbackTxn
// name it there. While it is open, every region of that store that drops
// old versions (retention.gcTTL or maxVersions > 0) keeps the versions it reads (a
// snapshot pinned at its start timestamp; a region that keeps every
// version needs no pin and takes none); it ends when it commits, rolls back, or times out
// (TxnTimeout after its begin), and its pins go with it. An ended
// transaction is remembered for TxnOutcomeRetryWindow, so a retried commit
// whose first answer was lost gets that answer, and a late commit of a
// rolled-back or timed-out one is told which.
//
// The registry is not durable: a store that restarts forgets its open
// transactions (their commits get NOT_FOUND; nothing of them was written
// unless a commit had begun, whose own retry finds its outcome through the
// request ID). Transactions without an id (one-shot commits naming their
// start_ts) do not use it.

// MaxOpenTxns bounds the transactions open at one store: past it BeginTxn
// answers RESOURCE_EXHAUSTED rather than pinning without limit.
const MaxOpenTxns = 100_000

// txnState is where a registered transaction is.
type txnState int

const (
	txnOpen txnState = iota
	txnCommitting
	txnCommitted
	txnRolledBack
	txnAborted
	txnTimedOut
)

func (s txnState) String() string {
	return [...]string{"open", "being committed", "committed", "rolled back", "aborted by a write conflict", "timed out"}[s]
}

type registeredTxn struct {
	startTS uint64
	began   time.Time
	state   txnState
	ended   time.Time
	commit  *kvpb.CommitTxnResponse // state txnCommitted
	// requestID is the idempotency key of the commit that began (""
	// without one): only its retries get the recorded answer.
	requestID string
	pins      []*region.Snapshot
}

// Registry is the transactions BeginTxn registered at this store.
type Registry struct {
	store              Store
	timeout, keepEnded time.Duration
	mu                 sync.Mutex
	txns               map[string]*registeredTxn
	open               int
}

// NewRegistry registers transactions at store, ending each one o.Timeout
// after its begin and remembering an ended one for o.OutcomeRetryWindow.
func NewRegistry(store Store, o Options) *Registry {
	return newRegistry(store, o.Timeout, o.OutcomeRetryWindow)
}

func newRegistry(store Store, timeout, keepEnded time.Duration) *Registry {
	return &Registry{store: store, timeout: timeout, keepEnded: keepEnded, txns: map[string]*registeredTxn{}}
}

// begin registers a transaction at startTS, pinning it in regions.
func (g *Registry) begin(startTS uint64, now time.Time, regions []*region.Region) (string, error) {
	var b [12]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	id := "t" + hex.EncodeToString(b[:])
	t := &registeredTxn{startTS: startTS, began: now}
	for _, e := range regions {
		if !e.DropsVersions() {
			continue // it keeps every version: nothing to pin
		}
		if s, err := e.SnapshotAt(startTS); err == nil {
			t.pins = append(t.pins, s) // a region closing meanwhile needs no pin
		}
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.open >= MaxOpenTxns {
		unpin(t)
		return "", status.Errorf(codes.ResourceExhausted, "%d transactions are open at this store, the most it keeps: commit or roll back some (RollbackTxn), or wait for them to time out (%v)", g.open, g.timeout)
	}
	g.txns[id] = t
	g.open++
	return id, nil
}

func unpin(t *registeredTxn) {
	for _, s := range t.pins {
		s.Close()
	}
	t.pins = nil
}

// endLocked ends an open or committing t in state.
func (g *Registry) endLocked(t *registeredTxn, state txnState, now time.Time) {
	if t.state == txnOpen || t.state == txnCommitting {
		g.open--
		unpin(t)
	}
	t.state, t.ended = state, now
}

// notFound is the error for an id this store does not know.
func notFound(id string) error {
	return status.Errorf(codes.NotFound, "transaction %q is not known to this store: it began at another store (send its CommitTxn and RollbackTxn to the store that answered its BeginTxn), this store restarted since, or it ended long ago", id)
}

// startCommit marks id as being committed and returns its start timestamp;
// done, if not nil, is the answer of its earlier commit (a retry).
// startTS, when not 0, must be the transaction's own.
func (g *Registry) startCommit(id string, startTS uint64, requestID string, now time.Time) (ts uint64, done *kvpb.CommitTxnResponse, err error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	t, ok := g.txns[id]
	if !ok {
		return 0, nil, notFound(id)
	}
	if startTS != 0 && startTS != t.startTS {
		return 0, nil, status.Errorf(codes.InvalidArgument, "start_ts %d is not transaction %s's (%d): leave start_ts 0 with a txn_id", startTS, id, t.startTS)
	}
	if t.state == txnOpen && now.Sub(t.began) > g.timeout {
		g.endLocked(t, txnTimedOut, now)
	}
	switch t.state {
	case txnOpen:
		t.state, t.requestID = txnCommitting, requestID
		return t.startTS, nil, nil
	case txnCommitted:
		if requestID != "" && requestID == t.requestID {
			return 0, t.commit, nil // a retry whose first answer was lost
		}
		return 0, nil, status.Errorf(codes.FailedPrecondition, "transaction %s already committed at %d; a transaction commits once", id, t.commit.GetCommitTs())
	case txnCommitting:
		return 0, nil, status.Errorf(codes.FailedPrecondition, "transaction %s is being committed by another request; retry with the same request ID to learn its outcome", id)
	case txnTimedOut:
		return 0, nil, txnEnded(fmt.Sprintf("transaction %s timed out: it was neither committed nor rolled back within %v of BeginTxn (--txn-timeout); nothing of it was written, run it again", id, g.timeout))
	default:
		return 0, nil, txnEnded(fmt.Sprintf("transaction %s was %s; nothing of it was written, run it again", id, t.state))
	}
}

// txnEnded is the FAILED_PRECONDITION of a commit of a transaction that
// ended without one, with ErrorInfo reason TXN_ENDED.
func txnEnded(msg string) error {
	st := status.New(codes.FailedPrecondition, msg)
	if d, err := st.WithDetails(&errdetails.ErrorInfo{Reason: contract.TxnEndedReason, Domain: contract.ErrorDomain}); err == nil {
		st = d
	}
	return st.Err()
}

// finishCommit records the outcome of a commit startCommit began: a
// commit or a conflict ends the transaction; any other error leaves it
// open, so the commit may be retried.
func (g *Registry) finishCommit(id string, resp *kvpb.CommitTxnResponse, err error, now time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	t, ok := g.txns[id]
	if !ok || t.state != txnCommitting {
		return
	}
	switch {
	case err == nil:
		g.endLocked(t, txnCommitted, now)
		t.commit = resp
	case status.Code(err) == codes.Aborted:
		g.endLocked(t, txnAborted, now)
	default:
		t.state = txnOpen
	}
}

// rollback ends id without a commit.
func (g *Registry) rollback(id string, now time.Time) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	t, ok := g.txns[id]
	if !ok {
		return notFound(id)
	}
	switch t.state {
	case txnOpen:
		g.endLocked(t, txnRolledBack, now)
		return nil
	case txnCommitting:
		return status.Errorf(codes.FailedPrecondition, "transaction %s is being committed; its commit decides", id)
	case txnCommitted:
		return status.Errorf(codes.FailedPrecondition, "transaction %s committed at %d; a committed transaction cannot be rolled back", id, t.commit.GetCommitTs())
	default:
		return nil // already ended without a commit
	}
}

// Sweep times out the open transactions past the timeout and forgets the
// ended ones past keepEnded, as of now.
func (g *Registry) Sweep(now time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for id, t := range g.txns {
		switch {
		case t.state == txnOpen && now.Sub(t.began) > g.timeout:
			g.endLocked(t, txnTimedOut, now)
		case t.state >= txnCommitted && now.Sub(t.ended) > g.keepEnded:
			delete(g.txns, id)
		}
	}
}

// Begin registers a transaction that starts now, by the store's clock,
// pinned in the store's open regions. Its uncertainty limit is the start
// plus the clock's maximum offset, or limit when a restart carries one
// (docs/clock.md); none when the clock has no bound.
func (g *Registry) Begin(limit uint64) (*kvpb.BeginTxnResponse, error) {
	now := g.store.Now()
	clock := g.store.Clock()
	startTS := clock.Now()
	var regions []*region.Region
	for _, r := range g.store.Local() {
		if e, err := r.Engine(); err == nil {
			regions = append(regions, e)
		}
	}
	id, err := g.begin(startTS, now, regions)
	if err != nil {
		return nil, err
	}
	resp := &kvpb.BeginTxnResponse{StartTs: startTS, TxnId: id, TimeoutMs: uint64(g.timeout / time.Millisecond)}
	if d := clock.MaxOffset(); d > 0 {
		resp.UncertaintyLimit = startTS + uint64(d)
		if limit != 0 {
			resp.UncertaintyLimit = limit
		}
	}
	return resp, nil
}

// Rollback ends transaction id without a commit.
func (g *Registry) Rollback(id string) error {
	return g.rollback(id, g.store.Now())
}

// Commit commits registered transaction id through commit, which gets its
// start timestamp, once: startTS, when not 0, must be the transaction's
// own; a retry with the first commit's requestID gets its answer.
func (g *Registry) Commit(id string, startTS uint64, requestID string, commit func(startTS uint64) (*kvpb.CommitTxnResponse, error)) (*kvpb.CommitTxnResponse, error) {
	ts, done, err := g.startCommit(id, startTS, requestID, g.store.Now())
	if err != nil || done != nil {
		return done, err
	}
	resp, err := commit(ts)
	g.finishCommit(id, resp, err, g.store.Now())
	if err != nil {
		return nil, err
	}
	return resp, nil
}
