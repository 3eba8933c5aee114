package region

import (
	"bytes"
	"context"
	"errors"
	"time"

	"github.com/bellows-kv/bellows/storage-engine/blockcache"
	"github.com/bellows-kv/bellows/storage-engine/manifest"
	"github.com/bellows-kv/bellows/storage-engine/sstable"
)

func (r *Region) flushLoop() {
	defer r.wg.Done()
	backoff := 100 * time.Millisecond
	for {
		select {
		case <-r.bgCtx.Done():
			return
		case <-r.flushCh:
		}
		for {
			r.mu.RLock()
			var mt *memTable
			if len(r.imm) > 0 {
				mt = r.imm[0]
			}
			r.mu.RUnlock()
			if mt == nil {
				break
			}
			if err := r.flushOne(mt); err != nil {
				if errors.Is(err, manifest.ErrFenced) {
					r.setBackgroundError(err)
					return
				}
				r.opts.Logger.Warn("flush failed; retrying", "region", r.opts.Name, "err", err, "in", backoff)
				r.stats.recordFlushError()
				select {
				case <-r.bgCtx.Done():
					return
				case <-time.After(backoff):
				}
				backoff = min(2*backoff, 10*time.Second)
				continue
			}
			backoff = 100 * time.Millisecond
			// Ask after each file, not once no frozen memstore is left:
			// writers faster than the flushes keep one waiting, and the
			// files would pile up uncompacted for as long as they do.
			if !r.opts.DisableAutoCompaction {
				r.maybeScheduleCompaction()
			}
		}
	}
}

// newFileKey allocates the number of a new SST and its key.
func (r *Region) newFileKey() (uint64, string) {
	n := r.nextFile.Add(1) - 1
	return n, sstKey(r.epoch, n)
}

func (r *Region) flushOne(mt *memTable) error {
	view := mt.frozen
	view.WaitWriters()
	if merged := mt.ms.MergeFrozen(view); merged != view {
		// Reads search one flat segment while the file is written.
		r.mu.Lock()
		mt.frozen = merged
		r.mu.Unlock()
		view = merged
	}
	ctx := r.bgCtx
	// The hook saves what the flushed WAL segments' records carried. Once
	// writes are refused (a release, split or merge's final flush) nothing
	// adds to it, so it runs beside the file's write: the refusal lasts
	// the longer of the two, not their sum.
	r.mu.RLock()
	final := r.releasing
	r.mu.RUnlock()
	var hookDone chan struct{}
	if hook := r.opts.BeforeFlushCommit; hook != nil && final {
		hookDone = make(chan struct{})
		go func() {
			defer close(hookDone)
			hook(ctx, true)
		}()
		defer func() { <-hookDone }()
	}
	var t *table
	if view.Len() > 0 {
		num, key := r.newFileKey()
		r.checkIO("writing " + key)
		w, err := r.bucket.NewWriter(ctx, key)
		if err != nil {
			return err
		}
		opts := r.opts.SST
		opts.ExpectedKeys = uint(view.Len())
		// cacheID names the file's blocks in the cache when the flush
		// caches them as it writes (0: it does not).
		var cacheID uint64
		if r.opts.CacheFlushes && r.opts.BlockCache != nil {
			cacheID = blockcache.NewFileID()
			cache := r.opts.BlockCache
			opts.OnDataBlock = func(offset uint64, block, lastUserKey []byte) {
				// The writer reuses both buffers.
				cache.Insert(blockcache.Key{File: cacheID, Offset: offset}, bytes.Clone(block), bytes.Clone(lastUserKey))
			}
		}
		sw := sstable.NewWriter(w, opts)
		it := view.NewIterator()
		for ok := it.First(); ok; ok = it.Next() {
			if err := sw.Add(it.Key(), it.Value()); err != nil {
				_ = w.Close()
				return err
			}
		}
		props, size, err := sw.Finish()
		if cerr := w.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			r.opts.BlockCache.EvictFile(cacheID)
			_ = r.bucket.Delete(context.Background(), key)
			return errorf(r.opts.Name, "writing flush output %s: %w", key, err)
		}
		t, err = r.openTable(ctx, NewFileMeta(num, key, props, size), cacheID)
		if err != nil {
			r.opts.BlockCache.EvictFile(cacheID)
			_ = r.bucket.Delete(context.Background(), key)
			return err
		}
	}

	if hookDone != nil {
		<-hookDone
	} else if r.opts.BeforeFlushCommit != nil {
		r.opts.BeforeFlushCommit(ctx, false)
	}
	r.manifestMu.Lock()
	defer r.manifestMu.Unlock()
	r.mu.RLock()
	prev := r.manifest
	nextMin := r.mem.walSeg
	if len(r.imm) > 1 {
		nextMin = r.imm[1].walSeg
	}
	r.mu.RUnlock()
	next := flushedManifest(prev, mt, t, nextMin, r.nextFile.Load(), r.takenOverTS)
	if err := r.commitManifest(ctx, prev, &next); err != nil {
		if t != nil {
			t.obsolete.Store(true)
			t.unref()
		}
		return err
	}
	// The segments below nextMin hold only what the committed manifest
	// has; they go before the flush's waiters wake, so a Flush that
	// returns has shrunk the WAL (the store's WAL bound counts on it).
	if err := r.log.RemoveBefore(nextMin); err != nil {
		r.opts.Logger.Warn("removing flushed WAL segments", "region", r.opts.Name, "err", err)
	} else {
		r.forgetWALSegmentsBefore(nextMin)
	}
	// The references replaced here are dropped after mu is released:
	// dropping a version's last reference may close files.
	var drop []*version
	r.mu.Lock()
	r.manifest = next
	old := r.current
	if t != nil {
		tables := append(append([]*table{}, old.tables...), t)
		r.current = newVersion(tables)
		drop = append(drop, old)
		if w := r.warm; w != nil {
			// Both sides of a warmup see every flush.
			prevOld := w.old
			w.old = newVersion(append(append([]*table{}, prevOld.tables...), t))
			drop = append(drop, prevOld)
		}
	}
	r.imm = r.imm[1:]
	r.cond.Broadcast()
	r.mu.Unlock()
	if t != nil {
		t.unref()
	}
	for _, v := range drop {
		v.unref()
	}
	r.stats.recordFlush()
	if t != nil {
		r.stats.FlushedBytes.Add(uint64(t.meta.Size))
	}
	// In-memory compaction may have dropped what newer segments hold.
	r.truncateWAL()
	return nil
}

