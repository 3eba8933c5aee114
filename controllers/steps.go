package controllers

import (
	"context"
	"fmt"
)

// step is one guarded part of a reconcile pass over the pass state P.
type step[P any] struct {
	name string
	run  func(context.Context, P) error
}

// runSteps runs steps in order and stops at the first failure, naming the
// step in the error; status is written by the caller either way.
func runSteps[P any](ctx context.Context, p P, steps []step[P]) error {
	for _, s := range steps {
		if err := s.run(ctx, p); err != nil {
			return fmt.Errorf("%s: %w", s.name, err)
		}
	}
	return nil
}
