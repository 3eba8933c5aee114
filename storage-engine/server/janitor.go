package server

// The janitor of retired regions (docs/regions.md, "Deletion"): a split's
// daughters (and a merge's region) reference their parents' files, which stay under the parent's
// prefix; once no live region's newest manifest names a file of a retired
// region (every daughter compacted its references away), the retired
// region's objects are deleted.
//
// Why it cannot delete a file still needed: references are only ever
// copied from a live region's manifest (a split derives them from its
// parent's final manifest), so once no live manifest names a home, no later
// one can. The one window is a split whose map commit is done and whose
// daughters have not derived their manifests yet: they will copy their
// parent's references then. So a pass deletes nothing while any live
// region that has a parent has no manifest of its own.

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/bellows-kv/bellows/internal/contract"
	"github.com/bellows-kv/bellows/storage-engine/manifest"
	"github.com/bellows-kv/bellows/storage-engine/region"
)

// CollectRetired deletes the objects of the retired regions of the store's
// region map that no live region references any more, and returns their
// names. It reads every live region's newest manifest: run it seldom.
func (s *Store) CollectRetired(ctx context.Context) ([]string, error) {
	m, ok := s.RegionMap()
	if !ok || len(m.Retired) == 0 {
		return nil, nil
	}
	b := s.opts.Region.Bucket
	referenced := map[string]bool{}
	for _, r := range m.Region {
		mf, err := manifest.Load(ctx, b.Prefixed(region.BucketPrefix(r.Name)))
		if err != nil {
			return nil, fmt.Errorf("janitor: %s: %w", r.Name, err)
		}
		if mf.Number == 0 && len(r.Parents) > 0 {
			// A daughter (or merged region) yet to derive its manifest
			// will reference its parents' files (and their homes): not
			// now.
			return nil, nil
		}
		for _, f := range mf.Files {
			if f.Home != "" {
				referenced[f.Home] = true
			}
		}
	}
	var deleted []string
	for _, name := range m.Retired {
		if referenced[name] {
			continue
		}
		gone, err := deletePrefix(ctx, s, region.BucketPrefix(name))
		if err != nil {
			return deleted, fmt.Errorf("janitor: %s: %w", name, err)
		}
		if gone > 0 {
			deleted = append(deleted, name)
			s.opts.Region.Logger.Info("deleted a retired region's files: no live region references them", "region", name, "objects", gone)
		}
	}
	return deleted, nil
}

// deletePrefix deletes every object under prefix: the files first, the
// manifests last, so a pass cut short leaves a manifest naming at most
// files that are gone, of a region nobody opens (the map retired it).
func deletePrefix(ctx context.Context, s *Store, prefix string) (int, error) {
	b := s.opts.Region.Bucket
	objs, err := b.List(ctx, prefix)
	if err != nil {
		return 0, err
	}
	var manifests []string
	n := 0
	for _, o := range objs {
		if strings.HasPrefix(o.Key, prefix+"manifest/") {
			manifests = append(manifests, o.Key)
			continue
		}
		if err := b.Delete(ctx, o.Key); err != nil {
			return n, err
		}
		n++
	}
	for _, k := range manifests {
		if err := b.Delete(ctx, k); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

// runJanitor collects retired regions every interval until ctx ends. A
// store without a liveness lease is a cluster's only store (no balancer
// lease is taken): it also collects the map's old epochs, which a
// balancer collects otherwise (fencinglogs.go).
func (s *Store) runJanitor(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if _, err := s.CollectRetired(ctx); err != nil && ctx.Err() == nil {
			s.opts.Region.Logger.Warn("collecting retired regions", "err", err)
		}
		if s.opts.Liveness == nil {
			s.collectMapEpochs(ctx, contract.DefaultMaxClockOffset)
		}
	}
}
