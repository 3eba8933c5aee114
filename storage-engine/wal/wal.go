// Package wal is a region's write-ahead log: numbered segment files of
// checksummed records on a local directory, written with group commit.
//
// Invariants:
//   - Records are written in Append order. In ModeSync a record is
//     acknowledged (its Commit's Wait returns nil) only after it is fsynced.
//     In ModeAsync it is acknowledged at once; the writer hands it to the
//     operating system as soon as it can and fsyncs every SyncInterval, as
//     HBase's ASYNC_WAL and Pebble's NoSync do. A crash then loses at most a
//     suffix of the log: recovery is always a prefix of commit order.
//   - A segment is fsynced and closed before the next one is started, so only
//     the newest segment can have a torn tail after a crash.
//   - After any write or sync error the log fails every later Append: an
//     acknowledged write is never followed by a silently lost one.
//   - With a Replica, a unit is acknowledged only after Replica.Commit made
//     it durable beyond this volume (whatever the Mode), and a segment is
//     sealed there (Replica.Seal) before any record of a later segment is
//     committed: the replica's copy is always a prefix of the log, so a
//     fence written at its end stops this log for good.
//   - With HoldUntilArchived a segment file is removed only once both
//     RemoveBefore (its records are in SSTs or superseded) and
//     MarkArchivedBelow (the archive has it) passed it. Size counts only the
//     first: it is what recovery needs, and what the store's WAL bound
//     flushes to shrink; held bytes are the archive's to report.
package wal

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"
)

// Mode says when an append is acknowledged.
type Mode int

const (
	ModeSync Mode = iota
	ModeAsync
)

// ParseMode accepts "sync" and "async".
func ParseMode(s string) (Mode, error) {
	switch strings.ToLower(s) {
	case "sync", "":
		return ModeSync, nil
	case "async":
		return ModeAsync, nil
	}
	return 0, fmt.Errorf("wal: unknown sync mode %q (want sync or async)", s)
}

func (m Mode) String() string {
	if m == ModeAsync {
		return "async"
	}
	return "sync"
}

const headerLen = 8 // crc32c(len||payload) uint32, len uint32

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// ErrClosed is returned by appends to a closed log.
var ErrClosed = errors.New("wal: log is closed")

// Options configure a Log.
type Options struct {
	Dir  string
	Mode Mode
	// SyncInterval is how often ModeAsync fsyncs; default 100ms.
	SyncInterval time.Duration
	// MinSegment is the lowest number the first new segment may have. The
	// region passes the manifest's WAL position: after a crash that removed
	// every flushed segment before the next one was created, numbering must
	// not restart below the segments that replay reads.
	MinSegment uint64
	// HoldUntilArchived keeps every segment on disk, whatever RemoveBefore
	// says, until MarkArchivedBelow passes it: the WAL archive
	// (storage-engine/walarchive) has not shipped it yet.
	HoldUntilArchived bool
	// Replica, when set, makes every unit durable beyond this volume before
	// it is acknowledged (durability mode Bucket: the region's stream in
	// the bucket). Mode then says only when the local file is fsynced.
	Replica Replica
}

// Replica is where a log's records are made durable beyond its volume. Its
// calls come from the log's one writer goroutine, in log order.
type Replica interface {
	// Commit makes bytes [off, off+len(records)) of segment seg durable:
	// whole records, following the previous Commit of seg (or at 0).
	Commit(seg uint64, off int64, records []byte) error
	// Seal records that segment seg ended at size bytes. It is called
	// before any record of a later segment is committed.
	Seal(seg uint64, size int64) error
}

// Commit is the acknowledgement of one append.
type Commit struct {
	done chan struct{}
	err  error
}

// Wait blocks until the append's group is durable and returns its error.
func (c *Commit) Wait() error {
	<-c.done
	return c.err
}

// unit is a run of records written together, optionally followed by a
// switch to a new segment.
type unit struct {
	buf       []byte
	commit    *Commit
	rotateTo  uint64 // 0: no rotation after this unit
	hasRecord bool
}

