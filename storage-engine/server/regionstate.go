package server

import (
	"errors"
	"time"

	kvpb "github.com/bellows-kv/bellows/proto/bellows/kv/v1"
	"github.com/bellows-kv/bellows/storage-engine/region"
)

// regionState is one open region's readings, taken together: what the
// per-region metrics export (regionGauges) and the Regions RPC answers, so
// the two always say the same and neither reads a region twice.
type regionState struct {
	sstFiles        int
	dataBytes       int64
	memstoreBytes   int64
	walBytes        int64
	oldestUnflushed time.Duration // 0: every write is in an SST
	requests        uint64
	requestRate     float64
	compaction      region.CompactionState
	warmupProgress  float64
	switchedAt      time.Time // zero before the first compaction
	pipeline        int
	recovery        region.Recovery
	cachedRatio     float64
	archiveLag      time.Duration // 0: the WAL is not archived
	archivePending  int64
	// compactionWait is how long the oldest wanted compaction has waited
	// to start (0: none waits).
	compactionWait time.Duration
}

// readRegion reads e, which a serves here.
func readRegion(a *Assignment, e *region.Region, now time.Time) regionState {
	st := regionState{
		sstFiles:       e.FileCount(),
		dataBytes:      e.DataBytes(),
		memstoreBytes:  e.MemstoreUsedBytes(),
		walBytes:       e.WALBytes(),
		requests:       a.load.total.Load(),
		requestRate:    a.load.Rate(),
		compaction:     e.CompactionState(),
		warmupProgress: float64(e.WarmupStats().Progress.Load()) / 1e6,
		pipeline:       e.PipelineSegments(),
		recovery:       e.Recovery(),
		cachedRatio:    e.CachedFraction(),
	}
	as := e.ArchiveStatus()
	st.archiveLag, st.archivePending = as.Lag(now), as.PendingBytes
	if t := st.compaction.WaitingSince; !t.IsZero() {
		st.compactionWait = max(now.Sub(t), 0)
	}
	if t := e.OldestUnflushed(); !t.IsZero() {
		st.oldestUnflushed = now.Sub(t)
	}
	if ns := e.WarmupStats().SwitchedAt.Load(); ns != 0 {
		st.switchedAt = time.Unix(0, ns)
	}
	return st
}

// regionInfo is a's entry in a Regions answer of the store named store.
func regionInfo(store string, a *Assignment, now time.Time) *kvpb.RegionInfo {
	info := &kvpb.RegionInfo{Name: a.Name(), Start: a.Span.Start, End: a.Span.End, Store: store}
	e, err := a.Engine()
	if err != nil {
		info.Waiting = err.Error()
		if fo := (*FailingOverError)(nil); errors.As(err, &fo) {
			info.FailingOverFrom = fo.Store
		}
		return info
	}
	st := readRegion(a, e, now)
	info.SstFiles = uint32(st.sstFiles)
	info.DataBytes = st.dataBytes
	info.MemstoreBytes = st.memstoreBytes
	info.WalBytes = st.walBytes
	info.OldestUnflushedMs = st.oldestUnflushed.Milliseconds()
	info.Requests = st.requests
	info.RequestsPerSecond = st.requestRate
	info.Compaction = &kvpb.RegionCompaction{Running: st.compaction.Running, Queued: st.compaction.Queued,
		Location: st.compaction.Location, Worker: st.compaction.Worker}
	info.WarmupProgress = st.warmupProgress
	info.CachedRatio = st.cachedRatio
	return info
}
