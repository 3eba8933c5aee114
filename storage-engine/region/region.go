// Package region is one LSM tree: the unit of ownership, recovery and
// compaction. A storage pod serves many regions; each has its own memstore,
// WAL directory and manifest, and its files live in the shared bucket under
// regions/<name>/ (BucketPrefix).
//
// # Invariants
//
//   - Every version has a unique commit timestamp; timestamps grow in WAL
//     order. A version is visible to readers only once it, and every version
//     with a smaller timestamp, is durable and in the memstore.
//   - The live SSTs (oldest first) have disjoint, ascending timestamp ranges,
//     and every memstore version is newer than every SST version, so a point
//     read can stop at the first source that has a version of the key.
//   - An SST is deleted only when no manifest and no reader refers to it.
//   - A compaction is installed by one manifest commit, which is not
//     cancelled once begun: the newest manifest names every input of a
//     compaction or its output. A compaction abandoned before that commit
//     (Release, shutdown, its caller) installs nothing.
//   - A read is answered exactly or refused: a merge that may drop versions
//     (retention.maxVersions > 0, or a GC window) first raises exactFrom to
//     the newest timestamp it judges (its GC horizon, package retention), and a read below exactFrom not at a snapshot
//     pinned there is refused (SnapshotTooOldError). exactFrom never passes
//     the visible timestamp, so reads of the newest data are never refused.
//
// Region.checkInvariants checks what of this can be checked from the
// region's state; the model test calls it after every step.
//
// # Locks
//
// A Region has four locks; the fields each guards are listed with it in the
// Region type.
//
//   - compactMu: one compaction at a time (Compact, the background
//     compaction, and shutdown waiting for a running one).
//   - manifestMu: serialises manifest commits (flush, compaction install,
//     Release) and the ownership check that compares against the newest.
//   - commitMu: orders timestamp assignment, WAL appends and memstore
//     rotation.
//   - mu (read-write): the read state (memstores, current version, warmup,
//     the committed manifest, snapshots, closed/releasing/bgErr); cond waits
//     on it.
//
// # Lock order
//
//	compactMu → manifestMu → commitMu → mu
//
// A write's key latches (latch.go) come before all four: Apply and CommitTxn
// take them first (CommitTxn's validation reads under them, taking mu) and
// release them last; nothing holding a region lock takes a latch.
// resolveMu (locks.go) sits between the latches and mu: a read takes it
// (shared) around taking its read state, a cross-region commit's record
// (exclusive) around adding its versions and removing its locks.
//
// A goroutine takes a region's locks only in this order. The nestings that
// occur: compactMu → manifestMu → mu (a compaction installing its output,
// compact.go; shutdown waiting for a compaction, then Release's final
// commit), manifestMu → mu (flush.go flushOne, Release), commitMu → mu
// (write.go Apply and rotateLocked, flush, shutdown). manifestMu and
// commitMu are never held together. ReleaseWith's beforeCommit hook runs
// between its flush and its shutdown, holding none of them.
//
// # Held across I/O
//
//   - compactMu spans a whole compaction: reading the inputs, the job
//     (perhaps on a remote worker), the output, the warmup. Release and
//     shutdown cancel a running compaction (compactCtx) before they wait
//     for compactMu, so they wait for the job to notice the cancellation
//     (and at most one install commit already under way), never for the
//     job to finish.
//   - manifestMu spans manifest.Commit (a create-if-absent bucket write) and
//     the ownership check's bucket.Exists.
//   - commitMu spans no I/O: a WAL append is queued under it and waited for
//     after it is released (group commit), and wal.Log.Rotate only queues.
//     A writer that must rotate while too many memstores wait for flush
//     holds it while it waits (rotateLocked): that is the write stall.
//   - mu spans no I/O: it is held only to read or swap the read state, and
//     version and table references that may close or delete a file are
//     dropped after it is released.
//
// In this package's tests every lock records its holder and checks the order
// and checkIO checks that mu is not held at an I/O point (lockorder.go);
// otherwise both cost one branch.
package region

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bellows-kv/bellows/internal/contract"
	"github.com/bellows-kv/bellows/storage-engine/blob"
	"github.com/bellows-kv/bellows/storage-engine/blockcache"
	"github.com/bellows-kv/bellows/storage-engine/compaction"
	"github.com/bellows-kv/bellows/storage-engine/manifest"
	"github.com/bellows-kv/bellows/storage-engine/memstore"
	"github.com/bellows-kv/bellows/storage-engine/sstable"
	"github.com/bellows-kv/bellows/storage-engine/wal"
	"github.com/bellows-kv/bellows/storage-engine/walarchive"
)

