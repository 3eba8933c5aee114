package backup

import (
	"context"
	"errors"
	"fmt"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/bellows-kv/bellows/storage-engine/blob"
	"github.com/bellows-kv/bellows/storage-engine/regionmap"
)

// Cluster is what a backup needs of the running cluster: a timestamp from
// its clock, and each region brought to it at its owner.
type Cluster interface {
	// Timestamp is a fresh timestamp of the cluster's clock (the
	// driving store's Now, as a transaction's start is): the backup's TS.
	Timestamp(ctx context.Context) (uint64, error)
	// Checkpoint brings region name to ts at its owner and copies its
	// files (CopyRegion there).
	Checkpoint(ctx context.Context, name string, ts uint64) (Region, error)
}

// mapAttempts bounds how often Create starts over because a split or merge
// changed the region map under it.
const mapAttempts = 3

// checkpointParallelism is how many regions are checkpointed at once: each
// is a flush and bucket copies at its owner.
const checkpointParallelism = 4

// Create takes backup id of the cluster whose bucket is bucket, and returns
// its record. It fails with ErrExists if id is recorded. A split or merge
// during the backup starts it over, at a new TS, up to mapAttempts times.
func Create(ctx context.Context, bucket *blob.Bucket, c Cluster, id string) (Backup, error) {
	if err := CheckID(id); err != nil {
		return Backup{}, err
	}
	if ok, err := bucket.Exists(ctx, recordKey(id)); err != nil || ok {
		if err == nil {
			err = fmt.Errorf("%w: %s (give another ID, or delete that one first)", ErrExists, id)
		}
		return Backup{}, err
	}
	if err := bucket.WriteAll(ctx, runningKey(id), []byte(time.Now().UTC().Format(time.RFC3339)+"\n"), false); err != nil {
		return Backup{}, err
	}
	var b Backup
	var err error
	for range mapAttempts {
		b, err = attempt(ctx, bucket, c, id)
		if !errors.Is(err, ErrMapChanged) {
			break
		}
	}
	if err == nil {
		err = save(ctx, bucket, b)
	}
	if err != nil {
		// The copies stay until a Delete collects them; the marker goes,
		// so that one can.
		_ = bucket.Delete(context.WithoutCancel(ctx), runningKey(id))
		return Backup{}, fmt.Errorf("backup %s: %w", id, err)
	}
	return b, bucket.Delete(ctx, runningKey(id))
}

func attempt(ctx context.Context, bucket *blob.Bucket, c Cluster, id string) (Backup, error) {
	before, err := regionmap.Load(ctx, bucket)
	if err != nil {
		return Backup{}, err
	}
	if before.Epoch == 0 {
		return Backup{}, fmt.Errorf("%s holds no region map: no cluster has started in it", bucket.URL())
	}
	b := Backup{ID: id, Started: time.Now().UTC(), MapEpoch: before.Epoch, NextID: before.NextID, Retired: before.Retired}
	if b.TS, err = c.Timestamp(ctx); err != nil {
		return Backup{}, fmt.Errorf("taking the backup's timestamp: %w", err)
	}
	b.Regions = make([]Region, len(before.Region))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(checkpointParallelism)
	for i, mr := range before.Region {
		g.Go(func() error {
			r, err := c.Checkpoint(gctx, mr.Name, b.TS)
			if err != nil {
				return fmt.Errorf("region %s: %w", mr.Name, err)
			}
			r.ID, r.Slot, r.Name, r.Start, r.End = mr.ID, mr.Slot, mr.Name, mr.Start, mr.End
			b.Regions[i] = r
			return nil
		})
	}
	werr := g.Wait()
	after, err := regionmap.Load(ctx, bucket)
	if err != nil {
		return Backup{}, errors.Join(werr, err)
	}
	if werr != nil && after.Epoch == before.Epoch {
		return Backup{}, werr
	}
	if after.Epoch != before.Epoch {
		return Backup{}, fmt.Errorf("%w (epoch %d to %d: a split or merge)", ErrMapChanged, before.Epoch, after.Epoch)
	}
	for _, r := range b.Regions {
		b.CopiedBytes += r.CopiedBytes
	}
	b.Finished = time.Now().UTC()
	return b, nil
}
