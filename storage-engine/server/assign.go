package server

import (
	"context"
	"time"

	"github.com/bellows-kv/bellows/internal/contract"
)

// Assigner keeps a Store's assignment following the cluster's replica
// count (--replicas-from, or --region-owner's fixed REPLICAS) and the
// region map's owners: a region the balancer placed belongs to that
// ordinal, the others of slot i (the initial region i and every region
// split from it) to ordinal i mod N (Span.OwnerOf). When N or an owner
// changes only the regions whose owner changes move: this store claims the
// regions it now owns (Store.Reassign) and releases those it no longer owns,
// each once its new owner is ready (Ready), so that a region is not handed
// to a pod that is still starting. Until then it keeps serving it. It is
// Kubernetes-free: the store command feeds it from a StatefulSet and the
// headless Service's endpoints.
type Assigner struct {
	Store *Store
	// Spans are all the regions, in order, when the store follows no
	// region map (which otherwise lists them, splits included).
	Spans   []Span
	Ordinal int
	// Replicas is the current replica count; ok false while unknown
	// (the assignment then stays as it is).
	Replicas func() (n int, ok bool)
	// Ready says whether the store with this ordinal is ready to claim
	// the regions it is assigned; nil: every store is.
	Ready func(ordinal int) bool
	// Interval is how often Replicas and Ready are checked (they are
	// cheap: informer caches). Default 250ms.
	Interval time.Duration
	// ReleaseTimeout bounds the release of the regions a step gives up
	// (not the Run context: a shutdown must not cut a release short).
	// Default contract.DefaultReleaseTimeout.
	ReleaseTimeout time.Duration
}

// Target is the assignment this store should have now, given its current
// one: the regions its ordinal owns under the current replica count, plus
// those it still holds whose new owner is not ready. ok false when the
// replica count is unknown.
func (a *Assigner) Target() ([]Span, bool) {
	n, ok := a.Replicas()
	if !ok || n < 0 {
		return nil, false
	}
	held := map[string]bool{}
	for _, r := range a.Store.Assignments() {
		held[r.Name()] = true
	}
	all := a.Spans
	if spans := a.Store.allSpans(); spans != nil {
		all = spans
	}
	var out []Span
	for _, sp := range all {
		owner := sp.OwnerOf(n)
		switch {
		case owner == a.Ordinal:
			out = append(out, sp)
		case held[sp.Name] && owner >= 0 && a.Ready != nil && !a.Ready(owner):
			// Hold it until its new owner can take it.
			out = append(out, sp)
		}
	}
	return out, true
}

// Step re-assigns the store to Target once.
func (a *Assigner) Step(ctx context.Context) error {
	if _, ok := a.Target(); !ok {
		return nil
	}
	log := a.Store.opts.Region.Logger
	timeout := a.ReleaseTimeout
	if timeout <= 0 {
		timeout = contract.DefaultReleaseTimeout
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
	defer cancel()
	// The target is computed under the store's assignment lock, so a
	// split committed meanwhile is seen (a stale target would release its
	// daughters and claim its retired parent).
	var target []Span
	added, released, err := a.Store.ReassignFunc(rctx, func() []Span { target, _ = a.Target(); return target })
	if len(added) > 0 || len(released) > 0 {
		n, _ := a.Replicas()
		log.Info("region assignment changed", "ordinal", a.Ordinal, "replicas", n,
			"claiming", added, "released", released, "regions", len(target))
	}
	if err != nil {
		log.Error("releasing regions no longer assigned here; they stay owned by this store's WAL", "err", err)
	}
	return err
}

// Owns reports whether this store owns sp under the current replica count
// (true while the count is unknown: nothing is given away then).
func (a *Assigner) Owns(sp Span) bool {
	n, ok := a.Replicas()
	return !ok || sp.OwnerOf(n) == a.Ordinal
}

// Run steps every Interval until ctx ends.
func (a *Assigner) Run(ctx context.Context) {
	owns := a.Owns
	a.Store.owns.Store(&owns)
	a.Store.replicas.Store(&a.Replicas)
	every := a.Interval
	if every <= 0 {
		every = 250 * time.Millisecond
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		_ = a.Step(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