// memTable is a memstore plus what flushing it needs to know.
type memTable struct {
	ms *memstore.Memstore
	// walSeg is the lowest WAL segment that may hold records of ms.
	walSeg uint64
	maxTS  uint64 // written under commitMu
	// frozen is the memstore's final view, set when it is frozen for a
	// disk flush (rotateLocked, under commitMu and mu), and replaced by
	// its merged equal as the flush begins (flushOne, under mu).
	frozen *memstore.View
	// txnRecs are the transaction records written while this was the
	// active memstore (txnrecord.go): its flush's manifest applies them.
	txnRecs []*txnRecord
	// txnMinTS is the timestamp of the first of txnRecs (0: none): WAL
	// truncation keeps its segment, since a lock lives in no memstore
	// version (truncateWAL).
	txnMinTS atomic.Uint64
	// firstWrite is when the first record of this memTable was written
	// (Unix nanoseconds; 0: none yet; at a restart, when the region
	// opened): the age of the WAL it keeps (OldestUnflushed).
	firstWrite atomic.Int64
}

func (r *Region) newMemTable(seg uint64) *memTable {
	ms, err := memstore.New(r.opts.memstoreConfig(&r.memStats))
	if err != nil {
		panic(err) // Options.validate checked the configuration
	}
	return &memTable{ms: ms, walSeg: seg}
}

