package region

import "fmt"

// The bucket layout of regions: every object of region NAME lives under
// BucketPrefix(NAME), its SSTs under sst/ and its manifests under manifest/
// (manifest.ObjectName). A manifest's FileMeta.Key is relative to the
// region's prefix; ObjectKey makes it a key of the whole bucket, as
// compaction jobs and the block cache's file names use it. The one other
// objects, AppliedRequestsKey and AppliedRequestsTailKey, hold the
// idempotency keys of the writes the region's last releasing owner
// applied, for the next owner.

// BucketPrefix is the prefix of every object of region name:
// "regions/<name>/".
func BucketPrefix(name string) string { return "regions/" + name + "/" }

// ObjectKey is the bucket key of the region's object fileKey (a key
// relative to BucketPrefix(name), such as a manifest FileMeta.Key).
func ObjectKey(name, fileKey string) string { return BucketPrefix(name) + fileKey }

// AppliedRequestsKey is the bucket key of the object in which a store that
// releases region name hands the idempotency keys of the writes it applied
// recently to the next owner: "regions/<name>/applied-requests.json". The
// region itself never reads or deletes it (the server package writes it
// before the released manifest and reads it on a claim); each release
// overwrites it.
func AppliedRequestsKey(name string) string { return ObjectKey(name, "applied-requests.json") }

// AppliedRequestsTailKey is the bucket key of the keys applied since
// AppliedRequestsKey was last written, which a release's, split's or
// merge's final flush writes instead of the whole table while writes are
// refused: "regions/<name>/applied-requests-tail.json". A reader takes
// the union of both.
func AppliedRequestsTailKey(name string) string {
	return ObjectKey(name, "applied-requests-tail.json")
}

// SSTKey is sstKey, for a restore writing a region's files (package backup).
func SSTKey(epoch, num uint64) string { return sstKey(epoch, num) }

// sstKey is the key, relative to the region's prefix, of SST num created
// under the manifest numbered epoch.
func sstKey(epoch, num uint64) string { return fmt.Sprintf("sst/%06d-%06d.sst", epoch, num) }
