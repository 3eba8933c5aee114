// Package manifest records which SSTs make up a region and how much of its
// WAL they cover.
//
// Each change is a new object manifest/<number> written create-if-absent, so
// two owners of one region cannot both commit number n: the one with a stale
// view gets ErrFenced instead of overwriting the newer manifest. Opening a
// region commits a manifest at once, which fences out any previous owner.
package manifest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/bellows-kv/bellows/storage-engine/blob"
)

const prefix = "manifest/"

// ErrFenced means another opener committed a newer manifest: this region
// handle must stop writing.
var ErrFenced = errors.New("manifest: fenced: another owner committed a newer manifest of this region")

// FileMeta describes one live SST.
type FileMeta struct {
	Num uint64 `json:"num"`
	// Key is the object key under the region's prefix. It includes the
	// number of the manifest that claimed the region when the file was
	// created, so a fenced owner's late upload can never replace a file of
	// the current owner.
	Key       string `json:"key"`
	Size      int64  `json:"size"`
	Smallest  []byte `json:"smallest"`
	Largest   []byte `json:"largest"`
	MinTS     uint64 `json:"minTS"`
	MaxTS     uint64 `json:"maxTS"`
	Entries   uint64 `json:"entries"`
	Deletions uint64 `json:"deletions"`
}

// Manifest is one committed state of a region.
type Manifest struct {
	// Number is this manifest's object number; 0 means none committed yet.
	Number uint64 `json:"number"`
	// Owner identifies the process that committed it (diagnostics only).
	Owner string `json:"owner"`
	// Files are the live SSTs, oldest first. Their timestamp ranges are
	// disjoint and ascending: flushes append at the end and compactions
	// replace a contiguous run.
	Files []FileMeta `json:"files"`
	// WALMinSegment: every record in a lower segment is in Files.
	WALMinSegment uint64 `json:"walMinSegment"`
	// FlushedTS: every version with a timestamp ≤ FlushedTS is in Files;
	// replay skips such records.
	FlushedTS   uint64 `json:"flushedTS"`
	NextFileNum uint64 `json:"nextFileNum"`
}

// Clone returns a deep-enough copy to edit Files.
func (m Manifest) Clone() Manifest {
	m.Files = slices.Clone(m.Files)
	return m
}

// MaxTS is the largest timestamp in any file.
func (m Manifest) MaxTS() uint64 {
	var ts uint64
	for _, f := range m.Files {
		ts = max(ts, f.MaxTS)
	}
	return ts
}

// ObjectName is the bucket key of manifest n.
func ObjectName(n uint64) string { return fmt.Sprintf("%s%020d", prefix, n) }

// Load returns the newest committed manifest under b, or an empty one.
func Load(ctx context.Context, b *blob.Bucket) (Manifest, error) {
	objs, err := b.List(ctx, prefix)
	if err != nil {
		return Manifest{}, fmt.Errorf("manifest: listing: %w", err)
	}
	var newest uint64
	for _, o := range objs {
		n, err := strconv.ParseUint(strings.TrimPrefix(o.Key, prefix), 10, 64)
		if err == nil && n > newest {
			newest = n
		}
	}
	if newest == 0 {
		return Manifest{NextFileNum: 1, WALMinSegment: 0}, nil
	}
	data, err := b.ReadAll(ctx, ObjectName(newest))
	if err != nil {
		return Manifest{}, fmt.Errorf("manifest: reading %d: %w", newest, err)
	}
	var m Manifest
	if err := json.Unmarshal(data, &m); err != nil {
		return Manifest{}, fmt.Errorf("manifest: decoding %s: %w", ObjectName(newest), err)
	}
	if m.Number != newest {
		return Manifest{}, fmt.Errorf("manifest: %s claims number %d", ObjectName(newest), m.Number)
	}
	return m, nil
}

// Commit writes next as the successor of prev (next.Number = prev.Number+1).
// It returns ErrFenced if that number is already taken.
func Commit(ctx context.Context, b *blob.Bucket, prev Manifest, next *Manifest) error {
	next.Number = prev.Number + 1
	data, err := json.Marshal(next)
	if err != nil {
		return err
	}
	if err := b.WriteAll(ctx, ObjectName(next.Number), data, true); err != nil {
		if errors.Is(err, blob.ErrExists) {
			return fmt.Errorf("%w (manifest %d exists)", ErrFenced, next.Number)
		}
		return fmt.Errorf("manifest: committing %d: %w", next.Number, err)
	}
	return nil
}

// RemoveOlder deletes manifests older than keep versions before m; they are
// history only.
func RemoveOlder(ctx context.Context, b *blob.Bucket, m Manifest, keep uint64) error {
	if m.Number <= keep {
		return nil
	}
	objs, err := b.List(ctx, prefix)
	if err != nil {
		return err
	}
	for _, o := range objs {
		n, err := strconv.ParseUint(strings.TrimPrefix(o.Key, prefix), 10, 64)
		if err == nil && n < m.Number-keep {
			if err := b.Delete(ctx, o.Key); err != nil {
				return err
			}
		}
	}
	return nil
}