// NewFileMeta is the manifest entry of SST num at key, whose writer
// reported p and size.
func NewFileMeta(num uint64, key string, p sstable.Properties, size uint64) manifest.FileMeta {
	return manifest.FileMeta{
		Num: num, Key: key, Size: int64(size),
		Smallest: p.Smallest, Largest: p.Largest,
		MinTS: p.MinTS, MaxTS: p.MaxTS,
		Entries: p.Entries, Deletions: p.Deletions,
	}
}

// Flush freezes the active memstore (if it holds anything) and waits until
// every frozen memstore is in an SST named by a committed manifest.
func (r *Region) Flush(ctx context.Context) error { return r.flush(ctx, false) }

// flush is Flush; stopWrites also refuses every later write (Release).
func (r *Region) flush(ctx context.Context, stopWrites bool) error {
	return r.flushStopping(ctx, stopWrites, false)
}

// flushStopping is flush; splitting says why writes stop (ErrSplitting
// rather than ErrReleasing).
func (r *Region) flushStopping(ctx context.Context, stopWrites, splitting bool) error {
	r.commitMu.Lock()
	if err := r.checkOpen(); err != nil {
		r.commitMu.Unlock()
		return err
	}
	if stopWrites {
		r.mu.Lock()
		r.releasing = true
		r.splitting = splitting
		if r.writesStoppedAt.IsZero() {
			r.writesStoppedAt = time.Now()
		}
		r.mu.Unlock()
	}
	var target *memTable
	// maxTS, not only the entries: a write that has its timestamp and WAL
	// record (commitRecord, under commitMu) may not have inserted its
	// versions yet, and is acknowledged once it has; freezing waits for it.
	if r.mem.ms.View().Len() > 0 || r.mem.maxTS != 0 {
		target = r.mem
		if err := r.rotateLocked(); err != nil {
			r.commitMu.Unlock()
			return err
		}
	} else {
		r.mu.RLock()
		if len(r.imm) > 0 {
			target = r.imm[len(r.imm)-1]
		}
		r.mu.RUnlock()
	}
	r.commitMu.Unlock()
	if target == nil {
		return nil
	}
	stop := context.AfterFunc(ctx, func() {
		r.mu.Lock()
		r.cond.Broadcast()
		r.mu.Unlock()
	})
	defer stop()
	r.mu.Lock()
	defer r.mu.Unlock()
	for {
		pending := false
		for _, m := range r.imm {
			pending = pending || m == target
		}
		switch {
		case !pending:
			return nil
		case r.closed:
			return ErrClosed
		case r.bgErr != nil:
			return r.bgErr
		case ctx.Err() != nil:
			return ctx.Err()
		}
		r.cond.Wait()
	}
}

// flushedManifest is prev with memtable mt flushed into table t (nil: mt
// held nothing to write), the WAL kept from segment nextMin, and the
// region's next file number nextFile. A flush at or past takenOverTS (the
// newest timestamp the region's open replayed) holds every record of the
// streams it took over.
func flushedManifest(prev manifest.Manifest, mt *memTable, t *table, nextMin, nextFile, takenOverTS uint64) manifest.Manifest {
	next := prev.Clone()
	if t != nil {
		next.Files = append(next.Files, t.meta)
	}
	next.WALMinSegment = nextMin
	next.FlushedTS = max(prev.FlushedTS, mt.maxTS)
	if next.FlushedTS >= takenOverTS {
		next.TakenOverWALs = nil // every record replayed from them is in the files
	}
	next.NextFileNum = nextFile
	next.Locks, next.TxnOutcomes = manifestTxnState(prev, mt.txnRecs)
	return next
}
