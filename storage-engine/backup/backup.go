// Package backup takes base backups of a cluster's bucket at one timestamp
// and restores them into a new bucket (docs/backup.md).
//
// A backup at T is what a transactional read of the whole key space at T
// returns, kept as files: every region is brought to T at its owner
// (region.Checkpoint) and its files are copied inside the bucket to
// backups/sst/, each at most once across all backups; a file that also
// holds versions above T is rewritten without them. The backup's record,
// backups/<id>/backup.json, is written last and create-if-absent: a backup
// without it does not exist, so a crash mid-backup leaves only unnamed
// files, which Delete's collection removes.
//
// Invariants:
//   - Every file a backup.json names exists under backups/sst/ and holds
//     only versions at or below the backup's TS.
//   - An object under backups/sst/ is never rewritten: its key names its
//     source file, which is immutable (manifest invariants), or the source
//     and the TS it was cut at.
//   - Only Delete removes objects under backups/, and only those that no
//     remaining backup.json names.
//   - The live regions never read backups/: a backup cannot change them.
package backup

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/bellows-kv/bellows/storage-engine/blob"
	"github.com/bellows-kv/bellows/storage-engine/manifest"
	"github.com/bellows-kv/bellows/storage-engine/walarchive"
)

const (
	// Prefix holds every backup object.
	Prefix = "backups/"
	// filesPrefix holds the copied SSTs, shared by the backups that name them.
	filesPrefix = Prefix + "sst/"
	recordName  = "backup.json"
)

var (
	// ErrNotFound: no backup of that ID in the bucket.
	ErrNotFound = errors.New("backup: no such backup")
	// ErrExists: a backup of that ID is already recorded.
	ErrExists = errors.New("backup: a backup of that ID exists")
	// ErrMapChanged: the region map changed while the backup ran (a split
	// or a merge), so the regions it copied may not tile the key space.
	ErrMapChanged = errors.New("backup: the region map changed during the backup")
	// ErrIncomplete: a restore found a file the backup names missing, of
	// another size, or unreadable as an SST.
	ErrIncomplete = errors.New("backup: incomplete or corrupt")
	// ErrTargetNotEmpty: a restore's target bucket already holds objects.
	ErrTargetNotEmpty = errors.New("backup: the restore target is not empty")
)

// Backup is one backup's record, backups/<ID>/backup.json.
type Backup struct {
	ID string `json:"id"`
	// TS is the backup's timestamp: it holds every version committed at
	// or before TS and none after, in every region.
	TS       uint64    `json:"ts"`
	Started  time.Time `json:"started"`
	Finished time.Time `json:"finished"`
	// MapEpoch is the region map's epoch the backup copied; NextID and
	// Retired are that map's, so a restored map keeps its names unique.
	MapEpoch uint64   `json:"mapEpoch"`
	NextID   uint64   `json:"nextID"`
	Retired  []string `json:"retired,omitempty"`
	Regions  []Region `json:"regions"`
	// CopiedBytes is what this backup copied; the rest of Bytes it shares
	// with earlier backups.
	CopiedBytes int64 `json:"copiedBytes"`
}

// Region is one region of a backup: its place in the region map and its
// files at the backup's TS.
type Region struct {
	ID    uint64 `json:"id"`
	Name  string `json:"name"`
	Slot  int    `json:"slot"`
	Start []byte `json:"start"`
	End   []byte `json:"end,omitempty"`
	// ExactFromTS is the region's: a read below it may miss versions the
	// region's retention dropped, in the restored region too.
	ExactFromTS uint64 `json:"exactFromTS,omitempty"`
	// Files, oldest first, as the region's manifest lists them, each with
	// Key the bucket key of its copy under backups/sst/ (Num and Home
	// are the restored region's to give).
	Files []manifest.FileMeta `json:"files"`
	// MergedRuns is the manifest's: the files are still a merge's two
	// runs, ordered in time per key span only.
	MergedRuns bool `json:"mergedRuns,omitempty"`
	// CopiedBytes is what this backup copied for the region.
	CopiedBytes int64 `json:"copiedBytes"`
}

