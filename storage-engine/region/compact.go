package region

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"time"

	"github.com/bellows-kv/bellows/storage-engine/compaction"
)

// CompactionInfo describes a finished compaction.
type CompactionInfo struct {
	Major      bool
	Inputs     []string
	Output     string // empty if every version was dropped
	InputBytes int64
	Duration   time.Duration
	Stats      compaction.MergeStats
}

// Compact runs a compaction now and waits for it: a major compaction of
// every file when major is set, otherwise the minor compaction the policy
// selects (nothing if it selects none).
//
// A compaction never holds the region hostage: when the region is released
// (or closed) while Compact runs, the job is cancelled (a remote worker
// aborts it and frees its memory) and Compact returns at once with an error
// matching ErrCompactionAborted: nothing was installed, the manifest still
// names the inputs. Once the output is installed the compaction is done: a
// warmup cut short by the release only leaves the cache colder, and Compact
// reports the compaction.
func (r *Region) Compact(ctx context.Context, major bool) (*CompactionInfo, error) {
	if err := r.checkOpen(); err != nil {
		return nil, err
	}
	// The call's context, ended also when the region stops its
	// compactions, with the region's reason as the cause.
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stop := context.AfterFunc(r.compactCtx, func() { cancel(context.Cause(r.compactCtx)) })
	defer stop()
	r.compactMu.Lock()
	info, err := r.compactLocked(ctx, major)
	r.compactMu.Unlock()
	r.runQueuedCompaction()
	return info, err
}

// CompactionState is what a region's compactions are doing now.
type CompactionState struct {
	// Running: a compaction holds the region's compactions (it may still
	// wait for a slot or a worker: Location "").
	Running bool
	// Queued: a request arrived while one ran; the next holder runs it.
	Queued bool
	// Location is where the running compaction executes, when the
	// executor says (compaction.Placer): "local" or "remote", with Worker
	// the worker's address; "" while it waits to start.
	Location, Worker string
	// PendingBytes is the compaction debt: the input bytes of the
	// compactions the policy wants and is not getting, the running one's
	// while it waits to start included (compaction.EstimatePendingBytes
	// over the files no executing compaction merges).
	PendingBytes int64
	// WaitingSince is when the oldest compaction wanted and not yet
	// executing was wanted (the queued request, or the running one while
	// it waits for a slot or a worker); zero when none waits.
	WaitingSince time.Time
}

// CompactionState says whether a compaction runs or waits, and where, and
// what the region's compactions owe.
func (r *Region) CompactionState() CompactionState {
	busy := r.compacting.Load()
	st := CompactionState{Running: busy != nil, Queued: r.wait.queued.Load()}
	if st.Queued {
		st.WaitingSince = unixNanos(r.wait.queuedAt.Load())
	}
	if st.Running {
		if p, ok := r.exec.(compaction.Placer); ok {
			st.Location, st.Worker, _ = p.Where(r.opts.Name)
		} else {
			// Executors that cannot place a job elsewhere run it here, at once.
			st.Location = "local"
		}
	}
	executing := busy
	if st.Running && st.Location == "" {
		executing = nil // its files are owed until it starts
		if at := unixNanos(r.wait.runningAt.Load()); !at.IsZero() && (st.WaitingSince.IsZero() || at.Before(st.WaitingSince)) {
			st.WaitingSince = at
		}
	}
	r.mu.RLock()
	sizes := sizesOutside(r.current.tables, executing)
	merged := r.manifest.MergedRuns
	r.mu.RUnlock()
	if merged && len(sizes) > 1 {
		// The next compaction is a major one of every file (compactLocked).
		for _, n := range sizes {
			st.PendingBytes += n
		}
	} else {
		st.PendingBytes = compaction.EstimatePendingBytes(sizes, r.opts.Compaction)
	}
	return st
}

// sizesOutside are the sizes, oldest first, of the tables busy (a
// compaction's inputs; nil: none) does not hold: what the policy selects
// among.
func sizesOutside(tables []*table, busy *map[*table]bool) []int64 {
	sizes := make([]int64, 0, len(tables))
	for _, t := range tables {
		if busy == nil || !(*busy)[t] {
			sizes = append(sizes, t.meta.Size)
		}
	}
	return sizes
}

// compactionWait holds the region's compaction request queued while
// compactMu was held, and since when the queued and the running
// compaction were wanted, as Unix nanoseconds (0: none). The dates are
// monitoring only: a request queued as a compaction starts may be dated
// by one compaction too early or late.
type compactionWait struct {
	// queued: a request arrived while compactMu was held; it has been
	// counted in stats and the next holder serves it.
	queued    atomic.Bool
	queuedAt  atomic.Int64 // the queued request's
	runningAt atomic.Int64 // the running compaction's
}