// Region is one LSM tree. All methods are safe for concurrent use.
type Region struct {
	opts   Options
	bucket *blob.Bucket // prefixed BucketPrefix(name)
	walDir *wal.Dir
	log    *wal.Log
	exec   compaction.Executor

	// commitMu orders timestamp assignment, WAL appends and memstore
	// rotation; it guards lastTS and the active memTable's maxTS.
	commitMu mutex
	lastTS   uint64
	// takenOverTS is the newest timestamp replayed at Open: a flush at or
	// past it holds every record of the manifest's TakenOverWALs, and
	// drops them. Set in Open, read-only after.
	takenOverTS uint64
	// openedTS is the store clock's reading once the region opened: every
	// version it held then is at or below it (docs/clock.md, observed
	// clocks). Set in Open, read-only after.
	openedTS uint64
	// latches serialise the writes of one key from a transaction's
	// validation to its commit (latch.go); taken before commitMu.
	latches *latches
	vis     *visibility
	// txn is the cross-region transactions' locks and outcomes (locks.go).
	txn *txnState
	// resolveMu excludes a resolution's versions and lock removal from a
	// read's taking of its state and lock check (locks.go).
	resolveMu sync.RWMutex
	// lateAt and lateMax record the commits of locks left behind
	// (uncertainty.go); guarded by resolveMu.
	lateAt, lateMax uint64
	// txnVersions: a commit record wrote versions at their commit
	// timestamp, older than other keys' (checkInvariants).
	txnVersions atomic.Bool
	// feeds are the live change feeds of watches (feed.go).
	feeds feeds

	// mu guards the read state and manifest below; cond signals flush
	// progress to stalled writers and Flush callers.
	mu       rwMutex
	cond     *sync.Cond
	mem      *memTable
	imm      []*memTable // oldest first
	current  *version
	warm     *warming // set during an incremental warmup
	manifest manifest.Manifest
	snaps    map[uint64]int
	// exactFrom: a read at a timestamp below it may miss a version a
	// merge dropped (retention.DropsVersions), unless it reads at a
	// snapshot pinned in snaps. Raised before a merge that may drop
	// versions starts, so a snapshot pinned at or above it is honoured by
	// every merge, also those already running; kept in the manifest.
	exactFrom uint64
	closed    bool
	// releasing: Release has begun; writes are refused. splitting:
	// PrepareSplit has begun (with releasing, writes are ErrSplitting).
	releasing, splitting bool
	// writesStoppedAt is when releasing was set: the start of a release's,
	// split's or merge's write refusal (WritesStoppedAt).
	writesStoppedAt time.Time
	bgErr           error // sticky: fencing or a WAL failure

	// manifestMu serialises manifest commits (flush vs compaction).
	manifestMu mutex
	// compactMu allows one compaction at a time.
	compactMu mutex
	// compacting is the input set of the running compaction (nil when
	// none), so a request queued meanwhile is judged on the other files.
	compacting atomic.Pointer[map[*table]bool]
	// wait is the compaction request queued while compactMu was held, and
	// since when it and the running compaction were wanted
	// (CompactionState's WaitingSince).
	wait compactionWait
	// locks records the holders of the four locks above when checkLocks
	// is set (tests).
	locks heldLocks

	// start and end are the region's key range (its manifest's; immutable
	// once open): every read, write and compaction is clipped to it.
	start, end []byte

	epoch    uint64 // number of the manifest that claimed the region
	nextFile atomic.Uint64

	warmStats WarmupStats

	flushCh chan struct{}
	// inMemCh wakes the in-memory flush goroutine (inmemory.go).
	inMemCh  chan struct{}
	memStats memstore.Stats

	// walMu guards walSegs; it is a leaf lock (taken under commitMu by
	// WAL rotations, alone by truncation).
	walMu sync.Mutex
	// shipper archives the WAL (nil: not archived); archiveMu guards it
	// and archiveStatus (archive.go).
	// remoteReleases are the releases of workers' kept outputs in flight
	// (table.releases).
	remoteReleases sync.WaitGroup
	shipper        *walarchive.Shipper
	archiveMu      sync.Mutex
	// statusMu guards archiveStatus (a leaf lock): a metrics scrape reads
	// it without waiting for a ship's bucket writes under archiveMu.
	statusMu      sync.Mutex
	archiveStatus ArchiveStatus
	walSegs       []walSegment // closed WAL segments not yet removed, oldest first

	bgCtx  context.Context
	cancel context.CancelFunc
	// compactCtx is the parent of every compaction (background ones run
	// in it, Compact's follow it): Release and shutdown cancel it first,
	// with ErrReleasing or ErrClosed as the cause, so no compaction holds
	// up a handover (stopCompactions).
	compactCtx      context.Context
	stopCompactions context.CancelCauseFunc
	wg              sync.WaitGroup
	stats           Stats
	recovery        Recovery
	// replayedRequests are the newest requests the WAL replay met, set by
	// Open and handed out once (TakeReplayedRequests); guarded by mu.
	replayedRequests []AppliedRequest
}

