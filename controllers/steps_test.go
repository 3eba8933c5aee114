package controllers

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	kvapi "github.com/bellows-kv/bellows/api/v1alpha1"
	"github.com/bellows-kv/bellows/internal/contract"
)

// runnerPass records what the runner did with it.
type runnerPass struct {
	pool     *kvapi.CompactionPool
	ran      []string
	outcomes []Result
	patches  int
}

func (p *runnerPass) owner() owner { return p.pool }

func testRunner(rec events.EventRecorder, patchErr error, steps ...step[*runnerPass]) runner[*runnerPass] {
	return runner[*runnerPass]{
		recorder: rec,
		steps:    append([]step[*runnerPass]{pauseStep[*runnerPass]("it")}, steps...),
		status:   func(p *runnerPass, r Result) { p.outcomes = append(p.outcomes, r) },
		patchStatus: func(_ context.Context, p *runnerPass) error {
			p.patches++
			return patchErr
		},
	}
}

func named(name string, r Result) step[*runnerPass] {
	return step[*runnerPass]{name, func(_ context.Context, p *runnerPass) Result {
		p.ran = append(p.ran, name)
		return r
	}}
}

// TestRunner: the steps run in order up to the first that does not
// continue; the status is computed and patched exactly once, whatever the
// outcome; the outcome maps to the ctrl.Result.
func TestRunner(t *testing.T) {
	boom := errors.New("boom")
	for _, tc := range []struct {
		name    string
		paused  bool
		steps   []step[*runnerPass]
		ran     string
		want    ctrl.Result
		wantErr bool
		reason  string // of the outcome, when it waits
		events  int
	}{
		{name: "all continue", steps: []step[*runnerPass]{named("a", Continue()), named("b", Continue())}, ran: "a b"},
		{name: "soonest requeue", steps: []step[*runnerPass]{named("a", Requeue(30*time.Second)), named("b", Continue()), named("c", Requeue(5*time.Second))},
			ran: "a b c", want: ctrl.Result{RequeueAfter: 5 * time.Second}},
		{name: "wait stops", steps: []step[*runnerPass]{named("a", Requeue(time.Minute)), named("b", Wait("Busy", "busy", 10*time.Second)), named("c", Continue())},
			ran: "a b", want: ctrl.Result{RequeueAfter: 10 * time.Second}, reason: "Busy"},
		{name: "wait for an event", steps: []step[*runnerPass]{named("a", Wait("Busy", "busy", 0))}, ran: "a", reason: "Busy"},
		{name: "fail stops", steps: []step[*runnerPass]{named("a", Requeue(time.Minute)), named("b", Fail(boom)), named("c", Continue())},
			ran: "a b", wantErr: true, events: 1},
		{name: "paused", paused: true, steps: []step[*runnerPass]{named("a", Continue())}, reason: kvapi.ReasonPaused},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := events.NewFakeRecorder(10)
			p := &runnerPass{pool: &kvapi.CompactionPool{ObjectMeta: metav1.ObjectMeta{Name: "p"}}}
			if tc.paused {
				p.pool.Annotations = map[string]string{contract.PausedAnnotation: "true"}
			}
			res, err := testRunner(rec, nil, tc.steps...).run(context.Background(), p)
			if got := strings.Join(p.ran, " "); got != tc.ran {
				t.Errorf("ran %q, want %q", got, tc.ran)
			}
			if res != tc.want {
				t.Errorf("result %+v, want %+v", res, tc.want)
			}
			if len(p.outcomes) != 1 || p.patches != 1 {
				t.Fatalf("status computed %d times, patched %d times; want once each", len(p.outcomes), p.patches)
			}
			outcome := p.outcomes[0]
			if tc.wantErr {
				if !errors.Is(err, boom) || err.Error() != "b: boom" || outcome.Err() != err {
					t.Errorf("error %v (outcome %v), want b: boom", err, outcome)
				}
			} else if err != nil || outcome.Err() != nil {
				t.Errorf("error %v (outcome %v)", err, outcome)
			}
			if tc.reason != "" && !outcome.Waiting(tc.reason) {
				t.Errorf("outcome %v, want a wait for %s", outcome, tc.reason)
			}
			if len(rec.Events) != tc.events {
				t.Errorf("%d events, want %d", len(rec.Events), tc.events)
			}
			if tc.events > 0 {
				if e := <-rec.Events; e != "Warning ReconcileError b: boom" {
					t.Errorf("event %q", e)
				}
			}
		})
	}

	// An unusable spec stops the pass like Fail, but for good: the error is
	// terminal (controller-runtime does not retry it; a new spec starts a
	// pass), names the field rather than the step, and the event and the
	// Degraded reason say InvalidSpec.
	rec := events.NewFakeRecorder(10)
	inv := &runnerPass{pool: &kvapi.CompactionPool{ObjectMeta: metav1.ObjectMeta{Name: "p"}}}
	res, err := testRunner(rec, nil, named("a", Invalid(boom)), named("b", Continue())).run(context.Background(), inv)
	if !errors.Is(err, reconcile.TerminalError(nil)) || !errors.Is(err, boom) || res != (ctrl.Result{}) {
		t.Errorf("invalid: result %+v, error %v; want a terminal boom", res, err)
	}
	if got := strings.Join(inv.ran, " "); got != "a" || inv.patches != 1 {
		t.Errorf("invalid: ran %q, patched %d times", got, inv.patches)
	}
	if o := inv.outcomes[0]; !o.IsInvalid() || o.FailReason() != kvapi.ReasonInvalidSpec || o.Err().Error() != "boom" {
		t.Errorf("invalid: outcome %v, reason %s", o, o.FailReason())
	}
	if e := drain(rec); len(e) != 1 || e[0] != "Warning InvalidSpec boom" {
		t.Errorf("invalid: events %q", e)
	}

	// A failed status write is returned, together with a step's error.
	p := &runnerPass{pool: &kvapi.CompactionPool{}}
	_, err = testRunner(events.NewFakeRecorder(10), errors.New("conflict"), named("a", Fail(boom))).run(context.Background(), p)
	if !errors.Is(err, boom) || err.Error() != "a: boom\nwrite status: conflict" {
		t.Errorf("error %q", err)
	}
	if p.patches != 1 {
		t.Errorf("patched %d times", p.patches)
	}
}