// queue dates a request about to be queued, unless one is already dated.
func (w *compactionWait) queue(now time.Time) { w.queuedAt.CompareAndSwap(0, now.UnixNano()) }

// serve takes the queued request, if any, as served by the compaction
// starting now under compactMu (unless it was asked for as a major one,
// which serves none: servesQueue false), and dates that
// compaction: wanted when the request was queued, else now. The returned
// func ends it. A compaction calls it once its inputs are marked busy, so
// a request that arrives while they are selected finds the flag still set
// instead of counting the same inputs a second time.
func (w *compactionWait) serve(servesQueue bool, now time.Time) (queued bool, done func()) {
	at := now.UnixNano()
	if queued = servesQueue && w.queued.Swap(false); queued {
		if q := w.queuedAt.Swap(0); q != 0 {
			at = q
		}
	}
	w.runningAt.Store(at)
	return queued, func() { w.runningAt.Store(0) }
}

// drop takes the queued request, if any, as served by a compaction that
// found nothing to compact.
func (w *compactionWait) drop() {
	if w.queued.Swap(false) {
		w.queuedAt.Store(0)
	}
}

func unixNanos(ns int64) time.Time {
	if ns == 0 {
		return time.Time{}
	}
	return time.Unix(0, ns)
}

// maybeScheduleCompaction is called after a flush: it runs the compaction
// the policy selects in the background. When a compaction already holds
// compactMu, the request is not dropped: if the policy selects one among
// the files that compaction is not merging, the request is counted now
// (demand is measured when it arises, so overload, when requests meet a
// busy region, does not hide it from the autoscaler) and queued; whoever
// unlocks compactMu next runs it (runQueuedCompaction).
func (r *Region) maybeScheduleCompaction() {
	if r.compactMu.TryLock() {
		r.startBackgroundCompaction()
		return
	}
	if !r.queueCompactionRequest() {
		return
	}
	// The holder may have unlocked between the TryLock and the queueing,
	// and checked wait.queued before it was set: try once more, so one
	// of the two runs the request.
	r.runQueuedCompaction()
}

// startBackgroundCompaction runs a minor compaction in the background; the
// caller holds compactMu and hands it over.
func (r *Region) startBackgroundCompaction() {
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		r.compactMu.handedOver()
		_, err := r.compactLocked(r.compactCtx, false)
		r.compactMu.Unlock()
		if err != nil && r.compactCtx.Err() == nil {
			r.opts.Logger.Warn("background compaction failed", "region", r.opts.Name, "err", err)
		}
		r.runQueuedCompaction()
	}()
}

// runQueuedCompaction starts the request queued while compactMu was held,
// if any and if compactMu is free (else its holder will).
func (r *Region) runQueuedCompaction() {
	if !r.wait.queued.Load() || r.compactCtx.Err() != nil || r.opts.DisableAutoCompaction {
		return
	}
	if r.compactMu.TryLock() {
		r.startBackgroundCompaction()
	}
}

// queueCompactionRequest records a compaction request that found compactMu
// held: when the policy selects a compaction among the files the running
// one is not merging and none is queued yet, it counts the request and
// queues it, and reports true.
func (r *Region) queueCompactionRequest() bool {
	busy := r.compacting.Load()
	r.mu.RLock()
	sizes := sizesOutside(r.current.tables, busy)
	merged := r.manifest.MergedRuns
	r.mu.RUnlock()
	start, end, ok := compaction.SelectMinor(sizes, r.opts.Compaction)
	if merged {
		// Served by a major compaction (compactLocked).
		start, end, ok = 0, len(sizes), len(sizes) > 0 && busy == nil
	}
	if !ok {
		return false
	}
	r.wait.queue(time.Now())
	if !r.wait.queued.CompareAndSwap(false, true) {
		return false
	}
	var bytes int64
	for _, n := range sizes[start:end] {
		bytes += n
	}
	r.stats.recordCompactionRequested(bytes)
	return true
}

// notInstalled is the error of a compaction whose context ended before its
// output was installed: ErrCompactionAborted when the region stopped its
// compactions (Release, shutdown), else the caller's cancellation.
func (r *Region) notInstalled(ctx context.Context) error {
	cause := context.Cause(ctx)
	switch {
	case errors.Is(cause, ErrReleasing):
		return errorf(r.opts.Name, "%w: %s was released by this store while its compaction ran; nothing was installed", ErrCompactionAborted, r.opts.Name)
	case errors.Is(cause, ErrClosed):
		return errorf(r.opts.Name, "%w: %s was closed while its compaction ran; nothing was installed", ErrCompactionAborted, r.opts.Name)
	}
	return errorf(r.opts.Name, "compaction: %w; nothing was installed", ctx.Err())
}