// Log appends records to the current segment.
type Log struct {
	opts Options

	mu      sync.Mutex
	cond    *sync.Cond
	pending *unit
	queue   []*unit
	nextSeg uint64
	closed  bool
	failed  error
	spare   [][]byte // written unit buffers, reused so appends do not regrow
	// segBytes is what each segment on disk holds or will once the
	// writer catches up, and bytes their sum: the log's size for a bound
	// on it (the region's maxWALBytes) without a stat per append.
	segBytes map[uint64]int64
	bytes    int64
	appended int64 // every byte appended since Open
	// removeBelow is the highest RemoveBefore bound: a segment below it
	// that the writer has not finished yet (async appends run ahead of
	// it) is removed when the writer closes it.
	removeBelow uint64
	// archivedBelow is the highest MarkArchivedBelow bound; with
	// HoldUntilArchived a segment is removed only below both.
	archivedBelow uint64
	// lastTaken is the acknowledgement of the newest unit the writer took
	// from the queue: Written waits for it.
	lastTaken *Commit

	fileMu sync.Mutex // guards f across the writer and the async syncer
	f      *os.File
	seg    uint64
	off    int64 // bytes written to seg
	dirty  bool

	stop chan struct{}
	wg   sync.WaitGroup
}

// SegmentName is the file name of segment n.
func SegmentName(n uint64) string { return fmt.Sprintf("%016d.wal", n) }

// Segments lists the segment numbers in dir in ascending order.
func Segments(dir string) ([]uint64, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, nil
		}
		return nil, err
	}
	var segs []uint64
	for _, e := range ents {
		var n uint64
		if _, err := fmt.Sscanf(e.Name(), "%016d.wal", &n); err == nil && e.Name() == SegmentName(n) {
			segs = append(segs, n)
		}
	}
	sort.Slice(segs, func(i, j int) bool { return segs[i] < segs[j] })
	return segs, nil
}

// Open starts a new segment numbered after every segment already in the
// directory. Replay the directory before opening it.
func Open(opts Options) (*Log, error) {
	if opts.SyncInterval <= 0 {
		opts.SyncInterval = 100 * time.Millisecond
	}
	if err := os.MkdirAll(opts.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("wal: %w", err)
	}
	segs, err := Segments(opts.Dir)
	if err != nil {
		return nil, fmt.Errorf("wal: listing %s: %w", opts.Dir, err)
	}
	first := max(opts.MinSegment, 1)
	if len(segs) > 0 {
		first = max(first, segs[len(segs)-1]+1)
	}
	l := &Log{opts: opts, nextSeg: first + 1, stop: make(chan struct{}), segBytes: map[uint64]int64{}}
	l.cond = sync.NewCond(&l.mu)
	for _, s := range segs {
		if fi, err := os.Stat(filepath.Join(opts.Dir, SegmentName(s))); err == nil {
			l.segBytes[s] = fi.Size()
			l.bytes += fi.Size()
		}
	}
	if err := l.openSegment(first); err != nil {
		return nil, err
	}
	l.pending = l.newUnit()
	l.wg.Add(1)
	go l.writeLoop()
	if opts.Mode == ModeAsync {
		l.wg.Add(1)
		go l.syncLoop()
	}
	return l, nil
}

// newUnit is called with mu held (or before the log is shared).
func (l *Log) newUnit() *unit {
	u := &unit{commit: &Commit{done: make(chan struct{})}}
	if n := len(l.spare); n > 0 {
		u.buf, l.spare = l.spare[n-1][:0], l.spare[:n-1]
	}
	return u
}

func (l *Log) openSegment(n uint64) error {
	f, err := os.OpenFile(filepath.Join(l.opts.Dir, SegmentName(n)), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		return fmt.Errorf("wal: creating segment %d: %w", n, err)
	}
	if err := syncDir(l.opts.Dir); err != nil {
		_ = f.Close()
		return err
	}
	l.fileMu.Lock()
	l.f, l.seg, l.off = f, n, 0
	l.fileMu.Unlock()
	return nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("wal: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("wal: syncing %s: %w", dir, err)
	}
	return nil
}

// Append queues payload as one record and returns its acknowledgement.
// Records appended by concurrent callers are written in the order their
// Append calls returned.
func (l *Log) Append(payload []byte) *Commit {
	return l.AppendEncoded(len(payload), func(dst []byte) []byte { return append(dst, payload...) })
}

