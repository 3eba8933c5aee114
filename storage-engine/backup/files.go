package backup

import (
	"bytes"
	"context"
	"fmt"

	"github.com/bellows-kv/bellows/storage-engine/blob"
	"github.com/bellows-kv/bellows/storage-engine/manifest"
	"github.com/bellows-kv/bellows/storage-engine/region"
	"github.com/bellows-kv/bellows/storage-engine/sstable"
)

// CopyRegion copies the files of region name's manifest m, checkpointed at
// ts (region.Checkpoint, whose callback holds the files open), to
// backups/sst/ in the same bucket, and returns the region's part of a
// backup at ts (without its place in the map: ID and Slot).
//
// A file at or below ts is copied inside the bucket unless a backup copied
// it before (keys are never reused, so the same key is the same bytes). A
// file with versions above ts is rewritten with only those at or below
// it; one with none is left out.
func CopyRegion(ctx context.Context, bucket *blob.Bucket, name string, m manifest.Manifest, ts uint64) (Region, error) {
	out := Region{Name: name, Start: m.Start, End: m.End, ExactFromTS: m.ExactFromTS, MergedRuns: m.MergedRuns}
	if out.Start == nil {
		out.Start = []byte{}
	}
	for _, f := range m.Files {
		if f.MinTS > ts {
			continue
		}
		home := name
		if f.Home != "" {
			home = f.Home
		}
		src := region.ObjectKey(home, f.Key)
		if f.MaxTS <= ts {
			dst := filesPrefix + home + "/" + f.Key
			copied, err := copyOnce(ctx, bucket, dst, src)
			if err != nil {
				return Region{}, fmt.Errorf("region %s: copying %s: %w", name, src, err)
			}
			if copied {
				out.CopiedBytes += f.Size
			}
			f.Num, f.Key, f.Home = 0, dst, ""
			out.Files = append(out.Files, f)
			continue
		}
		dst := fmt.Sprintf("%s%s/%s.at-%d", filesPrefix, home, f.Key, ts)
		cut, ok, err := cutAt(ctx, bucket, dst, src, ts)
		if err != nil {
			return Region{}, fmt.Errorf("region %s: cutting %s at %d: %w", name, src, ts, err)
		}
		if ok {
			out.CopiedBytes += cut.Size
			out.Files = append(out.Files, cut)
		}
	}
	return out, nil
}

// copyOnce copies src to dst unless dst exists; true: it copied.
func copyOnce(ctx context.Context, bucket *blob.Bucket, dst, src string) (bool, error) {
	ok, err := bucket.Exists(ctx, dst)
	if err != nil || ok {
		return false, err
	}
	return true, bucket.Copy(ctx, dst, src)
}

// cutAt writes to dst the versions of SST src at or below ts; false: it has
// none.
func cutAt(ctx context.Context, bucket *blob.Bucket, dst, src string, ts uint64) (manifest.FileMeta, bool, error) {
	obj, err := bucket.OpenObject(ctx, src)
	if err != nil {
		return manifest.FileMeta{}, false, err
	}
	defer obj.Close()
	r, err := sstable.Open(obj, obj.Size(), src, nil)
	if err != nil {
		return manifest.FileMeta{}, false, err
	}
	var buf bytes.Buffer
	w := sstable.NewWriter(&buf, sstable.WriterOptions{Compression: sstable.S2Compression, ExpectedKeys: uint(r.Properties().Entries)})
	it := r.NewIterContext(ctx)
	defer it.Close()
	n := 0
	for ok := it.First(); ok; ok = it.Next() {
		if it.Key().TS > ts {
			continue
		}
		if err := w.Add(it.Key(), it.Value()); err != nil {
			return manifest.FileMeta{}, false, err
		}
		n++
	}
	if err := it.Err(); err != nil {
		return manifest.FileMeta{}, false, err
	}
	if n == 0 {
		return manifest.FileMeta{}, false, nil
	}
	p, size, err := w.Finish()
	if err != nil {
		return manifest.FileMeta{}, false, err
	}
	// The key names the source and ts: a retry writes the same bytes.
	if err := bucket.WriteAll(ctx, dst, buf.Bytes(), false); err != nil {
		return manifest.FileMeta{}, false, err
	}
	return region.NewFileMeta(0, dst, p, size), true, nil
}