// Open opens (creating if absent) a region: it locks the WAL directory, loads
// the newest manifest, checks that this WAL may claim the region (its own
// after a restart, or released by its owner; see manifest.CheckClaim), claims
// it by committing a successor (fencing any previous owner), removes files no
// manifest names, replays the WAL and starts background flushing. A region
// another store still owns fails with an error matching manifest.ErrOwned
// unless Options.ForceTakeover is set.
//
// Its stages, in the order each depends on the one before it (as Pebble's
// Open and etcd's bootstrap): claim, load the tables, recover the writes
// the WAL holds, run the background loops. A failure undoes what the
// stages before it did, in reverse: the version's tables released, the
// claim given back, the WAL directory unlocked.
func Open(ctx context.Context, opts Options) (_ *Region, err error) {
	began := time.Now()
	opts.applyDefaults()
	if err := opts.validate(); err != nil {
		return nil, err
	}
	r := newRegion(opts)
	if r.walDir, err = wal.LockDir(opts.WALDir); err != nil {
		return nil, &Error{Region: opts.Name, Err: err}
	}
	defer func() {
		if err != nil {
			_ = r.walDir.Unlock()
		}
	}()
	o := &opening{r: r}
	if err := o.claimRegion(ctx); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil && o.giveBack != nil {
			o.giveBack()
		}
	}()
	if err := o.loadVersion(ctx); err != nil {
		return nil, err
	}
	if err := o.recover(ctx); err != nil {
		r.current.unref()
		return nil, err
	}
	// run closes the region itself when it fails: its loops hold the
	// version from then on.
	if err := o.run(ctx); err != nil {
		return nil, err
	}
	r.recovery.Open = time.Since(began)
	return r, nil
}

// newRegion is a region of opts before its stages: its state, locks and
// compaction executor.
func newRegion(opts Options) *Region {
	r := &Region{
		opts:    opts,
		bucket:  opts.Bucket.Prefixed(BucketPrefix(opts.Name)),
		snaps:   map[uint64]int{},
		flushCh: make(chan struct{}, 1),
		inMemCh: make(chan struct{}, 1),
		latches: newLatches(),
	}
	r.initLocks()
	r.cond = sync.NewCond(&r.mu)
	r.exec = opts.Executor
	if r.exec == nil && opts.Warmup == WarmupWriteThrough {
		r.exec = WriteThroughExecutor{Bucket: opts.Bucket, Cache: opts.BlockCache}
	}
	if r.exec == nil {
		r.exec = compaction.Local{Bucket: opts.Bucket}
	}
	return r
}

// opening is one Open under way: the region, and what each stage hands
// the next. Its stages are its methods, so that the Region's own are its
// API alone.
type opening struct {
	r *Region
	// prev is the newest manifest before the claim, claim the one that
	// makes this WAL the region's owner's.
	prev, claim manifest.Manifest
	// giveBack, when not nil, releases the claim again: for an Open that
	// fails after claiming, when this WAL holds nothing of the region
	// beyond the claimed files (see claimRegion).
	giveBack func()
}

// claimRegion is Open's first stage: it commits the manifest that makes this WAL
// the region's owner's, a successor of the newest one.
func (o *opening) claimRegion(ctx context.Context) error {
	r, opts := o.r, o.r.opts
	m, err := manifest.Load(ctx, r.bucket)
	if err != nil {
		return &Error{Region: opts.Name, Err: err}
	}
	o.prev = m
	if m.Retired {
		return errorf(opts.Name, "%w (manifest %d): open its successors, which the region map names", ErrRetired, m.Number)
	}
	derived := m
	if m.Number == 0 && opts.DeriveFrom != nil {
		if derived, err = deriveClaim(ctx, opts); err != nil {
			return &Error{Region: opts.Name, Err: err}
		}
	}
	takeover := false // from an owner that did not release it: its stream is fenced and replayed
	if err := m.CheckClaim(r.walDir.ID); err != nil {
		if !opts.ForceTakeover {
			return &Error{Region: opts.Name, Err: err}
		}
		takeover = m.WALID != ""
		opts.Logger.Warn("taking over a region another store has not released: its WAL stream in the bucket is fenced and replayed",
			"region", opts.Name, "err", err)
	}
	if m.WALID != "" && m.WALID != r.walDir.ID {
		// The region comes from another WAL; whatever this directory
		// holds is from an earlier tenure (see wal.Dir.RemoveSegments).
		if err := r.walDir.RemoveSegments(); err != nil {
			return &Error{Region: opts.Name, Err: err}
		}
	}
	claim := derived.Clone()
	if takeover && !slices.Contains(claim.TakenOverWALs, m.WALID) {
		claim.TakenOverWALs = append(claim.TakenOverWALs, m.WALID)
	}
	claim.Owner = opts.Owner
	claim.Lease = opts.Lease
	claim.WALID = r.walDir.ID
	claim.Released = false
	if err := manifest.Commit(ctx, r.bucket, m, &claim); err != nil {
		return errorf(opts.Name, "claiming: %w", err)
	}
	o.claim = claim
	if m.Released || m.WALID != r.walDir.ID {
		// This WAL holds nothing of the region that is not in the
		// claimed manifest's files (its old segments were removed, or
		// flushed before a release), and the region takes no write
		// before Open returns. So an Open that fails from here on (a
		// missing file, or a claim given up, whose context ends its S3
		// requests) gives the region back: left claimed by a store that
		// does not serve it, its next owner would wait forever.
		o.giveBack = func() {
			back := claim.Clone()
			back.Released = true
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			defer cancel()
			if rerr := manifest.Commit(rctx, r.bucket, claim, &back); rerr != nil {
				opts.Logger.Warn("giving back a region whose open failed after claiming it", "region", opts.Name, "err", rerr)
			}
		}
	}
	return nil
}