// AppendEncoded is Append for a payload of n bytes that encode appends to
// dst, so callers can encode straight into the log's buffer.
func (l *Log) AppendEncoded(n int, encode func(dst []byte) []byte) *Commit {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed || l.failed != nil {
		c := &Commit{done: make(chan struct{})}
		c.err = l.failed
		if c.err == nil {
			c.err = ErrClosed
		}
		close(c.done)
		return c
	}
	u := l.pending
	start := len(u.buf)
	u.buf = slices.Grow(u.buf, headerLen+n)
	u.buf = append(u.buf, make([]byte, headerLen)...)
	u.buf = encode(u.buf)
	h := u.buf[start : start+headerLen]
	payload := u.buf[start+headerLen:]
	binary.LittleEndian.PutUint32(h[4:], uint32(len(payload)))
	crc := crc32.Update(0, crcTable, h[4:])
	binary.LittleEndian.PutUint32(h[:4], crc32.Update(crc, crcTable, payload))
	l.segBytes[l.nextSeg-1] += int64(headerLen + len(payload))
	l.bytes += int64(headerLen + len(payload))
	l.appended += int64(headerLen + len(payload))
	if !u.hasRecord {
		u.hasRecord = true
		l.cond.Signal()
	}
	if l.opts.Mode == ModeAsync && l.opts.Replica == nil {
		return ackedAtOnce
	}
	return u.commit
}

// ackedAtOnce is the acknowledgement of every async append.
var ackedAtOnce = func() *Commit {
	c := &Commit{done: make(chan struct{})}
	close(c.done)
	return c
}()

// Rotate makes later appends go to a new segment and returns its number.
// Every record appended before Rotate is in a segment below that number.
func (l *Log) Rotate() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := l.nextSeg
	l.nextSeg++
	l.pending.rotateTo = n
	l.queue = append(l.queue, l.pending)
	l.pending = l.newUnit()
	l.cond.Signal()
	return n
}

// CurrentSegment is the segment new appends go to.
func (l *Log) CurrentSegment() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.nextSeg - 1
}

func (l *Log) writeLoop() {
	defer l.wg.Done()
	for {
		l.mu.Lock()
		for len(l.queue) == 0 && !l.pending.hasRecord && !l.closed {
			l.cond.Wait()
		}
		units := l.queue
		l.queue = nil
		if l.pending.hasRecord {
			units = append(units, l.pending)
			l.pending = l.newUnit()
		}
		closing := l.closed && len(units) == 0
		if len(units) > 0 {
			l.lastTaken = units[len(units)-1].commit
		}
		l.mu.Unlock()
		if closing {
			return
		}
		for _, u := range units {
			err := l.writeUnit(u)
			if err != nil {
				l.mu.Lock()
				if l.failed == nil {
					l.failed = err
				}
				l.mu.Unlock()
			}
			u.commit.err = err
			close(u.commit.done)
			if cap(u.buf) <= 4<<20 {
				l.mu.Lock()
				l.spare = append(l.spare, u.buf)
				l.mu.Unlock()
			}
		}
	}
}

func (l *Log) writeUnit(u *unit) error {
	l.mu.Lock()
	failed := l.failed
	l.mu.Unlock()
	if failed != nil {
		return failed
	}
	l.fileMu.Lock()
	defer l.fileMu.Unlock()
	if len(u.buf) > 0 {
		if _, err := l.f.Write(u.buf); err != nil {
			return fmt.Errorf("wal: writing segment %d: %w", l.seg, err)
		}
		l.dirty = true
		if l.opts.Mode == ModeSync {
			if err := syncData(l.f); err != nil {
				return fmt.Errorf("wal: syncing segment %d: %w", l.seg, err)
			}
			l.dirty = false
		}
		if l.opts.Replica != nil {
			if err := l.opts.Replica.Commit(l.seg, l.off, u.buf); err != nil {
				return fmt.Errorf("wal: committing segment %d at %d to its replica: %w", l.seg, l.off, err)
			}
		}
		l.off += int64(len(u.buf))
	}
	if u.rotateTo != 0 {
		if l.opts.Replica != nil {
			if err := l.opts.Replica.Seal(l.seg, l.off); err != nil {
				return fmt.Errorf("wal: sealing segment %d in its replica: %w", l.seg, err)
			}
		}
		if err := l.f.Sync(); err != nil {
			return fmt.Errorf("wal: syncing segment %d: %w", l.seg, err)
		}
		if err := l.f.Close(); err != nil {
			return fmt.Errorf("wal: closing segment %d: %w", l.seg, err)
		}
		l.dirty = false
		l.mu.Lock()
		removed := l.seg < l.removableBelowLocked()
		l.mu.Unlock()
		if removed {
			if err := os.Remove(filepath.Join(l.opts.Dir, SegmentName(l.seg))); err != nil && !errors.Is(err, os.ErrNotExist) {
				return fmt.Errorf("wal: removing segment %d: %w", l.seg, err)
			}
		}
		l.fileMu.Unlock()
		err := l.openSegment(u.rotateTo)
		l.fileMu.Lock()
		if err != nil {
			return err
		}
	}
	return nil
}

