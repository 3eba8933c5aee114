package controllers

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	kvapi "github.com/bellows-kv/bellows/api/v1alpha1"
	"github.com/bellows-kv/bellows/internal/contract"
)

// A reconcile pass is a list of steps run in order by one runner for both
// reconcilers. Each step returns a Result:
//
//   - Continue: the next step runs. Requeue(d) is a Continue that also asks
//     for another pass within d (the autoscaler's sync period).
//   - Wait: the pass stops here, without an error, until something changes:
//     the reason and message go into status, and the pass is requeued after
//     the given duration (0: only on the next watch event).
//   - Fail: the pass stops with an error: status records Degraded, the
//     object gets a Warning event, and controller-runtime retries with
//     backoff.
//   - Invalid: a Fail that no retry can fix, because the stored spec has a
//     value the operator cannot use: status records Degraded with reason
//     InvalidSpec, the object gets a Warning event, and the pass is not
//     retried (a new spec starts a new pass through the watch).
//
// After the steps, however they ended, the runner computes the status from
// the pass state and the outcome, and patches it: exactly once per pass, and
// from no other place.

type resultKind int

const (
	continueKind resultKind = iota
	waitKind
	failKind
)

// Result is how a step ended.
type Result struct {
	kind    resultKind
	reason  string
	message string
	after   time.Duration
	err     error
	// invalid marks a Fail caused by the spec (Invalid).
	invalid bool
}

// Continue lets the next step run.
func Continue() Result { return Result{} }

// Requeue lets the next step run and asks for another pass within after.
func Requeue(after time.Duration) Result { return Result{after: after} }

// Wait stops the pass: reason and message describe what it waits for (the
// status records them), and after is when to look again (0: on the next
// event only).
func Wait(reason, message string, after time.Duration) Result {
	return Result{kind: waitKind, reason: reason, message: message, after: after}
}

// Fail stops the pass with err.
func Fail(err error) Result { return Result{kind: failKind, err: err} }

// Invalid stops the pass because the spec cannot be used; err says which
// field has which value, for the user.
func Invalid(err error) Result { return Result{kind: failKind, err: err, invalid: true} }

// FailIf is Fail(err) when err is not nil, else Continue.
func FailIf(err error) Result {
	if err != nil {
		return Fail(err)
	}
	return Continue()
}

// Waiting reports whether the pass stopped to wait for reason.
func (r Result) Waiting(reason string) bool { return r.kind == waitKind && r.reason == reason }

// Err is the error of a failed pass, naming the step (not for Invalid,
// whose error names the field); nil otherwise.
func (r Result) Err() error { return r.err }

// IsInvalid reports whether the pass stopped on an unusable spec (Invalid).
func (r Result) IsInvalid() bool { return r.kind == failKind && r.invalid }

// FailReason is the Degraded reason of a failed pass: InvalidSpec or
// ReconcileError.
func (r Result) FailReason() string {
	if r.invalid {
		return kvapi.ReasonInvalidSpec
	}
	return kvapi.ReasonReconcileError
}

func (r Result) String() string {
	switch r.kind {
	case waitKind:
		return fmt.Sprintf("wait %s (%s), requeue after %s", r.reason, r.message, r.after)
	case failKind:
		if r.invalid {
			return "invalid spec: " + r.err.Error()
		}
		return "fail: " + r.err.Error()
	}
	if r.after > 0 {
		return "continue, requeue after " + r.after.String()
	}
	return "continue"
}

// owner is what a reconciler reconciles: a KVCluster or a CompactionPool.
type owner interface {
	client.Object
	IsPaused() bool
}

// pass is the state of one reconcile pass: the steps fill it in, and the
// status is computed from it.
type pass interface {
	owner() owner
}

// step is one named part of a reconcile pass over the pass state P.
type step[P pass] struct {
	name string
	run  func(context.Context, P) Result
}

// runner runs a reconcile pass: the steps, then the status.
type runner[P pass] struct {
	recorder events.EventRecorder
	steps    []step[P]
	// status computes the owner's whole status from the pass state and the
	// outcome (the first result that is not Continue). It does no I/O.
	status func(P, Result)
	// patchStatus writes the status subresource if it changed.
	patchStatus func(context.Context, P) error
}

// run runs the steps until the first one that does not continue, computes
// and writes the status, and maps the outcome to a ctrl.Result.
func (r runner[P]) run(ctx context.Context, p P) (ctrl.Result, error) {
	outcome := Continue()
	var requeue time.Duration
	for _, s := range r.steps {
		res := s.run(ctx, p)
		if res.kind == continueKind {
			requeue = soonest(requeue, res.after)
			continue
		}
		if res.kind == failKind && !res.invalid {
			res.err = fmt.Errorf("%s: %w", s.name, res.err)
		}
		outcome = res
		break
	}
	r.status(p, outcome)
	if err := r.patchStatus(ctx, p); err != nil {
		return ctrl.Result{}, errors.Join(outcome.err, fmt.Errorf("write status: %w", err))
	}
	switch outcome.kind {
	case failKind:
		r.recorder.Eventf(p.owner(), nil, corev1.EventTypeWarning, outcome.FailReason(), "Reconcile", "%v", outcome.err)
		if outcome.invalid {
			return ctrl.Result{}, reconcile.TerminalError(outcome.err)
		}
		return ctrl.Result{}, outcome.err
	case waitKind:
		return ctrl.Result{RequeueAfter: soonest(requeue, outcome.after)}, nil
	}
	return ctrl.Result{RequeueAfter: requeue}, nil
}

// soonest is the shorter of two requeue delays, where 0 means none.
func soonest(a, b time.Duration) time.Duration {
	if a == 0 || (b > 0 && b < a) {
		return b
	}
	return a
}

// pauseStep is step 0 of both reconcilers: a paused owner stops the pass,
// and its status says so. what names what the operator leaves alone.
func pauseStep[P pass](what string) step[P] {
	return step[P]{"pause", func(_ context.Context, p P) Result {
		if !p.owner().IsPaused() {
			return Continue()
		}
		return Wait(kvapi.ReasonPaused, "the "+contract.PausedAnnotation+" annotation is set: the operator leaves "+what+" alone", 0)
	}}
}
