package client

// How RunTxn retries, and why it gives up.
//
// Invariants:
//   - RunTxn runs f at most maxAttempts times (≥ 1), and starts no attempt
//     and no wait after ctx ends.
//   - Only an attempt that wrote nothing is run again (see Txn.run).
//   - Between two attempts it waits a backoff drawn from
//     [½·i, 1½·i], where i starts at the initial interval and doubles up to
//     the maximum: contenders that conflicted with each other at once come
//     back at different times, so they do not collide again and again in
//     lockstep (a livelock), and a hot key is retried less and less often.
//   - Giving up returns a *TxnGaveUpError; everything else it returns is
//     the attempt's own error.

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cenkalti/backoff/v5"
)

// The defaults of RunTxn's retries, here only.
const (
	// DefaultTxnMaxAttempts bounds how many times RunTxn runs a
	// transaction that keeps conflicting. With the backoff below, its 15
	// waits add up to about 8 s (12 s at most): longer than most callers'
	// deadlines, which then end the retries first.
	DefaultTxnMaxAttempts = 16
	// DefaultTxnRetryInitial is the first wait between attempts: about a
	// commit's round trip, so two contenders usually miss each other on
	// the second try already.
	DefaultTxnRetryInitial = 5 * time.Millisecond
	// DefaultTxnRetryMax caps the wait between attempts.
	DefaultTxnRetryMax = time.Second
)

// ErrTooManyAttempts matches a *TxnGaveUpError of RunTxn that ran out of
// attempts.
var ErrTooManyAttempts = errors.New("bellows client: transaction attempts exhausted")

// TxnGaveUpError is RunTxn giving up on a transaction whose attempts kept
// failing in ways a retry may fix. Nothing of any attempt was written.
// errors.Is matches its Reason (ErrTooManyAttempts,
// context.DeadlineExceeded, context.Canceled) and its Last error
// (ErrConflict, ErrTxnLost, ErrSnapshotTooOld); errors.As finds a
// *ConflictError in Last.
type TxnGaveUpError struct {
	// Attempts is how many times the transaction ran.
	Attempts int
	// Reason is why RunTxn stopped: ErrTooManyAttempts or the context's
	// error.
	Reason error
	// Last is the last attempt's failure.
	Last error
}

func (e *TxnGaveUpError) Error() string {
	return fmt.Sprintf("bellows client: gave up on the transaction after %d attempt(s): %v (last attempt: %v)", e.Attempts, e.Reason, e.Last)
}

func (e *TxnGaveUpError) Unwrap() []error { return []error{e.Reason, e.Last} }

// TxnOption adjusts one RunTxn call's retries, or a transaction's
// isolation (Serializable).
type TxnOption func(*txnRetry)

// WithTxnMaxAttempts bounds how many times RunTxn runs the transaction
// (n ≤ 0: DefaultTxnMaxAttempts; 1: no retry).
func WithTxnMaxAttempts(n int) TxnOption {
	return func(p *txnRetry) {
		if n > 0 {
			p.maxAttempts = n
		}
	}
}

// WithTxnBackoff sets the first wait between attempts and its cap
// (≤ 0: the defaults). Each wait is drawn at random within ±50% of an
// interval that doubles from initial up to maxWait.
func WithTxnBackoff(initial, maxWait time.Duration) TxnOption {
	return func(p *txnRetry) {
		if initial > 0 {
			p.initial = initial
		}
		if maxWait > 0 {
			p.max = maxWait
		}
	}
}

// txnRetry is one RunTxn call's retry policy.
type txnRetry struct {
	maxAttempts  int
	initial, max time.Duration
	// sleep waits d or until ctx ends (its error); tests replace it to
	// see the waits without taking them.
	sleep func(ctx context.Context, d time.Duration) error
	// serializable: the transactions are (Serializable).
	serializable bool
}

func withTxnSleep(sleep func(context.Context, time.Duration) error) TxnOption {
	return func(p *txnRetry) { p.sleep = sleep }
}

// backoff is the policy's sequence of waits.
func (p txnRetry) backoff() *backoff.ExponentialBackOff {
	b := backoff.NewExponentialBackOff()
	b.InitialInterval, b.MaxInterval = p.initial, max(p.max, p.initial)
	b.Multiplier, b.RandomizationFactor = 2, 0.5
	b.Reset()
	return b
}

// sleepCtx waits d, or until ctx ends, which it returns.
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
