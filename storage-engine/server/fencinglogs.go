package server

// Collection of the fencing logs (docs/failover.md §7): the region map's
// epochs, the balancer lease's terms and every store's liveness records
// are numbered create-if-absent histories that would otherwise grow by an
// object per map change and per renewal. The balancer lease holder deletes
// what is past its retention (or, in a cluster of one store, which takes
// no lease, that store). The lease only saves duplicate work: collection
// is safe beside writers, readers and another collection
// (regionmap/fencelog).

import (
	"context"
	"errors"
	"time"

	"github.com/bellows-kv/bellows/storage-engine/backup"
	"github.com/bellows-kv/bellows/storage-engine/blob"
	"github.com/bellows-kv/bellows/storage-engine/liveness"
	"github.com/bellows-kv/bellows/storage-engine/regionmap"
)

// CollectMapEpochs deletes the region map epochs past their retention,
// keeping every epoch from the oldest backup's on: a backup names the
// epoch it copied, and a point-in-time restore reaches back to the oldest
// backup (the WAL archive is pruned to it as well), so the map of every
// time a restore can reach stays. It returns how many it deleted.
func CollectMapEpochs(ctx context.Context, b *blob.Bucket, now time.Time, maxOffset time.Duration) (int, error) {
	return regionmap.CollectEpochs(ctx, b, now, maxOffset, func(ctx context.Context) (uint64, error) {
		return oldestBackupEpoch(ctx, b)
	})
}

// oldestBackupEpoch is the lowest map epoch a backup in b names; 0: none.
func oldestBackupEpoch(ctx context.Context, b *blob.Bucket) (uint64, error) {
	backups, err := backup.List(ctx, b)
	if err != nil {
		return 0, err
	}
	var oldest uint64
	for _, bk := range backups {
		if bk.MapEpoch > 0 && (oldest == 0 || bk.MapEpoch < oldest) {
			oldest = bk.MapEpoch
		}
	}
	return oldest, nil
}

// CollectLeaseLogs deletes the balancer lease's terms and the liveness
// records of every store that has any, past their retention: those of
// stores a scale-down removed too (each store keeps its newest records, so
// one that a scale-up brings back finds its predecessor's lease). It
// returns how many it deleted.
func CollectLeaseLogs(ctx context.Context, b *blob.Bucket, now time.Time, maxOffset time.Duration) (int, error) {
	n, err := regionmap.CollectLeaseTerms(ctx, b, now, maxOffset)
	errs := []error{err}
	stores, err := liveness.Stores(ctx, b)
	errs = append(errs, err)
	for _, store := range stores {
		k, err := liveness.Collect(ctx, b, store, now, maxOffset)
		n += k
		errs = append(errs, err)
	}
	return n, errors.Join(errs...)
}

// collects reports whether this store's balancer collects the fencing
// logs: it holds the lease, or the cluster has one store.
func (b *Balancer) collects() (stores int, ok bool) {
	n, known := b.Stores()
	return n, known && (n < 2 || b.leaseHeld.Load())
}

// collectLeaseLogs is the balancer's pass over the lease terms and the
// liveness records.
func (b *Balancer) collectLeaseLogs(ctx context.Context) {
	if _, ok := b.collects(); !ok {
		return
	}
	s := b.KV.store
	if _, err := CollectLeaseLogs(ctx, s.opts.Region.Bucket, time.Now(), b.MaxClockOffset); err != nil && ctx.Err() == nil {
		s.opts.Region.Logger.Warn("collecting the balancer lease's terms and the liveness records", "err", err)
	}
}

// collectMapEpochs is the balancer's pass over the region map's epochs.
func (b *Balancer) collectMapEpochs(ctx context.Context) {
	if _, ok := b.collects(); !ok {
		return
	}
	s := b.KV.store
	s.collectMapEpochs(ctx, b.MaxClockOffset)
}

func (s *Store) collectMapEpochs(ctx context.Context, maxOffset time.Duration) {
	n, err := CollectMapEpochs(ctx, s.opts.Region.Bucket, time.Now(), maxOffset)
	switch {
	case err != nil && ctx.Err() == nil:
		s.opts.Region.Logger.Warn("collecting old region map epochs", "err", err)
	case n > 0:
		s.opts.Region.Logger.Info("deleted old region map epochs", "epochs", n)
	}
}
