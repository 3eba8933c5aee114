package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/bellows-kv/bellows/storage-engine/blob"
	"github.com/bellows-kv/bellows/storage-engine/region"
)

// Handing the idempotency-key table over with a region (see dedupe.go).
//
// A store releasing a region, once the region refuses writes and the keyed
// writes in progress have ended (settleTimeout at most), writes the keys it
// applied in the region within the window to region.AppliedRequestsKey,
// before the manifest that marks the region released: the next owner claims
// only after that manifest appears, so it always finds the object. Opening
// a region (a claim, or this store's own region after a restart) reads the
// object, if any, and seeds the region's table with the keys still within
// the window. Each release, and each flush (saveApplied), overwrites the
// object, and it holds only keys younger than dedupeMaxAge (at most
// dedupeMaxEntries), so it stays small.
//
// Writing it is best effort: if it fails the region is released anyway
// (logged), and a retry reaching the next owner may be applied twice, as
// before. A region's availability is worth more than the dedupe window.

// settleTimeout bounds the wait of a release for the keyed writes still in
// progress in the region; they are refused by then, so they end quickly.
const settleTimeout = 5 * time.Second

// appliedRequests is the object's content.
type appliedRequests struct {
	Region string `json:"region"`
	// ReleasedAt is when the releasing store wrote it (Unix nanoseconds).
	ReleasedAt int64           `json:"released_at"`
	Applied    []appliedRecord `json:"applied"`
}

// handOver is the hook of a's release (region.ReleaseWith): it writes a's
// applied keys for the next owner. It never fails the release.
func (s *Store) handOver(a *Assignment) func(context.Context) error {
	return func(ctx context.Context) error {
		log := s.opts.Region.Logger
		sctx, cancel := context.WithTimeout(ctx, settleTimeout)
		settled := s.applied.settle(sctx, a.Name())
		cancel()
		if !settled {
			// Handed over without them: their retries at the next
			// owner may be applied twice.
			log.Warn("keyed writes still in progress when the region was released; their keys are not handed over", "region", a.Name())
		}
		if settled && !s.applied.unsaved(a.Name()) {
			// The final flush saved every key (saveApplied), and none
			// came since: writing the same object again would only
			// lengthen the release or split, while writes are refused.
			log.Debug("the region's idempotency keys were saved by its final flush", "region", a.Name())
			return nil
		}
		recs, gen, at, full := s.applied.exportEncoded(a.Name(), true)
		if err := writeAppliedEncoded(ctx, s.opts.Region.Bucket, a.Name(), recs, full, time.Now()); err != nil {
			log.Error("handing over the region's idempotency keys failed; releasing it anyway (a write retried at its next owner may be applied twice)",
				"region", a.Name(), "keys", len(recs), "err", err)
			return nil
		}
		s.applied.markSaved(a.Name(), gen, at, full)
		log.Debug("handed over the region's idempotency keys", "region", a.Name(), "keys", len(recs))
		return nil
	}
}

// saveApplied is the BeforeFlushCommit hook of region name: the flush is
// about to delete WAL segments whose records carried idempotency keys, so
// the keys applied within the window are written to the same object a
// release writes, where a restart or the next owner finds them. Best
// effort, like the handover: a failure only shortens the window.
func (s *Store) saveApplied(ctx context.Context, name string, final bool) {
	if final {
		// Writes are refused: the keyed writes in progress end soon,
		// and with them in the object the release's handover has
		// nothing left to write.
		sctx, cancel := context.WithTimeout(ctx, settleTimeout)
		s.applied.settle(sctx, name)
		cancel()
	}
	// The final flush writes only the keys applied since the last whole
	// save (its pre-flush's), while writes are refused: a full table's
	// object took 30-90 ms of a split's refusal, its tail a few.
	recs, gen, at, full := s.applied.exportEncoded(name, final)
	if len(recs) == 0 {
		if !full {
			s.applied.markSaved(name, gen, at, false) // nothing since the whole save
		}
		return
	}
	if err := writeAppliedEncoded(ctx, s.opts.Region.Bucket, name, recs, full, time.Now()); err != nil {
		s.opts.Region.Logger.Warn("saving the region's idempotency keys before a flush failed (a write retried after a crash may be applied twice)",
			"region", name, "keys", len(recs), "err", err)
		return
	}
	s.applied.markSaved(name, gen, at, full)
}

