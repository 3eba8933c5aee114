package region

// Invariants of the latches:
//   - A write (Apply, CommitTxn) holds the latches of all its keys from
//     before a transaction's validation reads until its version is in the
//     memstore: so no other write of those keys commits between a
//     transaction's validation and its commit (LogBase's write locks in
//     the validation phase, Algorithm 1; TiKV's scheduler latches).
//   - Latches are taken in ascending slot order, all before any of the
//     region's locks (compactMu, manifestMu, commitMu, mu) and released
//     after them, so they cannot deadlock with each other or with those.

import (
	"hash/maphash"
	"slices"
	"sync"
)

// latchSlots is the number of latches: keys hash onto them, so two writes
// of different keys may share one (and wait for each other, briefly) but
// two writes of one key always do.
const latchSlots = 1024

type latches struct {
	seed  maphash.Seed
	slots [latchSlots]sync.Mutex
}

func newLatches() *latches { return &latches{seed: maphash.MakeSeed()} }

// slotsOf returns the sorted, distinct slots of b's keys.
func (l *latches) slotsOf(b *Batch) []uint16 {
	s := make([]uint16, 0, len(b.ops))
	for _, o := range b.ops {
		s = append(s, uint16(maphash.Bytes(l.seed, o.key)%latchSlots))
	}
	slices.Sort(s)
	return slices.Compact(s)
}

func (l *latches) lock(slots []uint16) {
	for _, i := range slots {
		l.slots[i].Lock()
	}
}

func (l *latches) unlock(slots []uint16) {
	for _, i := range slots {
		l.slots[i].Unlock()
	}
}
