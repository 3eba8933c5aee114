package region

import (
	"sync"
	"sync/atomic"
)

// visibility publishes commit timestamps in order: the visible timestamp
// advances past ts only when every batch with a timestamp ≤ ts has been
// applied (or has failed), so readers never see half of the commits that
// precede their read timestamp.
type visibility struct {
	mu      sync.Mutex
	cond    *sync.Cond
	pending []pendingTS // ascending; added under the region's commit lock
	visible atomic.Uint64
}

type pendingTS struct {
	ts   uint64
	done bool
}

func newVisibility(start uint64) *visibility {
	v := &visibility{}
	v.cond = sync.NewCond(&v.mu)
	v.visible.Store(start)
	return v
}

func (v *visibility) add(ts uint64) {
	v.mu.Lock()
	v.pending = append(v.pending, pendingTS{ts: ts})
	v.mu.Unlock()
}

// done marks ts finished and waits until it is visible.
func (v *visibility) done(ts uint64) {
	v.mu.Lock()
	for i := range v.pending {
		if v.pending[i].ts == ts {
			v.pending[i].done = true
			break
		}
	}
	n := 0
	for n < len(v.pending) && v.pending[n].done {
		n++
	}
	if n > 0 {
		v.visible.Store(v.pending[n-1].ts)
		v.pending = append(v.pending[:0], v.pending[n:]...)
		v.cond.Broadcast()
	}
	for v.visible.Load() < ts {
		v.cond.Wait()
	}
	v.mu.Unlock()
}

func (v *visibility) load() uint64 { return v.visible.Load() }

// waitFor returns once ts is visible: a commit with a timestamp ≥ ts has
// been added (the caller knows), so the visible timestamp gets there.
func (v *visibility) waitFor(ts uint64) {
	if v.visible.Load() >= ts {
		return
	}
	v.mu.Lock()
	for v.visible.Load() < ts {
		v.cond.Wait()
	}
	v.mu.Unlock()
}

// oldestInFlight is the smallest timestamp of a commit that has not yet
// added its versions to the memstore (or failed), or ^0 if none.
func (v *visibility) oldestInFlight() uint64 {
	v.mu.Lock()
	defer v.mu.Unlock()
	for _, p := range v.pending {
		if !p.done {
			return p.ts
		}
	}
	return ^uint64(0)
}
