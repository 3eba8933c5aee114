package backup

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/bellows-kv/bellows/internal/contract"
	"github.com/bellows-kv/bellows/storage-engine/blob"
	"github.com/bellows-kv/bellows/storage-engine/kv"
	"github.com/bellows-kv/bellows/storage-engine/manifest"
	"github.com/bellows-kv/bellows/storage-engine/region"
	"github.com/bellows-kv/bellows/storage-engine/regionmap"
	"github.com/bellows-kv/bellows/storage-engine/sstable"
)

// restoreEpoch is the manifest number of a restored region's manifest, and
// the epoch in its files' keys (region.SSTKey): the stores that claim the
// regions commit 2 and up, and name their own files with those.
const restoreEpoch = 1

// Restore writes backup id of src into dst as a new cluster: the backup's
// files under each region's prefix, each region's manifest (released, so
// any store may claim it) and the region map at epoch 1. Stores started on
// dst serve exactly what a read at the backup's TS returned.
//
// It refuses a dst that holds any object (ErrTargetNotEmpty) and a backup
// with a file missing, of another size or unreadable (ErrIncomplete),
// before it writes anything. While it runs, dst holds
// contract.RestoreMarker, which stores refuse; a restore that fails leaves
// the marker, and dst must be emptied before another.
func Restore(ctx context.Context, src *blob.Bucket, id string, dst *blob.Bucket) (Backup, error) {
	b, err := Load(ctx, src, id)
	if err != nil {
		return Backup{}, err
	}
	if err := checkTarget(ctx, dst); err != nil {
		return Backup{}, err
	}
	if err := checkFiles(ctx, src, b); err != nil {
		return Backup{}, err
	}
	return b, restore(ctx, src, b, dst, replayed{ts: b.TS})
}

// checkTarget refuses a dst that holds any object.
func checkTarget(ctx context.Context, dst *blob.Bucket) error {
	if objs, err := dst.List(ctx, ""); err != nil {
		return err
	} else if len(objs) > 0 {
		return fmt.Errorf("%w: %s holds %d objects (%s, ...); restore into a new, empty bucket", ErrTargetNotEmpty, dst.URL(), len(objs), objs[0].Key)
	}
	return nil
}

// replayed is what a point-in-time restore adds to a backup: the archived
// versions above the backup's TS and at or below ts, by region name.
type replayed struct {
	ts       uint64
	versions map[string][]version
}

type version struct {
	key   kv.InternalKey
	value []byte
}

// restore writes b, and the versions of r, into dst (see Restore).
func restore(ctx context.Context, src *blob.Bucket, b Backup, dst *blob.Bucket, r replayed) error {
	marker, err := json.MarshalIndent(map[string]any{"restoring": b.ID, "from": src.URL(), "ts": r.ts, "started": time.Now().UTC()}, "", "  ")
	if err != nil {
		return err
	}
	if err := dst.WriteAll(ctx, contract.RestoreMarker, marker, true); err != nil {
		return err
	}
	m := regionmap.Map{NextID: b.NextID, Retired: b.Retired}
	for _, reg := range b.Regions {
		if err := restoreRegion(ctx, src, dst, b, reg, r.ts, r.versions[reg.Name]); err != nil {
			return fmt.Errorf("restoring region %s: %w", reg.Name, err)
		}
		m.Region = append(m.Region, regionmap.Region{ID: reg.ID, Name: reg.Name, Start: reg.Start, End: reg.End, Slot: reg.Slot})
	}
	if err := regionmap.Commit(ctx, dst, regionmap.Map{}, &m); err != nil {
		return err
	}
	by := fmt.Sprintf("bellows restore of backup %s (ts %d) from %s", b.ID, b.TS, src.URL())
	if r.ts != b.TS {
		by = fmt.Sprintf("bellows restore to ts %d from %s: backup %s (ts %d) and the WAL archive", r.ts, src.URL(), b.ID, b.TS)
	}
	cluster, err := json.MarshalIndent(map[string]any{"created": time.Now().UTC(), "by": by}, "", "  ")
	if err != nil {
		return err
	}
	if err := dst.WriteAll(ctx, contract.BucketMarker, cluster, true); err != nil {
		return err
	}
	return dst.Delete(ctx, contract.RestoreMarker)
}

// checkFiles returns an ErrIncomplete naming the first file of b that is
// missing from bucket or of another size.
func checkFiles(ctx context.Context, bucket *blob.Bucket, b Backup) error {
	objs, err := bucket.List(ctx, filesPrefix)
	if err != nil {
		return err
	}
	sizes := make(map[string]int64, len(objs))
	for _, o := range objs {
		sizes[o.Key] = o.Size
	}
	var errs []error
	for _, r := range b.Regions {
		for _, f := range r.Files {
			size, ok := sizes[f.Key]
			switch {
			case !ok:
				errs = append(errs, fmt.Errorf("region %s: file %s is missing", r.Name, f.Key))
			case size != f.Size:
				errs = append(errs, fmt.Errorf("region %s: file %s has %d bytes, the backup recorded %d", r.Name, f.Key, size, f.Size))
			}
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w: backup %s in %s: %w", ErrIncomplete, b.ID, bucket.URL(), errors.Join(errs...))
	}
	return nil
}

// restoreRegion copies r's files into its prefix in dst, checks that each
// opens as an SST, writes the replayed versions (if any) as one more SST
// and commits its manifest, flushed at ts.
func restoreRegion(ctx context.Context, src, dst *blob.Bucket, b Backup, r Region, ts uint64, versions []version) error {
	m := manifest.Manifest{
		Owner: "bellows restore", Released: true,
		FlushedTS: ts, ExactFromTS: r.ExactFromTS,
		Start: r.Start, End: r.End, MergedRuns: r.MergedRuns,
		NextFileNum: uint64(len(r.Files)) + 1,
	}
	for i, f := range r.Files {
		num := uint64(i) + 1
		key := region.SSTKey(restoreEpoch, num)
		obj := region.ObjectKey(r.Name, key)
		if err := src.CopyTo(ctx, dst, obj, f.Key); err != nil {
			return err
		}
		if err := checkSST(ctx, dst, obj); err != nil {
			return fmt.Errorf("%w: backup %s: file %s: %w", ErrIncomplete, b.ID, f.Key, err)
		}
		f.Num, f.Key = num, key
		m.Files = append(m.Files, f)
	}
	if len(versions) > 0 {
		num := m.NextFileNum
		key := region.SSTKey(restoreEpoch, num)
		f, err := writeVersions(ctx, dst, region.ObjectKey(r.Name, key), versions)
		if err != nil {
			return err
		}
		f.Num, f.Key = num, key
		m.Files = append(m.Files, f)
		m.NextFileNum++
	}
	return manifest.Commit(ctx, dst.Prefixed(region.BucketPrefix(r.Name)), manifest.Manifest{Number: restoreEpoch - 1}, &m)
}

// checkSST opens key as an SST: its footer, index and filter checksums.
func checkSST(ctx context.Context, bucket *blob.Bucket, key string) error {
	obj, err := bucket.OpenObject(ctx, key)
	if err != nil {
		return err
	}
	defer obj.Close()
	_, err = sstable.Open(obj, obj.Size(), key, nil)
	return err
}
