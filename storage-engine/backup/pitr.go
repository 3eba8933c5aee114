package backup

// Point-in-time restore (docs/backup.md, section 3): the newest backup at or
// before T, plus every archived version above its TS and at or below T.
//
// Why that is a consistent snapshot at T: a version's timestamp is its
// commit timestamp (a batch's own, a transaction's commit, in each of its
// regions), so keeping exactly the versions at or below T keeps a
// cross-region transaction whole or drops it whole. What must hold is that
// the archive has every such version: T is at most every live region's
// archive frontier (region.archiveFrontier says why the frontier is safe),
// every region of the backup was archived from the backup's TS on, and no
// stream that ended without its final record (a lost volume) ended inside
// (backup TS, T).

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/bellows-kv/bellows/storage-engine/blob"
	"github.com/bellows-kv/bellows/storage-engine/kv"
	"github.com/bellows-kv/bellows/storage-engine/manifest"
	"github.com/bellows-kv/bellows/storage-engine/region"
	"github.com/bellows-kv/bellows/storage-engine/regionmap"
	"github.com/bellows-kv/bellows/storage-engine/sstable"
	"github.com/bellows-kv/bellows/storage-engine/walarchive"
)

// ErrOutsideWindow: a point-in-time restore's target is not in what the
// backups and the archive cover.
var ErrOutsideWindow = errors.New("backup: the target time is outside the recovery window")

// Window is what a point-in-time restore from a bucket can reach: any T in
// [From, To], subject to the breaks in Broken.
type Window struct {
	From, To uint64
	// Limit says what holds To where it is.
	Limit   string
	Backups []Backup
	// Streams are every archive stream; Broken those that ended without
	// their final record and are no live region's.
	Streams []walarchive.Stream
	Broken  []walarchive.Stream
}

// FormatTS renders a timestamp as the wall-clock time it names: timestamps
// are hybrid-logical-clock nanoseconds since the epoch (docs/clock.md).
func FormatTS(ts uint64) string {
	return time.Unix(0, int64(ts)).UTC().Format(time.RFC3339Nano)
}

func (w Window) String() string {
	if len(w.Backups) == 0 {
		return "nothing (no backup)"
	}
	if w.To < w.From {
		return fmt.Sprintf("only the backups' own times (%s)", w.Limit)
	}
	return fmt.Sprintf("%s to %s", FormatTS(w.From), FormatTS(w.To))
}

// ArchiveWindow computes bucket's recovery window: from its oldest backup
// to the oldest frontier among the live regions' archive streams (the
// stream of the WAL each region's manifest names).
func ArchiveWindow(ctx context.Context, bucket *blob.Bucket) (Window, error) {
	var w Window
	var err error
	if w.Backups, err = List(ctx, bucket); err != nil {
		return w, err
	}
	if w.Streams, err = walarchive.Streams(ctx, bucket); err != nil {
		return w, err
	}
	if len(w.Backups) > 0 {
		w.From = w.Backups[0].TS
	}
	m, err := regionmap.Load(ctx, bucket)
	if err != nil {
		return w, err
	}
	current := map[[2]string]bool{}
	w.To = ^uint64(0)
	for _, r := range m.Region {
		man, err := manifest.Load(ctx, bucket.Prefixed(region.BucketPrefix(r.Name)))
		if err != nil {
			return w, err
		}
		current[[2]string{r.Name, man.WALID}] = true
		i := slices.IndexFunc(w.Streams, func(s walarchive.Stream) bool { return s.Region == r.Name && s.WALID == man.WALID })
		if i < 0 {
			if man.WALID == "" {
				continue // never opened since it was created: nothing to archive
			}
			w.To, w.Limit = 0, fmt.Sprintf("region %s's WAL (%s) is not archived", r.Name, man.WALID)
			continue
		}
		if s := w.Streams[i]; s.TS < w.To {
			w.To, w.Limit = s.TS, fmt.Sprintf("region %s's archive frontier", r.Name)
		}
	}
	for _, s := range w.Streams {
		if !s.Final && !current[[2]string{s.Region, s.WALID}] {
			w.Broken = append(w.Broken, s)
		}
	}
	return w, nil
}