// loadVersion is Open's second stage: the claimed manifest's state, its
// orphans removed and its tables opened into the current version, which
// holds their only references.
func (o *opening) loadVersion(ctx context.Context) error {
	r, claim := o.r, o.claim
	r.manifest = claim
	r.epoch = claim.Number
	r.start, r.end = claim.Start, claim.End
	if r.start == nil {
		r.start = []byte{}
	}
	r.nextFile.Store(max(claim.NextFileNum, 1))
	if err := r.removeOrphans(ctx); err != nil {
		return err
	}
	tables := make([]*table, 0, len(claim.Files))
	for _, f := range claim.Files {
		t, err := r.openTable(ctx, f, 0)
		if err != nil {
			for _, t := range tables {
				t.unref()
			}
			return &Error{Region: r.opts.Name, Err: err}
		}
		tables = append(tables, t)
	}
	r.current = newVersion(tables)
	for _, t := range tables {
		t.unref() // the version holds the only reference
	}
	return nil
}

// recover is Open's third stage: the writes the WAL holds beyond the
// claimed files (this WAL's own, and any fenced stream's it took over)
// replayed into a memstore, the clock moved past what the region issued,
// and the log opened for new writes.
func (o *opening) recover(ctx context.Context) error {
	r, opts, claim := o.r, o.r.opts, o.claim
	replay, err := r.replaySources(ctx, o.prev, claim)
	if err != nil {
		return err
	}
	mem, err := r.replayWAL(claim, replay...)
	if err != nil {
		return err
	}
	r.takenOverTS = r.lastTS
	// The store's clock observes what this region issued before: its next
	// timestamps are above them even where the region's own floor is not
	// consulted (a transaction's start). One too far ahead (a previous
	// owner's clock beyond the bound) is not followed; the region's floor
	// still keeps its own timestamps above it.
	if err := opts.Clock.Update(r.lastTS); err != nil {
		opts.Logger.Warn("region holds timestamps ahead of this store's clock", "region", opts.Name, "err", err)
	}
	r.vis = newVisibility(r.lastTS)
	r.mem = mem
	// docs/clock.md, rule 4: the reads the region's previous owner served
	// advanced its clock in that process's memory only; their timestamps
	// were at most that clock, within the maximum offset of this one. A
	// split's daughters open in the parent's process, whose clock has
	// observed those reads, and so do a merge's region (both parents were
	// served by this store).
	if d := opts.Clock.MaxOffset(); d > 0 && opts.DeriveFrom == nil {
		if !opts.Clock.WaitPast(uint64(opts.Clock.Physical().Add(d).UnixNano()), ctx.Done()) {
			return ctx.Err()
		}
	}
	if err := r.openLog(ctx, claim); err != nil {
		return err
	}
	if r.shipper != nil {
		r.shipper.IdleRefresh = contract.WALArchiveIdleRefresh
		r.shipper.Clock = opts.Clock.Now
		r.archiveStatus.Enabled = true
		r.archiveStatus.Covered = time.Now()
	}
	return nil
}

