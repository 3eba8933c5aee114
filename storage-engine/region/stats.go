package region

import (
	"sync/atomic"
	"time"

	"github.com/bellows-kv/bellows/storage-engine/manifest"
)

// Stats are a region's cumulative counters.
type Stats struct {
	Writes, Gets, Scans                    atomic.Uint64
	Flushes, FlushErrors, WriteStalls      atomic.Uint64
	CompactionsRequested, CompactionFailed atomic.Uint64
	CompactionsDone                        atomic.Uint64
	CompactionRequestedBytes               atomic.Uint64
	// FlushedBytes and CompactionWrittenBytes are the SST bytes written by
	// flushes and by compactions (the write volume, WAL apart).
	FlushedBytes, CompactionWrittenBytes atomic.Uint64
	// WALForcedFlushes counts disk flushes forced by MaxWALBytes.
	WALForcedFlushes atomic.Uint64
}

func (s *Stats) recordWrite(n int) { s.Writes.Add(uint64(n)) }
func (s *Stats) recordGet()        { s.Gets.Add(1) }
func (s *Stats) recordScan()       { s.Scans.Add(1) }
func (s *Stats) recordFlush()      { s.Flushes.Add(1) }
func (s *Stats) recordFlushError() { s.FlushErrors.Add(1) }
func (s *Stats) recordStall()      { s.WriteStalls.Add(1) }
func (s *Stats) recordCompactionRequested(bytes int64) {
	s.CompactionsRequested.Add(1)
	s.CompactionRequestedBytes.Add(uint64(bytes))
}
func (s *Stats) recordCompaction(ok bool) {
	if ok {
		s.CompactionsDone.Add(1)
	} else {
		s.CompactionFailed.Add(1)
	}
}

// Stats returns the region's counters.
func (r *Region) Stats() *Stats { return &r.stats }

// FileCount is the number of live SSTs.
func (r *Region) FileCount() int {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return len(r.current.tables)
}

// Manifest returns the region's current manifest.
func (r *Region) Manifest() manifest.Manifest {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.manifest.Clone()
}

// TableMemoryBytes is the memory the open SSTs hold outside the block cache
// (indexes and bloom filters).
func (r *Region) TableMemoryBytes() int64 {
	r.mu.RLock()
	defer r.mu.RUnlock()
	var n int64
	for _, t := range r.current.tables {
		n += t.reader.MemoryBytes()
	}
	return n
}

// Recovery is what opening the region took: the WAL it replayed (the
// records not yet in an SST when it last closed or crashed) and how long.
type Recovery struct {
	ReplayedBytes    int64
	ReplayedRecords  int
	ReplayedSegments int
	// Replay is the WAL replay alone; Open is all of Open (manifest load
	// and claim, the SSTs' opening, the replay).
	Replay, Open time.Duration
}

// Recovery says what opening the region replayed and how long it took.
func (r *Region) Recovery() Recovery { return r.recovery }

// TakeReplayedRequests returns the idempotency keys (Batch.WithRequest) of
// the newest Options.KeepReplayedRequests writes Open replayed from the
// WAL, oldest first: what a retry of a write applied before a crash must be
// answered from. The first call takes them; later calls return nil.
func (r *Region) TakeReplayedRequests() []AppliedRequest {
	r.mu.Lock()
	defer r.mu.Unlock()
	reqs := r.replayedRequests
	r.replayedRequests = nil
	return reqs
}

// OldestUnflushed is when the oldest write not yet in an SST was written
// (zero when every write is): the age of the WAL a restart would replay.
// A store flushes a region whose oldest write is older than its bound
// (server.walBound).
func (r *Region) OldestUnflushed() time.Time {
	r.mu.RLock()
	defer r.mu.RUnlock()
	var oldest int64
	for _, mt := range append([]*memTable{r.mem}, r.imm...) {
		if t := mt.firstWrite.Load(); t != 0 && (oldest == 0 || t < oldest) {
			oldest = t
		}
	}
	if oldest == 0 {
		return time.Time{}
	}
	return time.Unix(0, oldest)
}

// MemstoreBytes is the size at which the region's memstore is flushed: its
// share of the store's memstore budget.
func (r *Region) MemstoreBytes() int64 { return r.opts.MemstoreBytes }
