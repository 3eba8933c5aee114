// Package manifest records which SSTs make up a region and how much of its
// WAL they cover.
//
// Each change is a new object manifest/<number> written create-if-absent, so
// two owners of one region cannot both commit number n: the one with a stale
// view gets ErrFenced instead of overwriting the newer manifest. Opening a
// region commits a manifest at once, which fences out any previous owner.
//
// Fencing alone cannot keep acknowledged writes: a store's unflushed writes
// live only in its own WAL. So a manifest also names the owner's WAL, and a
// region is claimed only by that WAL (a restart) or after the owner released
// it, having flushed everything (CheckClaim).
//
// Invariants:
//   - The newest manifest (Load) is the region's state. Each commit is the
//     successor number of the committer's view, written create-if-absent
//     (Commit): of two openers holding the same view, one commits and the
//     other is fenced.
//   - A committed manifest is never rewritten; only manifests older than a
//     window below the newest are deleted (RemoveOlder).
//   - Files (oldest first) have disjoint, ascending timestamp ranges, all at
//     or below FlushedTS; with MergedRuns (a merged region before its first
//     compaction) only files whose key spans meet do, which is what a read
//     of one key relies on. Replaying the owner's WAL (WALID) from
//     WALMinSegment, skipping records at or below FlushedTS, restores every
//     acknowledged write that is in no file.
//   - Released is set only after the owner flushed every acknowledged write
//     into Files, so a claim without that WAL loses nothing.
//   - A takeover (a claim without the owner's WAL and without a release)
//     adds the owner's WAL to TakenOverWALs, and only a flush that covers
//     every record replayed from them removes them: until then, the records
//     past FlushedTS are in those fenced streams and the owner's WAL.
package manifest

import (
	"bytes"
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
	// Key is the object key under the prefix of the file's home region. It
	// includes the number of the manifest that claimed the region when the
	// file was created, so a fenced owner's late upload can never replace a
	// file of the current owner.
	Key string `json:"key"`
	// Home, when set, is the region whose prefix holds the object: the file
	// is a reference to an ancestor's SST, shared with the ancestor's other
	// descendants (a split's daughters). A region reads a reference only
	// within its own key range and never deletes it (docs/regions.md).
	// Empty: the file is the region's own.
	Home      string `json:"home,omitempty"`
	Size      int64  `json:"size"`
	Smallest  []byte `json:"smallest"`
	Largest   []byte `json:"largest"`
	MinTS     uint64 `json:"minTS"`
	MaxTS     uint64 `json:"maxTS"`
	Entries   uint64 `json:"entries"`
	Deletions uint64 `json:"deletions"`
}

// ErrOwned means the region's current owner has not released it, and the
// opener's WAL is not the one that may hold its unflushed writes.
var ErrOwned = errors.New("manifest: region is owned by another store")

// OwnedError says who owns a region an opener may not claim.
type OwnedError struct {
	Manifest uint64
	Owner    string
	WALID    string
	// Lease is the owner's liveness lease (Manifest.Lease): once it is
	// dead, the region may be taken over.
	Lease string
}

func (e *OwnedError) Error() string {
	return fmt.Sprintf("%v: %q (manifest %d, WAL %s) has not released it, and its WAL may hold acknowledged writes that are in no SST; "+
		"stop that store so it releases the region, reopen the region with that WAL, or force the takeover and forfeit them",
		ErrOwned, e.Owner, e.Manifest, e.WALID)
}

func (e *OwnedError) Is(target error) bool { return target == ErrOwned }

// Manifest is one committed state of a region.
type Manifest struct {
	// Number is this manifest's object number; 0 means none committed yet.
	Number uint64 `json:"number"`
	// Owner identifies the process that committed it (diagnostics only).
	Owner string `json:"owner"`
	// WALID is the identity of the owner's WAL directory, the only place
	// its acknowledged but unflushed writes exist. Empty in manifests
	// written before ownership was recorded.
	WALID string `json:"walID,omitempty"`
	// Lease names the liveness lease of the process that claimed the
	// region, "<store>/<incarnation>" (docs/failover.md §3): once that
	// incarnation is fenced or superseded it acknowledges nothing more,
	// and the region's next owner takes it over without a release. Empty:
	// a store without a liveness lease.
	Lease string `json:"lease,omitempty"`
	// Released: the owner flushed every write and gave the region up, so
	// any store may claim it.
	Released bool `json:"released,omitempty"`
	// TakenOverWALs are the WAL streams of earlier owners that a takeover
	// fenced and whose records past FlushedTS are not yet in Files, oldest
	// first: every opener replays them before its own WAL, until a flush
	// covers what they held and clears them. Without it, an owner that
	// died between claiming a taken-over region and flushing what it
	// replayed would pass on only its own, empty, stream.
	TakenOverWALs []string `json:"takenOverWALs,omitempty"`
	// Files are the live SSTs, oldest first. Their timestamp ranges are
	// disjoint and ascending: flushes append at the end and compactions
	// replace a contiguous run. With MergedRuns, only per key span.
	Files []FileMeta `json:"files"`
	// MergedRuns: Files begin with the runs of a merge's parents, one
	// after the other (DeriveFrom): each run is ordered in time and the
	// runs hold disjoint key spans, but their timestamps interleave. The
	// region's next compaction is a major one over every file, which
	// unifies them and clears this (a minor one of a window across two
	// runs would write a file out of order with both).
	MergedRuns bool `json:"mergedRuns,omitempty"`
	// WALMinSegment: every record in a lower segment is in Files.
	WALMinSegment uint64 `json:"walMinSegment"`
	// FlushedTS: every version with a timestamp ≤ FlushedTS is in Files;
	// replay skips such records.
	FlushedTS uint64 `json:"flushedTS"`
	// ExactFromTS: a read below it may miss a version the region's
	// retention dropped (region.SnapshotTooOldError); 0 while none was.
	ExactFromTS uint64 `json:"exactFromTS,omitempty"`
	NextFileNum uint64 `json:"nextFileNum"`
	// Locks and TxnOutcomes are the region's cross-region transaction
	// state as of FlushedTS (region/locks.go, region/outcomes.go): the locks prewritten and
	// not yet resolved, and the outcomes decided at this region as some
	// transaction's primary. The WAL's records past FlushedTS change them
	// further. Treat both as immutable: manifests share them.
	Locks       []TxnLock    `json:"locks,omitempty"`
	TxnOutcomes []TxnOutcome `json:"txnOutcomes,omitempty"`
	// Start and End are the region's key range [Start, End); a nil End is
	// unbounded. Every read, write and compaction of the region is clipped
	// to it, which is what makes its reference files' other keys invisible.
	Start []byte `json:"start,omitempty"`
	End   []byte `json:"end,omitempty"`
	// Parents are the manifests this region was derived from by a split
	// or merge (Derive); empty for a region created whole.
	Parents []ParentRef `json:"parents,omitempty"`
	// Retired: the region was split or merged away (its successors are in
	// the region map); nobody may claim it. Set only after the region map
	// that retires it was committed; the map, not this flag, decides.
	Retired bool `json:"retired,omitempty"`
}