// run is Open's last stage: the background loops started, a full memstore
// rotated, and what a taken-over stream held flushed before the region
// takes a write. It closes the region when it fails.
func (o *opening) run(ctx context.Context) error {
	r, opts := o.r, o.r.opts
	r.bgCtx, r.cancel = context.WithCancel(context.Background())
	r.compactCtx, r.stopCompactions = context.WithCancelCause(r.bgCtx)
	r.wg.Add(2)
	go r.flushLoop()
	go r.inMemoryFlushLoop()
	if opts.OwnershipCheckInterval > 0 {
		r.wg.Add(1)
		go r.watchOwnership()
	}
	if r.mem.ms.View().ApproximateBytes() >= opts.MemstoreBytes {
		r.commitMu.Lock()
		err := r.rotateLocked()
		r.commitMu.Unlock()
		if err != nil {
			_ = r.Close()
			return err
		}
	}
	if len(o.claim.TakenOverWALs) > 0 {
		// The replayed records are in the fenced streams only: flushed
		// now, they are in the region's files before it takes a write,
		// and a crash of this store does not need those streams again
		// (the flush's manifest drops them from TakenOverWALs).
		if err := r.Flush(ctx); err != nil {
			_ = r.Close()
			return errorf(opts.Name, "flushing what the taken-over WAL held: %w", err)
		}
	}
	r.openedTS = max(opts.Clock.Now(), r.lastTS)
	if r.shipper != nil {
		r.wg.Add(1)
		go r.archiveLoop()
	}
	if !opts.DisableAutoCompaction {
		// A compaction the policy selects among the files found: one a
		// flush scheduled may have been cancelled by the close before
		// this open, and no flush may come for long. HBase requests it
		// when a region opens too (postOpenDeployTasks), and Pebble
		// schedules its compactions when it opens. Every scan seeks
		// each file, so leaving them costs every read. From a
		// goroutine of its own, as a flush's: the opener's goroutine
		// does not hold compactMu even for the moment before it is
		// handed over.
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			r.maybeScheduleCompaction()
		}()
	}
	return nil
}

// openTable opens file f. cacheFileID, when not 0, is the block cache ID its
// blocks were cached under as they were written (write-through); 0 gives
// the file a new one.
func (r *Region) openTable(ctx context.Context, f manifest.FileMeta, cacheFileID uint64) (*table, error) {
	key := f.Key
	r.checkIO("opening " + key)
	// A reference file (a split's daughter's) lives under its home's
	// prefix, not this region's.
	objectKey := ObjectKey(r.homeOf(f), key)
	obj, err := r.opts.Bucket.OpenObject(ctx, objectKey)
	if err != nil {
		return nil, fmt.Errorf("opening %s: %w", objectKey, err)
	}
	if cacheFileID == 0 {
		cacheFileID = blockcache.NewFileID()
	}
	rd, err := sstable.OpenWithFileID(obj, obj.Size(), objectKey, r.opts.BlockCache, cacheFileID)
	if err != nil {
		_ = obj.Close()
		return nil, err
	}
	t := &table{meta: f, key: key, obj: obj, reader: rd, bucket: r.bucket}
	t.beforeClose = func(t *table) { r.checkIO("closing " + t.key) }
	t.onDelete = func(t *table) { r.opts.BlockCache.EvictFile(t.reader.FileID()) }
	t.refs.Store(1)
	return t, nil
}