// Bytes is the size of every file the backup names.
func (b Backup) Bytes() int64 {
	var n int64
	for _, r := range b.Regions {
		for _, f := range r.Files {
			n += f.Size
		}
	}
	return n
}

// Files counts the files the backup names.
func (b Backup) Files() int {
	n := 0
	for _, r := range b.Regions {
		n += len(r.Files)
	}
	return n
}

// validID: an ID is a path segment and a Kubernetes name alike.
var validID = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)

// CheckID returns an error naming what is wrong with id.
func CheckID(id string) error {
	if !validID.MatchString(id) {
		return fmt.Errorf("backup ID %q: use 1 to 63 lowercase letters, digits and '-', starting and ending with a letter or digit", id)
	}
	return nil
}

// NewID is an ID for a backup started at t: its UTC time to the second,
// which sorts as the backups were taken.
func NewID(t time.Time) string { return "backup-" + t.UTC().Format("20060102t150405z") }

func recordKey(id string) string { return Prefix + id + "/" + recordName }

// save writes b's record, create-if-absent.
func save(ctx context.Context, bucket *blob.Bucket, b Backup) error {
	data, err := json.MarshalIndent(b, "", "  ")
	if err != nil {
		return err
	}
	if err := bucket.WriteAll(ctx, recordKey(b.ID), data, true); err != nil {
		if errors.Is(err, blob.ErrExists) {
			return fmt.Errorf("%w: %s", ErrExists, b.ID)
		}
		return fmt.Errorf("backup %s: writing its record: %w", b.ID, err)
	}
	return nil
}

// Load returns backup id's record.
func Load(ctx context.Context, bucket *blob.Bucket, id string) (Backup, error) {
	if err := CheckID(id); err != nil {
		return Backup{}, err
	}
	data, err := bucket.ReadAll(ctx, recordKey(id))
	if errors.Is(err, blob.ErrNotFound) {
		return Backup{}, fmt.Errorf("%w: %q in %s (bellows backup list shows the ones there)", ErrNotFound, id, bucket.URL())
	}
	if err != nil {
		return Backup{}, err
	}
	var b Backup
	if err := json.Unmarshal(data, &b); err != nil {
		return Backup{}, fmt.Errorf("%w: backup %s: decoding %s: %v", ErrIncomplete, id, recordKey(id), err)
	}
	if b.ID != id {
		return Backup{}, fmt.Errorf("%w: %s names backup %q", ErrIncomplete, recordKey(id), b.ID)
	}
	return b, nil
}

// List returns every recorded backup, oldest TS first.
func List(ctx context.Context, bucket *blob.Bucket) ([]Backup, error) {
	objs, err := bucket.List(ctx, Prefix)
	if err != nil {
		return nil, err
	}
	var out []Backup
	for _, o := range objs {
		id, ok := strings.CutSuffix(strings.TrimPrefix(o.Key, Prefix), "/"+recordName)
		if !ok || strings.Contains(id, "/") {
			continue
		}
		b, err := Load(ctx, bucket, id)
		if err != nil {
			return nil, err
		}
		out = append(out, b)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].TS < out[j].TS })
	return out, nil
}

// Delete removes backup id's record, then every file under backups/sst/
// that no remaining backup names (including those of backups that crashed
// before their record was written). It returns how many files it removed.
// While a backup runs, it removes only the record (collect).
func Delete(ctx context.Context, bucket *blob.Bucket, id string) (int, error) {
	if _, err := Load(ctx, bucket, id); err != nil {
		return 0, err
	}
	if err := bucket.Delete(ctx, recordKey(id)); err != nil {
		return 0, err
	}
	return collect(ctx, bucket)
}

