package region

import "fmt"

// The bucket layout of regions: every object of region NAME lives under
// BucketPrefix(NAME), its SSTs under sst/ and its manifests under manifest/
// (manifest.ObjectName). A manifest's FileMeta.Key is relative to the
// region's prefix; ObjectKey makes it a key of the whole bucket, as
// compaction jobs and the block cache's file names use it.

// BucketPrefix is the prefix of every object of region name:
// "regions/<name>/".
func BucketPrefix(name string) string { return "regions/" + name + "/" }

// ObjectKey is the bucket key of the region's object fileKey (a key
// relative to BucketPrefix(name), such as a manifest FileMeta.Key).
func ObjectKey(name, fileKey string) string { return BucketPrefix(name) + fileKey }

// sstKey is the key, relative to the region's prefix, of SST num created
// under the manifest numbered epoch.
func sstKey(epoch, num uint64) string { return fmt.Sprintf("sst/%06d-%06d.sst", epoch, num) }