// removeOrphans deletes SSTs that the claimed manifest does not name: output
// of a flush or compaction that never committed. The claim fences every
// earlier owner, so none of them can commit those files any more.
func (r *Region) removeOrphans(ctx context.Context) error {
	live := map[string]bool{}
	for _, f := range r.manifest.Files {
		live[f.Key] = true
	}
	objs, err := r.bucket.List(ctx, "sst/")
	if err != nil {
		return errorf(r.opts.Name, "listing files: %w", err)
	}
	for _, o := range objs {
		if !live[o.Key] && strings.HasSuffix(o.Key, ".sst") {
			if err := r.bucket.Delete(ctx, o.Key); err != nil {
				return err
			}
		}
	}
	return manifest.RemoveOlder(ctx, r.bucket, r.manifest, 8)
}

// Name is the region's name.
func (r *Region) Name() string { return r.opts.Name }

// ManifestCommitted reports whether manifest n of region name exists in
// bucket (the store's, not prefixed): one existence check, the cheap way for
// a store waiting to claim a region to notice that its owner committed after
// manifest n-1 (released it, perhaps) without loading anything.
func ManifestCommitted(ctx context.Context, bucket *blob.Bucket, name string, n uint64) (bool, error) {
	return bucket.Prefixed(BucketPrefix(name)).Exists(ctx, manifest.ObjectName(n))
}

// Close flushes nothing (the WAL holds unflushed writes), stops background
// work and releases files. Later calls return ErrClosed.
func (r *Region) Close() error { return r.shutdown(nil) }

// Release hands the region over: it aborts a running compaction, refuses
// new writes, flushes every acknowledged write into an SST, stops
// background work and commits a manifest marking the region released, so
// any store may claim it without this WAL. Then the WAL segments are
// deleted. If Release fails the region is closed but not released, and only
// a reopen with this WAL may claim it.
//
// A compaction, however long (a remote job, a throttled warmup), does not
// delay the handover: it is cancelled first, and its caller gets
// ErrCompactionAborted unless its output was already installed (see
// Compact). The flush is what a release waits for.
func (r *Region) Release(ctx context.Context) error { return r.ReleaseWith(ctx, nil) }

// ReleaseWith is Release with beforeCommit (if not nil) run once every
// write is refused and every acknowledged write is flushed, and before the
// manifest marking the region released is committed: whatever it writes is
// in place before any other store can claim the region (a claim waits for
// that manifest). It runs holding none of the region's locks, so it may do
// I/O and call the region's read methods. An error from it fails the
// release like a failed flush: the region is closed, not released.
func (r *Region) ReleaseWith(ctx context.Context, beforeCommit func(context.Context) error) error {
	r.stopCompactions(ErrReleasing)
	if err := r.flush(ctx, true); err != nil {
		_ = r.Close()
		return errorf(r.opts.Name, "releasing: %w", err)
	}
	if beforeCommit != nil {
		if err := beforeCommit(ctx); err != nil {
			_ = r.Close()
			return errorf(r.opts.Name, "releasing: %w", err)
		}
	}
	err := r.shutdown(func() error {
		r.manifestMu.Lock()
		defer r.manifestMu.Unlock()
		prev := r.manifest
		next := prev.Clone()
		next.Released = true
		if err := r.commitManifest(ctx, prev, &next); err != nil {
			return err
		}
		r.mu.Lock()
		r.manifest = next
		r.mu.Unlock()
		return r.walDir.RemoveSegments()
	})
	if err != nil {
		return errorf(r.opts.Name, "releasing: %w", err)
	}
	return nil
}