// RestoreToTime writes into dst the state of src at ts: the newest backup
// at or before ts, plus the archived versions above its TS and at or below
// ts. It refuses (ErrOutsideWindow) a ts the window does not cover, naming
// the window, and a stream with a hole (walarchive.ErrGap), before it
// writes anything.
func RestoreToTime(ctx context.Context, src *blob.Bucket, ts uint64, dst *blob.Bucket) (Backup, error) {
	w, err := ArchiveWindow(ctx, src)
	if err != nil {
		return Backup{}, err
	}
	refuse := func(format string, args ...any) error {
		return fmt.Errorf("%w: restore to %s refused: %s; the archive covers %s", ErrOutsideWindow, FormatTS(ts), fmt.Sprintf(format, args...), w)
	}
	switch {
	case len(w.Backups) == 0:
		return Backup{}, refuse("%s holds no backup to start from", src.URL())
	case ts < w.From:
		return Backup{}, refuse("it is before the oldest backup")
	}
	var b Backup
	for _, c := range w.Backups {
		if c.TS <= ts {
			b = c
		}
	}
	if ts > b.TS && ts > w.To {
		return Backup{}, refuse("it is past the archive (%s)", w.Limit)
	}
	for _, r := range b.Regions {
		if ts == b.TS {
			break
		}
		if !slices.ContainsFunc(w.Streams, func(s walarchive.Stream) bool { return s.Region == r.Name && s.FromTS <= b.TS }) {
			return Backup{}, refuse("region %s was not archived from backup %s's time (%s) on", r.Name, b.ID, FormatTS(b.TS))
		}
	}
	for _, s := range w.Broken {
		if s.TS >= b.TS && s.TS < ts {
			return Backup{}, refuse("region %s's archive from WAL %s ends at %s without its final record (its volume was lost?): writes after it may be missing; restore to at most that time, or from a backup taken after it", s.Region, s.WALID, FormatTS(s.TS))
		}
	}
	if err := checkTarget(ctx, dst); err != nil {
		return Backup{}, err
	}
	if err := checkFiles(ctx, src, b); err != nil {
		return Backup{}, err
	}
	r := replayed{ts: ts, versions: map[string][]version{}}
	if ts > b.TS {
		if err := collectVersions(ctx, src, w.Streams, b, &r); err != nil {
			return Backup{}, err
		}
	}
	return b, restore(ctx, src, b, dst, r)
}

// collectVersions reads every stream that may hold a version in
// (b.TS, r.ts] and sorts them into r by b's regions.
func collectVersions(ctx context.Context, src *blob.Bucket, streams []walarchive.Stream, b Backup, r *replayed) error {
	find := func(key []byte) (string, bool) {
		for _, reg := range b.Regions {
			if bytes.Compare(key, reg.Start) >= 0 && (len(reg.End) == 0 || bytes.Compare(key, reg.End) < 0) {
				return reg.Name, true
			}
		}
		return "", false
	}
	for _, s := range streams {
		if s.Final && s.TS <= b.TS {
			continue // closed before the backup: every version in it is
		}
		err := walarchive.Read(ctx, src, s, b.TS, func(rec []byte) error {
			var ferr error
			_, err := region.DecodeVersions(rec, func(k kv.InternalKey, v []byte) {
				if k.TS <= b.TS || k.TS > r.ts || ferr != nil {
					return
				}
				name, ok := find(k.UserKey)
				if !ok {
					ferr = fmt.Errorf("backup: archived key %q of region %s is in no region of backup %s", k.UserKey, s.Region, b.ID)
					return
				}
				r.versions[name] = append(r.versions[name], version{key: k, value: v})
			})
			return errors.Join(err, ferr)
		})
		if err != nil {
			return fmt.Errorf("reading region %s's archive (WAL %s): %w", s.Region, s.WALID, err)
		}
	}
	return nil
}

// writeVersions writes versions, sorted and without duplicates (a record a
// replay met twice), as one SST at key.
func writeVersions(ctx context.Context, dst *blob.Bucket, key string, versions []version) (manifest.FileMeta, error) {
	slices.SortFunc(versions, func(a, b version) int { return kv.Compare(a.key, b.key) })
	versions = slices.CompactFunc(versions, func(a, b version) bool { return kv.Compare(a.key, b.key) == 0 })
	var buf bytes.Buffer
	w := sstable.NewWriter(&buf, sstable.WriterOptions{Compression: sstable.S2Compression, ExpectedKeys: uint(len(versions))})
	for _, v := range versions {
		if err := w.Add(v.key, v.value); err != nil {
			return manifest.FileMeta{}, err
		}
	}
	p, size, err := w.Finish()
	if err != nil {
		return manifest.FileMeta{}, err
	}
	if err := dst.WriteAll(ctx, key, buf.Bytes(), true); err != nil {
		return manifest.FileMeta{}, err
	}
	return region.NewFileMeta(0, key, p, size), nil
}

// ParseTime reads a restore target: RFC 3339 (a wall-clock time, which
// the HLC timestamps carry in their physical part) or a raw timestamp.
func ParseTime(s string) (uint64, error) {
	s = strings.TrimSpace(s)
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return uint64(t.UnixNano()), nil
	}
	var ts uint64
	if _, err := fmt.Sscan(s, &ts); err == nil && ts > 0 {
		return ts, nil
	}
	return 0, fmt.Errorf("backup: target time %q is neither RFC 3339 (2026-11-27T10:00:00Z) nor a timestamp in nanoseconds", s)
}