// ParentRef names one parent of a region made by a split or merge: the
// parent's name and the number of its final manifest, which is immutable,
// so deriving from it gives the same result however often it is done.
type ParentRef struct {
	Name     string `json:"name"`
	Manifest uint64 `json:"manifest"`
}

// TxnLock is one key's prewritten, unresolved write of a cross-region
// transaction.
type TxnLock struct {
	Key     []byte `json:"key"`
	StartTS uint64 `json:"startTS"`
	// Primary is the transaction's primary key, in whatever region: its
	// outcome there decides this lock's.
	Primary []byte `json:"primary"`
	Delete  bool   `json:"delete,omitempty"`
	// Expiring says Value is an expiring version's stored value
	// (kv.KindSetExpiring: its time to live, then the value).
	Expiring bool   `json:"expiring,omitempty"`
	Value    []byte `json:"value,omitempty"`
	// ExpiresAt (Unix nanoseconds, the prewriting store's clock): after it,
	// a reader may roll the transaction back if its primary is not
	// committed.
	ExpiresAt int64 `json:"expiresAt"`
}

// TxnOutcome is the decision on a transaction whose primary key is in this
// region: committed at CommitTS, or rolled back (CommitTS 0). A transaction
// is its start timestamp and primary key.
type TxnOutcome struct {
	StartTS  uint64 `json:"startTS"`
	Primary  []byte `json:"primary"`
	CommitTS uint64 `json:"commitTS,omitempty"`
	// RequestID is the commit request's idempotency key: a retry of it
	// (whose first answer was lost) learns the commit from here.
	RequestID string `json:"requestID,omitempty"`
	// Resolved: every lock of the transaction is resolved; the outcome is
	// kept only for the commit's retries (contract.DefaultTxnOutcomeRetryWindow).
	Resolved bool `json:"resolved,omitempty"`
	// DecidedAt (Unix nanoseconds) bounds how long the outcome is kept
	// when no coordinator forgets it (contract.DefaultTxnOutcomeRetention).
	DecidedAt int64 `json:"decidedAt"`
}

// Clone returns a deep-enough copy to edit Files.
func (m Manifest) Clone() Manifest {
	m.Files = slices.Clone(m.Files)
	m.TakenOverWALs = slices.Clone(m.TakenOverWALs)
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

// CheckClaim returns an *OwnedError unless an opener whose WAL directory has
// identity walID may claim the region m describes: nobody has committed yet,
// the owner released it, or the opener holds the owner's own WAL (a restart).
// A manifest without a WAL identity predates ownership records and is
// claimable, as it always was.
func (m Manifest) CheckClaim(walID string) error {
	if m.Number == 0 || m.Released || m.WALID == "" || m.WALID == walID {
		return nil
	}
	return &OwnedError{Manifest: m.Number, Owner: m.Owner, WALID: m.WALID, Lease: m.Lease}
}

// InRange reports whether key falls in the region's range [Start, End).
func (m Manifest) InRange(key []byte) bool {
	return bytes.Compare(key, m.Start) >= 0 && (m.End == nil || bytes.Compare(key, m.End) < 0)
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

// LoadNumber returns manifest n under b: a split's daughter derives from
// its parent's final manifest by number, not from the newest (the parent
// commits one more, marking itself retired).
func LoadNumber(ctx context.Context, b *blob.Bucket, n uint64) (Manifest, error) {
	data, err := b.ReadAll(ctx, ObjectName(n))
	if err != nil {
		return Manifest{}, fmt.Errorf("manifest: reading %d: %w", n, err)
	}
	var m Manifest
	if err := json.Unmarshal(data, &m); err != nil {
		return Manifest{}, fmt.Errorf("manifest: decoding %s: %w", ObjectName(n), err)
	}
	if m.Number != n {
		return Manifest{}, fmt.Errorf("manifest: %s claims number %d", ObjectName(n), m.Number)
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