// shutdown stops the region; final, if set, runs after the WAL is closed and
// before the WAL directory is unlocked.
func (r *Region) shutdown(final func() error) error {
	r.commitMu.Lock()
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		r.commitMu.Unlock()
		return ErrClosed
	}
	r.closed = true
	r.cond.Broadcast()
	r.mu.Unlock()
	r.commitMu.Unlock()
	r.feeds.closeAll(ErrClosed)
	r.stopCompactions(ErrClosed) // a no-op after Release's ErrReleasing
	r.cancel()
	r.wg.Wait()
	// Wait for a running compaction to observe the cancellation.
	r.compactMu.Lock()
	defer r.compactMu.Unlock()
	err := r.log.Close()
	if errors.Is(err, wal.ErrClosed) {
		err = nil
	}
	if err == nil {
		// A release removes the segments next: they go to the archive
		// first, or the release fails and the WAL stays.
		if serr := r.shipFinal(); serr != nil {
			r.opts.Logger.Warn("archiving the WAL at shutdown; the next owner of this WAL directory ships the rest", "region", r.opts.Name, "err", serr)
			if final != nil {
				err = errorf(r.opts.Name, "archiving the WAL: %w", serr)
			}
		}
	}
	if err == nil && final != nil {
		err = final()
	}
	r.mu.Lock()
	cur := r.current
	r.mu.Unlock()
	cur.unref() // closes every file: not under mu
	r.remoteReleases.Wait()
	if uerr := r.walDir.Unlock(); err == nil {
		err = uerr
	}
	return err
}

func (r *Region) checkOpen() error {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if r.closed {
		return ErrClosed
	}
	if r.splitting {
		return ErrSplitting
	}
	if r.releasing {
		return ErrReleasing
	}
	return r.bgErr
}

// watchOwnership notices a forced takeover between this region's own
// manifest commits, so a stale owner stops acknowledging writes within one
// interval instead of at its next flush.
func (r *Region) watchOwnership() {
	defer r.wg.Done()
	t := time.NewTicker(r.opts.OwnershipCheckInterval)
	defer t.Stop()
	for {
		select {
		case <-r.bgCtx.Done():
			return
		case <-t.C:
		}
		// Holding manifestMu keeps this region's own next commit from
		// looking like someone else's; r.manifest changes only under it.
		r.manifestMu.Lock()
		next := r.manifest.Number + 1
		r.checkIO("checking ownership")
		taken, err := r.bucket.Exists(r.bgCtx, manifest.ObjectName(next))
		r.manifestMu.Unlock()
		if err != nil {
			r.opts.Logger.Debug("checking region ownership", "region", r.opts.Name, "err", err)
			continue
		}
		if taken {
			r.setBackgroundError(errorf(r.opts.Name, "%w (manifest %d was committed by another opener)", ErrFenced, next))
			return
		}
	}
}

// setBackgroundError records a failure that makes the region refuse writes.
func (r *Region) setBackgroundError(err error) {
	r.mu.Lock()
	first := r.bgErr == nil
	if first {
		r.bgErr = err
	}
	r.cond.Broadcast()
	r.mu.Unlock()
	if first {
		r.opts.Logger.Error("region stops accepting writes", "region", r.opts.Name, "err", err)
	}
}

// commitManifest commits next as the successor of prev. The caller holds
// manifestMu, and not mu: the commit is a bucket write.
func (r *Region) commitManifest(ctx context.Context, prev manifest.Manifest, next *manifest.Manifest) error {
	r.checkIO("committing manifest")
	// The files may hold what a merge left after dropping versions: the
	// next owner must refuse the reads this one refuses. Capped at
	// FlushedTS: a version a merge dropped from the files was superseded by
	// one in them, at or below FlushedTS, so reads there are exact; and the
	// memstore's own drops above it are replayed from the WAL (which
	// raises exactFrom again), or were lost with it in an async crash.
	r.mu.RLock()
	next.ExactFromTS = max(next.ExactFromTS, min(r.exactFrom, next.FlushedTS))
	r.mu.RUnlock()
	return manifest.Commit(ctx, r.bucket, prev, next)
}

func (r *Region) nextTS() uint64 {
	ts := r.opts.Clock.Now()
	if ts <= r.lastTS {
		// The region is ahead of the store's clock: a commit timestamp
		// decided by another store's prepare (the floor of commitRecord).
		// The clock follows, so a transaction that begins here or observes
		// this store's clock afterwards is above every version here.
		ts = r.lastTS + 1
		r.opts.Clock.Forward(ts)
	}
	r.lastTS = ts
	return ts
}
