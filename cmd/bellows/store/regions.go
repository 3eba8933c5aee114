package store

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/bellows-kv/bellows/storage-engine/blob"
	"github.com/bellows-kv/bellows/storage-engine/regionmap"
	"github.com/bellows-kv/bellows/storage-engine/server"
)

// bootstrapRegionMap returns the cluster's region map from the bucket,
// committing its first epoch from the flags' regions (--regions,
// --split-keys) when the bucket has none: a new cluster, or one written
// before regions could split, whose regions have exactly those names.
func bootstrapRegionMap(ctx context.Context, bucket *blob.Bucket, initial []server.Span, log *slog.Logger) (regionmap.Map, error) {
	first, err := server.InitialMap(initial)
	if err != nil {
		return regionmap.Map{}, err
	}
	m, err := regionmap.Bootstrap(ctx, bucket, first)
	if err != nil {
		return regionmap.Map{}, fmt.Errorf("region map: %w", err)
	}
	if m.Epoch > 1 || len(m.Region) != len(initial) {
		log.Info("regions from the bucket's region map (the region flags only make a new cluster's first)",
			"epoch", m.Epoch, "regions", len(m.Region))
	}
	return m, nil
}
