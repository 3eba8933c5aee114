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
	"context"
	"errors"
	"slices"
	"time"

	"github.com/bellows-kv/bellows/storage-engine/blob"
	"github.com/bellows-kv/bellows/storage-engine/walarchive"

	"github.com/bellows-kv/bellows/storage-engine/kv"
	"github.com/bellows-kv/bellows/storage-engine/manifest"
	"github.com/bellows-kv/bellows/storage-engine/memstore"
	"github.com/bellows-kv/bellows/storage-engine/wal"
)

// replaySource calls fn with every record a region's WAL holds past its
// claimed manifest, in WAL order. local: the records' segments are this
// store's WAL directory's (read from it, or from its own stream), which the
// region then truncates as it flushes.
type replaySource struct {
	read  func(fn func(seg uint64, rec []byte) error) (wal.ReplayStats, error)
	local bool
}

// streamReplay reads the region's WAL stream of walID from the bucket
// (durability mode Bucket, or a stream fenced by a takeover): every record
// past the sealed segments at or below claim's FlushedTS.
func (r *Region) streamReplay(ctx context.Context, walID string, claim manifest.Manifest) replaySource {
	return replaySource{local: walID == r.walDir.ID, read: func(fn func(uint64, []byte) error) (wal.ReplayStats, error) {
		var st wal.ReplayStats
		s, err := walarchive.LoadStream(ctx, r.opts.Bucket, r.opts.Name, walID)
		if errors.Is(err, blob.ErrNotFound) {
			return st, nil // it never wrote a record
		}
		if err != nil {
			return st, err
		}
		last := ^uint64(0)
		err = walarchive.ReadSegments(ctx, r.opts.Bucket, s, claim.FlushedTS, func(seg uint64, rec []byte) error {
			if seg != last {
				st.Segments++
				last = seg
			}
			st.Records++
			st.Bytes += int64(len(rec)) + 8
			return fn(seg, rec)
		})
		return st, err
	}}
}

// replaySources are what an Open that claimed the region by claim, over
// manifest m, replays: the streams of owners taken over (m's, if this is a
// takeover, and any an earlier takeover left unflushed), fenced, oldest
// first; then this WAL's own records, which are newer than all of theirs.
func (r *Region) replaySources(ctx context.Context, m, claim manifest.Manifest) ([]replaySource, error) {
	var srcs []replaySource
	for _, walID := range claim.TakenOverWALs {
		if _, _, err := walarchive.Fence(ctx, r.opts.Bucket, r.opts.Name, walID, claim.Number); err != nil {
			return nil, errorf(r.opts.Name, "fencing the WAL stream of %s: %w", walID, err)
		}
		srcs = append(srcs, r.streamReplay(ctx, walID, claim))
	}
	switch {
	case m.WALID != "" && m.WALID != r.walDir.ID:
		// A released region, or one taken over: this directory holds
		// nothing of it (its earlier tenure's segments were removed).
	case r.opts.WALInBucket:
		// The stream holds every acknowledged record; the local files
		// may have lost an unsynced tail with the machine.
		srcs = append(srcs, r.streamReplay(ctx, m.WALID, claim))
	default:
		srcs = append(srcs, replaySource{local: true, read: func(fn func(uint64, []byte) error) (wal.ReplayStats, error) {
			return wal.Replay(r.opts.WALDir, claim.WALMinSegment, fn)
		}})
	}
	return srcs, nil
}

// replayWAL replays srcs, one after the other, into a new active memTable, which it returns, and
// sets the region's clock (lastTS), its transaction state, exactFrom, its
// WAL segments (from a local source), the requests it met
// (replayedRequests) and its Recovery.
func (r *Region) replayWAL(claim manifest.Manifest, srcs ...replaySource) (*memTable, error) {
	opts := r.opts
	mem := r.newMemTable(claim.WALMinSegment)
	r.lastTS = max(claim.FlushedTS, claim.MaxTS())
	r.txn = newTxnState(claim)
	r.exactFrom = claim.ExactFromTS
	segMax := map[uint64]uint64{}
	replayBegan := time.Now()
	var replayed wal.ReplayStats
	apply := func(src replaySource, seg uint64, rec []byte) error {
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
		if src.local {
			segMax[seg] = max(segMax[seg], ts)
		}
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
	}
	for _, src := range srcs {
		st, err := src.read(func(seg uint64, rec []byte) error { return apply(src, seg, rec) })
		replayed.Records += st.Records
		replayed.Segments += st.Segments
		replayed.Bytes += st.Bytes
		if err != nil {
			return nil, errorf(opts.Name, "replaying WAL: %w", err)
		}
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

// openLog opens the region's WAL for appends after replay, and its archive:
// a stream shipped behind the log, or, with WALInBucket, the stream the log
// commits every group to before it acknowledges it. The log starts above
// every segment the stream holds, so a region back on a WAL directory it
// left never writes where that directory's earlier tenure did.
func (r *Region) openLog(ctx context.Context, claim manifest.Manifest) error {
	opts := r.opts
	walOpts := wal.Options{Dir: opts.WALDir, Mode: opts.WALMode, SyncInterval: opts.WALSyncInterval, MinSegment: claim.WALMinSegment,
		HoldUntilArchived: opts.WALArchiveInterval > 0}
	if opts.WALArchiveInterval <= 0 {
		var err error
		r.log, err = wal.Open(walOpts)
		return err
	}
	segs, err := wal.Segments(opts.WALDir)
	if err != nil {
		return err
	}
	if len(segs) > 0 {
		walOpts.MinSegment = max(walOpts.MinSegment, segs[len(segs)-1]+1)
	}
	if opts.WALInBucket {
		s, first, err := walarchive.Durable(ctx, opts.Bucket, opts.Name, r.walDir.ID, opts.WALDir, claim.FlushedTS, claim.Number, walOpts.MinSegment)
		if err != nil {
			return errorf(opts.Name, "opening the WAL stream in the bucket: %w", err)
		}
		s.Clock = opts.Clock.Now
		walOpts.MinSegment, walOpts.Replica = first, s
		if r.log, err = wal.Open(walOpts); err != nil {
			return err
		}
		s.Attach(r.log)
		r.shipper = s
		return nil
	}
	s, err := walarchive.Resume(ctx, opts.Bucket, opts.Name, r.walDir.ID, opts.WALDir, claim.FlushedTS, nil)
	if err != nil {
		return errorf(opts.Name, "resuming the WAL archive: %w", err)
	}
	s.Clock = opts.Clock.Now
	walOpts.MinSegment = max(walOpts.MinSegment, s.NextSegment())
	if r.log, err = wal.Open(walOpts); err != nil {
		return err
	}
	s.Attach(r.log)
	r.shipper = s
	return nil
}
