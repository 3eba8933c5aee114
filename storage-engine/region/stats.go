package region

import (
	"sync/atomic"

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