// seedApplied seeds a's table from what outlived the region's last owner
// (this store before a restart, or another): the object the last flush or
// release wrote, if any, then the keys of the writes e's WAL replay met,
// which came after. The replayed keys' window counts from now: their
// applied-at times were not kept. A failure to read the object only
// shortens the window: it is logged.
func (s *Store) seedApplied(ctx context.Context, a *Assignment, e *region.Region) {
	defer func() {
		replayed := e.TakeReplayedRequests()
		recs := make([]appliedRecord, 0, len(replayed))
		now := time.Now().UnixNano()
		for _, q := range replayed {
			recs = append(recs, appliedRecord{ID: q.ID, Digest: fmt.Sprintf("%016x", q.Fingerprint), CommitTS: q.CommitTS, AppliedAt: now})
		}
		if n := s.applied.seed(a.Name(), recs); n > 0 {
			s.opts.Region.Logger.Info("took the idempotency keys of the writes replayed from the WAL", "region", a.Name(), "keys", n)
		}
	}()
	log := s.opts.Region.Logger
	recs, err := readAppliedRequests(ctx, s.opts.Region.Bucket, a.Name())
	if err == nil && recs == nil {
		// A split's daughter or a merge's region that never saved keys
		// of its own: its parents', written before the map commit
		// (split.go, merge.go).
		for _, p := range a.Span.Parents {
			var more []appliedRecord
			if more, err = readAppliedRequests(ctx, s.opts.Region.Bucket, p.Name); err != nil {
				break
			}
			recs = append(recs, more...)
		}
	}
	if err != nil {
		log.Warn("reading the idempotency keys handed over with the region; a write retried from its previous owner may be applied twice",
			"region", a.Name(), "err", err)
		return
	}
	if n := s.applied.seed(a.Name(), recs); n > 0 {
		log.Info("took over the region's idempotency keys", "region", a.Name(), "keys", n)
	}
}

// writeAppliedEncoded writes the object, appliedRequests as json.Marshal
// writes it (the same bytes), from records already encoded
// (dedupe.exportEncoded): joining them costs a copy, where marshalling
// 32768 records cost tens of milliseconds of a final flush, while writes
// are refused. Not full, they are a tail, written to
// region.AppliedRequestsTailKey.
func writeAppliedEncoded(ctx context.Context, b *blob.Bucket, name string, recs [][]byte, full bool, now time.Time) error {
	key := region.AppliedRequestsKey(name)
	if !full {
		key = region.AppliedRequestsTailKey(name)
	}
	regionJSON, err := json.Marshal(name)
	if err != nil {
		return err
	}
	size := len(`{"region":,"released_at":,"applied":[]}`) + len(regionJSON) + 20 + len(recs)
	for _, r := range recs {
		size += len(r)
	}
	data := make([]byte, 0, size)
	data = append(data, `{"region":`...)
	data = append(data, regionJSON...)
	data = append(data, `,"released_at":`...)
	data = strconv.AppendInt(data, now.UnixNano(), 10)
	data = append(data, `,"applied":[`...)
	for i, r := range recs {
		if i > 0 {
			data = append(data, ',')
		}
		data = append(data, r...)
	}
	data = append(data, "]}"...)
	return b.WriteAll(ctx, key, data, false)
}

// readAppliedRequests reads the object and its tail, the union of their
// keys (a key in both, or a tail older than the object, is a key applied
// all the same: seeding keeps one of each); none (no flush or release
// wrote one) is no keys.
func readAppliedRequests(ctx context.Context, b *blob.Bucket, name string) ([]appliedRecord, error) {
	var out []appliedRecord
	for _, key := range []string{region.AppliedRequestsKey(name), region.AppliedRequestsTailKey(name)} {
		data, err := b.ReadAll(ctx, key)
		if errors.Is(err, blob.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		var ar appliedRequests
		if err := json.Unmarshal(data, &ar); err != nil {
			return nil, fmt.Errorf("%s: %w", key, err)
		}
		out = append(out, ar.Applied...)
	}
	return out, nil
}