// collect deletes the files under backups/sst/ no recorded backup names,
// then the WAL archive's segments wholly at or below the oldest recorded
// backup's TS (walarchive.Prune), which no restore can start before. It
// returns how many objects it deleted.
//
// A running backup's copies are named by no record until it finishes. The
// object store gives no creation time we can rely on across drivers, so a
// running backup protects its files by writing its in-progress marker
// (backups/<id>/running) before it copies anything: while any marker
// exists, collect deletes nothing. A marker left by a crashed backup is
// removed by the next backup of the same ID or by Abandon.
func collect(ctx context.Context, bucket *blob.Bucket) (int, error) {
	objs, err := bucket.List(ctx, Prefix)
	if err != nil {
		return 0, err
	}
	for _, o := range objs {
		if strings.HasSuffix(o.Key, "/"+runningName) {
			return 0, nil
		}
	}
	all, err := List(ctx, bucket)
	if err != nil {
		return 0, err
	}
	named := map[string]bool{}
	for _, b := range all {
		for _, r := range b.Regions {
			for _, f := range r.Files {
				named[f.Key] = true
			}
		}
	}
	n := 0
	for _, o := range objs {
		if !strings.HasPrefix(o.Key, filesPrefix) || named[o.Key] {
			continue
		}
		if err := bucket.Delete(ctx, o.Key); err != nil {
			return n, err
		}
		n++
	}
	if len(all) == 0 {
		return n, nil // no restore can start anywhere: the archive waits for a backup
	}
	m, err := walarchive.Prune(ctx, bucket, all[0].TS)
	return n + m, err
}

const runningName = "running"

func runningKey(id string) string { return Prefix + id + "/" + runningName }

// Running lists the IDs of backups whose in-progress marker exists: running
// now, or crashed (Abandon removes a crashed one's).
func Running(ctx context.Context, bucket *blob.Bucket) ([]string, error) {
	objs, err := bucket.List(ctx, Prefix)
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, o := range objs {
		if id, ok := strings.CutSuffix(strings.TrimPrefix(o.Key, Prefix), "/"+runningName); ok && !strings.Contains(id, "/") {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids, nil
}

// Abandon removes the in-progress marker of backup id, which must not be
// running any more (it crashed), and collects its files.
func Abandon(ctx context.Context, bucket *blob.Bucket, id string) (int, error) {
	if err := CheckID(id); err != nil {
		return 0, err
	}
	if err := bucket.Delete(ctx, runningKey(id)); err != nil {
		return 0, err
	}
	return collect(ctx, bucket)
}

// Policy is how many backups, and which, retention keeps: the newest
// KeepLast, and every one finished within MaxAge. A zero field keeps
// nothing by itself; a zero Policy is refused (it would delete every
// backup).
type Policy struct {
	KeepLast int
	MaxAge   time.Duration
}

// Prune deletes the backups policy does not keep, then every file no kept
// backup names (collect), and returns the IDs deleted, oldest first.
func Prune(ctx context.Context, bucket *blob.Bucket, policy Policy, now time.Time) ([]string, int, error) {
	if policy.KeepLast <= 0 && policy.MaxAge <= 0 {
		return nil, 0, errors.New("backup retention keeps nothing: give a number of backups to keep, a maximum age, or both")
	}
	if policy.KeepLast < 0 || policy.MaxAge < 0 {
		return nil, 0, fmt.Errorf("backup retention: keep-last %d and max age %v must not be negative", policy.KeepLast, policy.MaxAge)
	}
	all, err := List(ctx, bucket)
	if err != nil {
		return nil, 0, err
	}
	var deleted []string
	for i, b := range all {
		newest := len(all) - i
		if newest <= policy.KeepLast || (policy.MaxAge > 0 && now.Sub(b.Finished) <= policy.MaxAge) {
			continue
		}
		if err := bucket.Delete(ctx, recordKey(b.ID)); err != nil {
			return deleted, 0, err
		}
		deleted = append(deleted, b.ID)
	}
	n, err := collect(ctx, bucket)
	return deleted, n, err
}