// compactLocked runs one compaction under compactMu. Until the manifest
// commit that installs the output, ctx ending abandons it (notInstalled);
// the commit itself is not cancelled (installCompaction), so the newest
// manifest names either every input or the output, never a deleted file.
func (r *Region) compactLocked(ctx context.Context, major bool) (*CompactionInfo, error) {
	if ctx.Err() != nil {
		// Waited for compactMu behind a compaction that Release or
		// shutdown cancelled.
		return nil, r.notInstalled(ctx)
	}
	r.mu.RLock()
	v := r.current
	v.ref()
	r.mu.RUnlock()
	defer v.unref()
	servesQueue := !major // a minor request, even if mergedRuns makes it major
	start, end := 0, len(v.tables)
	if !major && r.mergedRuns() {
		// A merge's two runs interleave in time: a window across both
		// would write a file out of order with each. The first compaction
		// is a major one, which unifies them (manifest.MergedRuns).
		major = true
	}
	if !major {
		var ok bool
		if start, end, ok = compaction.SelectMinor(sizesOutside(v.tables, nil), r.opts.Compaction); !ok {
			r.wait.drop()
			return nil, nil
		}
	}
	inputs := v.tables[start:end]
	if len(inputs) == 0 {
		return nil, nil
	}
	busy := make(map[*table]bool, len(inputs))
	for _, t := range inputs {
		busy[t] = true
	}
	r.compacting.Store(&busy)
	defer r.compacting.Store(nil)
	queued, served := r.wait.serve(servesQueue, time.Now())
	defer served()
	horizon, err := compactionHorizon(r, inputs, major)
	if err != nil {
		return nil, err
	}
	began := time.Now()
	num, outKey := r.newFileKey()
	job := compaction.Job{
		Region: r.opts.Name,
		Output: ObjectKey(r.opts.Name, outKey),
		Merge: compaction.MergeOptions{
			Major:     major,
			Retention: r.opts.Retention,
			Snapshots: r.retentionSnapshots(horizon),
			Horizon:   horizon,
		},
		SST:   r.opts.SST,
		Start: r.start,
		End:   r.end,
	}
	var inputBytes int64
	for _, t := range inputs {
		job.Inputs = append(job.Inputs, ObjectKey(r.homeOf(t.meta), t.key))
		inputBytes += t.meta.Size
		job.SST.ExpectedKeys += uint(t.meta.Entries)
	}
	if !queued {
		r.stats.recordCompactionRequested(inputBytes)
	}
	r.checkIO("running a compaction")
	res, err := r.exec.Execute(ctx, job)
	if err == nil && ctx.Err() != nil {
		// Finished as the region stopped its compactions: do not start
		// installing (or warming) into a region being handed over.
		releaseBlocks(res.Blocks)
		err = ctx.Err()
	}
	if err != nil {
		_ = r.bucket.Delete(context.Background(), outKey)
		r.stats.recordCompaction(false)
		if ctx.Err() != nil {
			return nil, r.notInstalled(ctx)
		}
		return nil, errorf(r.opts.Name, "compaction: %w", err)
	}
	var out *table
	if !res.Empty {
		out, err = r.openTable(ctx, NewFileMeta(num, outKey, res.Props, uint64(res.Size)), res.CacheFileID)
		if err != nil {
			releaseBlocks(res.Blocks)
			if res.CacheFileID != 0 {
				r.opts.BlockCache.EvictFile(res.CacheFileID)
			}
			_ = r.bucket.Delete(context.Background(), outKey)
			r.stats.recordCompaction(false)
			if ctx.Err() != nil {
				return nil, r.notInstalled(ctx)
			}
			return nil, err
		}
	}
	installed, err := r.installWithWarmup(ctx, inputs, out, res.Blocks, major)
	if err != nil && !installed {
		r.stats.recordCompaction(false)
		if ctx.Err() != nil {
			return nil, r.notInstalled(ctx)
		}
		return nil, err
	}
	if err != nil {
		// Installed; only the warmup failed or was cut short (the region
		// is being released): the compaction itself is done.
		if ctx.Err() == nil {
			r.stats.recordCompaction(false)
			return nil, err
		}
		r.opts.Logger.Info("compaction installed; its warmup was cut short", "region", r.opts.Name, "cause", context.Cause(ctx))
	}
	r.stats.recordCompaction(true)
	if !res.Empty {
		r.stats.CompactionWrittenBytes.Add(uint64(res.Size))
	}
	info := &CompactionInfo{Major: major, InputBytes: inputBytes, Duration: time.Since(began), Stats: res.Stats}
	for _, t := range inputs {
		info.Inputs = append(info.Inputs, t.key)
	}
	if out != nil {
		info.Output = outKey
	}
	return info, nil
}

