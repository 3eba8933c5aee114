package region

// WAL replay: rebuilding, at Open, the memstore and transaction state that a
// region held in memory when its last owner stopped.
//
// # Invariants
//
//   - A record at or below the claimed manifest's FlushedTS is already in its
//     SSTs (a transaction record: in its locks and outcomes), so it is only
//     counted, never applied again; every later record is applied in WAL
//     order, which is timestamp order.
//   - Replay runs before the region is shared (Open has not returned), so it
//     takes none of compactMu, manifestMu, commitMu or mu; only the
//     transaction state's leaf lock, which applying a record takes.

import (
	"cmp"
	"slices"
	"time"

	"github.com/bellows-kv/bellows/storage-engine/kv"
	"github.com/bellows-kv/bellows/storage-engine/manifest"
	"github.com/bellows-kv/bellows/storage-engine/memstore"
	"github.com/bellows-kv/bellows/storage-engine/wal"
)

// replayWAL replays the WAL from claim's WALMinSegment into a new active
// memTable, which it returns, and sets the region's clock (lastTS), its
// transaction state, exactFrom, its WAL segments, the requests it met
// (replayedRequests) and its Recovery.
func (r *Region) replayWAL(claim manifest.Manifest) (*memTable, error) {
	opts := r.opts
	mem := r.newMemTable(claim.WALMinSegment)
	r.lastTS = max(claim.FlushedTS, claim.MaxTS())
	r.txn = newTxnState(claim)
	r.exactFrom = claim.ExactFromTS
	segMax := map[uint64]uint64{}
	replayBegan := time.Now()
	replayed, err := wal.Replay(opts.WALDir, claim.WALMinSegment, func(seg uint64, rec []byte) error {
		var ts, versionTS uint64
		var ops []op
		var txnRec *txnRecord
		var err error
		if isTxnRecord(rec) {
			ts, txnRec, err = decodeTxnRecord(rec)
			if txnRec != nil {
				ops, versionTS = txnRec.versions, txnRec.commitTS
			}
		} else {
			var b *Batch
			ts, b, err = decodeBatch(rec)
			if b != nil {
				ops, versionTS = b.ops, ts
				if b.req != nil && opts.KeepReplayedRequests > 0 {
					// Flushed or not, the request was applied. Only
					// the newest are kept: trimmed when twice over.
					r.replayedRequests = append(r.replayedRequests, AppliedRequest{Request: *b.req, CommitTS: ts})
					if n := len(r.replayedRequests); n >= 2*opts.KeepReplayedRequests {
						r.replayedRequests = append(r.replayedRequests[:0], r.replayedRequests[n-opts.KeepReplayedRequests:]...)
					}
				}
			}
		}
		if err != nil {
			return err
		}
		segMax[seg] = max(segMax[seg], ts)
		if ts <= claim.FlushedTS {
			return nil
		}
		if txnRec != nil {
			r.txnVersions.Store(r.txnVersions.Load() || len(txnRec.versions) > 0)
			r.txn.apply(txnRec)
			mem.txnRecs = append(mem.txnRecs, txnRec)
			mem.txnMinTS.CompareAndSwap(0, ts)
		}
		active := mem.ms.Active()
		for _, o := range ops {
			active.Add(kv.InternalKey{UserKey: o.key, TS: versionTS, Kind: o.kind}, o.value)
		}
		mem.maxTS = max(mem.maxTS, ts)
		r.lastTS = max(r.lastTS, ts)
		if mem.ms.NeedsReplayFlush() && mem.ms.PushActive() {
			// Everything replayed is visible once the region opens.
			horizon := r.gcHorizon(r.lastTS)
			if opts.Retention.DropsVersions() {
				r.exactFrom = max(r.exactFrom, horizon)
			}
			mem.ms.FlushInMemory(memstore.Retention{MaxVersions: opts.Retention.MaxVersions, Horizon: horizon})
		}
		return nil
	})
	if err != nil {
		return nil, errorf(opts.Name, "replaying WAL: %w", err)
	}
	if n := len(r.replayedRequests); n > opts.KeepReplayedRequests {
		r.replayedRequests = slices.Clone(r.replayedRequests[n-opts.KeepReplayedRequests:])
	}
	r.recovery = Recovery{
		ReplayedBytes: replayed.Bytes, ReplayedRecords: replayed.Records, ReplayedSegments: replayed.Segments,
		Replay: time.Since(replayBegan),
	}
	if mem.maxTS > 0 {
		mem.firstWrite.Store(time.Now().UnixNano())
	}
	for seg, ts := range segMax {
		r.walSegs = append(r.walSegs, walSegment{seg: seg, maxTS: ts})
	}
	slices.SortFunc(r.walSegs, func(a, b walSegment) int { return cmp.Compare(a.seg, b.seg) })
	return mem, nil
}