func (l *Log) syncLoop() {
	defer l.wg.Done()
	t := time.NewTicker(l.opts.SyncInterval)
	defer t.Stop()
	for {
		select {
		case <-l.stop:
			return
		case <-t.C:
			if err := l.Sync(); err != nil {
				l.mu.Lock()
				if l.failed == nil {
					l.failed = err
				}
				l.mu.Unlock()
			}
		}
	}
}

// Sync fsyncs the current segment if it has unsynced writes.
func (l *Log) Sync() error {
	l.fileMu.Lock()
	defer l.fileMu.Unlock()
	if !l.dirty || l.f == nil {
		return nil
	}
	if err := syncData(l.f); err != nil {
		return fmt.Errorf("wal: syncing segment %d: %w", l.seg, err)
	}
	l.dirty = false
	return nil
}

// RemoveBefore deletes every segment numbered below n: the caller knows
// their records are all in SSTs named by a committed manifest or replaced
// by newer versions in memory. n must not exceed the current segment.
//
// A segment the writer has not reached or finished yet (an async append
// is acknowledged before it is written) is removed when the writer closes
// it; its bytes stop counting in Size at once.
func (l *Log) RemoveBefore(n uint64) error {
	l.mu.Lock()
	l.removeBelow = max(l.removeBelow, n)
	for s, b := range l.segBytes {
		if s < n {
			l.bytes -= b
			delete(l.segBytes, s)
		}
	}
	bound := l.removableBelowLocked()
	l.mu.Unlock()
	return l.removeFilesBelow(bound)
}

// MarkArchivedBelow says that every segment below n is in the archive, and
// removes those RemoveBefore already released.
func (l *Log) MarkArchivedBelow(n uint64) error {
	l.mu.Lock()
	l.archivedBelow = max(l.archivedBelow, n)
	bound := l.removableBelowLocked()
	l.mu.Unlock()
	return l.removeFilesBelow(bound)
}

// removableBelowLocked is the bound below which segment files go: what
// RemoveBefore released and, when holding for the archive, was archived.
func (l *Log) removableBelowLocked() uint64 {
	if l.opts.HoldUntilArchived {
		return min(l.removeBelow, l.archivedBelow)
	}
	return l.removeBelow
}

func (l *Log) removeFilesBelow(n uint64) error {
	segs, err := Segments(l.opts.Dir)
	if err != nil {
		return err
	}
	// A file listed here may be the writer's current one: unlinking it is
	// harmless (it holds only records below n, and the writer's own
	// removal when it closes it finds it gone). One the writer creates
	// after this listing it removes itself: removeBelow was set first.
	for _, s := range segs {
		if s >= n {
			break
		}
		if err := os.Remove(filepath.Join(l.opts.Dir, SegmentName(s))); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("wal: removing segment %d: %w", s, err)
		}
	}
	return nil
}

// WriterSegment is the segment the writer has open: every segment below it
// is closed and synced, and its file never grows again.
func (l *Log) WriterSegment() uint64 {
	l.fileMu.Lock()
	defer l.fileMu.Unlock()
	return l.seg
}

// Written waits until every record appended before it is written to its
// segment file (not necessarily synced: an async log acknowledges appends
// before the writer reaches them, and the archive reads the files).
func (l *Log) Written() error {
	l.mu.Lock()
	var c *Commit
	switch {
	case l.pending.hasRecord:
		c = l.pending.commit
		l.queue = append(l.queue, l.pending)
		l.pending = l.newUnit()
		l.cond.Signal()
	case len(l.queue) > 0:
		c = l.queue[len(l.queue)-1].commit
	default:
		c = l.lastTaken
	}
	l.mu.Unlock()
	if c == nil {
		return nil
	}
	<-c.done
	return c.err
}

// Appended is every byte appended since Open (records and their headers):
// the WAL's write volume.
func (l *Log) Appended() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.appended
}

// Size is the bytes of every segment not yet removed, counting appends the
// writer has not written yet.
func (l *Log) Size() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.bytes
}

// Close writes and syncs everything appended, then closes the segment.
func (l *Log) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return ErrClosed
	}
	l.closed = true
	l.cond.Broadcast()
	l.mu.Unlock()
	close(l.stop)
	l.wg.Wait()
	l.fileMu.Lock()
	defer l.fileMu.Unlock()
	serr := l.f.Sync()
	cerr := l.f.Close()
	l.f = nil
	l.mu.Lock()
	failed := l.failed
	l.mu.Unlock()
	return errors.Join(failed, serr, cerr)
}
