package backup

import (
	"context"

	"github.com/bellows-kv/bellows/storage-engine/blob"
	"github.com/bellows-kv/bellows/storage-engine/hlc"
	"github.com/bellows-kv/bellows/storage-engine/manifest"
	"github.com/bellows-kv/bellows/storage-engine/region"
)

// LocalCluster is a Cluster whose regions are open in this process (tests,
// benchmarks): each checkpoint runs region.Checkpoint and CopyRegion as a
// store's Admin.Checkpoint does, with locks resolved in place (no
// transaction spans processes here).
type LocalCluster struct {
	Bucket  *blob.Bucket
	Clock   *hlc.Clock
	Regions map[string]*region.Region
}

// Timestamp is the clock's Now.
func (c *LocalCluster) Timestamp(context.Context) (uint64, error) { return c.Clock.Now(), nil }

// Checkpoint brings region name to ts and copies its files.
func (c *LocalCluster) Checkpoint(ctx context.Context, name string, ts uint64) (Region, error) {
	var out Region
	err := c.Regions[name].Checkpoint(ctx, ts, func(op func() error) error { return op() }, func(m manifest.Manifest) (err error) {
		out, err = CopyRegion(ctx, c.Bucket, name, m, ts)
		return err
	})
	return out, err
}