// releaseBlocks lets the worker drop the output blocks it kept for a
// warmup that will not happen. Best effort and brief: the worker drops them
// after its output TTL anyway, and a release must not wait on it.
func releaseBlocks(src compaction.BlockSource) {
	if src == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = src.Release(ctx)
}

// mergedRuns reports whether the region's files are still a merge's two
// runs (manifest.MergedRuns).
func (r *Region) mergedRuns() bool {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.manifest.MergedRuns
}

// maxTS is the newest version's timestamp in tables: a merge of them judges
// every version at or below it.
func maxTS(tables []*table) uint64 {
	var ts uint64
	for _, t := range tables {
		ts = max(ts, t.meta.MaxTS)
	}
	return ts
}

// installCompaction commits a manifest that replaces inputs (a contiguous
// run of the current files) with out, and makes it the read state. Input
// files are deleted once the last reader of them is done.
//
// With warm set the old version stays readable behind a warmup threshold
// until finishWarming. major: inputs were every file when the compaction
// began, so out replaces a merge's two runs (manifest.MergedRuns) by one
// file, older than any flushed since.
func (r *Region) installCompaction(ctx context.Context, inputs []*table, out *table, warm, major bool) error {
	r.manifestMu.Lock()
	defer r.manifestMu.Unlock()
	r.mu.RLock()
	prev := r.manifest
	cur := r.current
	r.mu.RUnlock()
	i := slices.Index(cur.tables, inputs[0])
	if i < 0 || i+len(inputs) > len(cur.tables) || !slices.Equal(cur.tables[i:i+len(inputs)], inputs) {
		// Cannot happen while compactMu serialises compactions; refuse
		// rather than install a wrong file list.
		if out != nil {
			out.obsolete.Store(true)
			out.unref()
		}
		return errorf(r.opts.Name, "compaction inputs are no longer a contiguous run of live files")
	}
	tables := slices.Clone(cur.tables[:i])
	files := slices.Clone(prev.Files[:i])
	if out != nil {
		tables = append(tables, out)
		files = append(files, out.meta)
	}
	tables = append(tables, cur.tables[i+len(inputs):]...)
	files = append(files, prev.Files[i+len(inputs):]...)
	next := prev.Clone()
	next.Files = files
	next.NextFileNum = r.nextFile.Load()
	if major && i == 0 {
		next.MergedRuns = false
	}
	// Not cancelled: a commit cut off mid-write may have been written
	// anyway, and the output would then be deleted under a manifest that
	// names it. One small bucket write; Release waits for it (compactMu).
	if err := r.commitManifest(context.WithoutCancel(ctx), prev, &next); err != nil {
		if out != nil {
			out.obsolete.Store(true)
			out.unref()
		}
		if isFenced(err) {
			r.setBackgroundError(err)
		}
		return err
	}
	r.mu.Lock()
	r.manifest = next
	r.current = newVersion(tables)
	r.warmStats.SwitchedAt.Store(time.Now().UnixNano())
	if warm {
		// The old version keeps cur's reference until the warmup ends.
		r.warm = &warming{old: cur, inputs: inputs, evicted: make([]int, len(inputs))}
	}
	r.mu.Unlock()
	if out != nil {
		out.unref()
	}
	for _, t := range inputs {
		t.obsolete.Store(true)
	}
	if !warm {
		cur.unref()
	}
	return nil
}

// compactionHorizon is the GC horizon of a compaction of inputs in r: the
// newest timestamp it may judge.
func compactionHorizon(r *Region, inputs []*table, major bool) (uint64, error) {
	newest := maxTS(inputs)
	if ret := r.opts.Retention; major && ret.MaxVersions == 0 && ret.GCTTL > 0 {
		// A value expiring after every input's timestamp is dropped only
		// by a horizon past its expiry, and the horizon stays at or below
		// the visible timestamp, which a quiet region leaves at its last
		// commit. Under a GC window a major compaction makes the region
		// readable at its clock's now and judges up to now − gcTTL
		// (docs/expiry.md): reads older than the window are refused
		// anyway. A version superseded above the inputs is kept, as with
		// the inputs' own horizon: only expired values gain. (A count
		// bound judges up to the visible timestamp: raising it would
		// refuse reads of the newest versions' timestamps.)
		if err := r.ReadableAt(r.opts.Clock.Now()); err != nil {
			return 0, err
		}
		newest = max(newest, r.vis.load())
	}
	return r.gcHorizon(newest), nil
}
