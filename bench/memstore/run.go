package memstore

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"runtime/pprof"
	"runtime/trace"
	"slices"
	"time"

	"golang.org/x/sync/errgroup"
	"golang.org/x/time/rate"

	"github.com/bellows-kv/bellows/bench/cpu"
	"github.com/bellows-kv/bellows/bench/engine"
	"github.com/bellows-kv/bellows/storage-engine/blob"
	"github.com/bellows-kv/bellows/storage-engine/blockcache"
	"github.com/bellows-kv/bellows/storage-engine/compaction"
	"github.com/bellows-kv/bellows/storage-engine/kv"
	"github.com/bellows-kv/bellows/storage-engine/memstore"
	"github.com/bellows-kv/bellows/storage-engine/region"
	"github.com/bellows-kv/bellows/storage-engine/wal"
)

// RunResult is one policy's run on one distribution: what it did and how fast.
type RunResult struct {
	Round int `json:"round"`
	// Writes are the puts issued at full speed, PacedWrites those paced
	// (whole batches; a batch's duplicate keys count as the client sent
	// them).
	Writes       int     `json:"writes"`
	PacedWrites  int     `json:"paced_writes"`
	WriteSeconds float64 `json:"write_seconds"`
	WriteOpsPerS float64 `json:"write_ops_per_s"`
	// Flushes are the disk flushes the full-speed writes caused (memstore
	// full, or the WAL bound): the final flush of what was left in memory
	// after them is not counted (it is in the bytes). The paced writes'
	// are not counted either.
	Flushes          uint64 `json:"flushes"`
	WALForcedFlushes uint64 `json:"wal_forced_flushes"`
	// Compactions are the minor compactions the region ran by itself,
	// counted once they had all finished after the final flush.
	Compactions uint64 `json:"compactions"`
	// FlushedBytes and CompactionBytes are SST bytes written by flushes
	// (the final one included) and by compactions; SSTBytes their sum:
	// the bytes it took to get the full-speed writes onto disk, WAL apart.
	FlushedBytes    uint64 `json:"flushed_bytes"`
	CompactionBytes uint64 `json:"compaction_written_bytes"`
	SSTBytes        uint64 `json:"sst_bytes"`
	// FinalFlushBytes are the bytes flushed after the writes ended (the
	// final flush, and any flush still under way then).
	FinalFlushBytes uint64 `json:"final_flush_bytes"`
	// WALBytes are the full-speed writes' WAL bytes.
	WALBytes    int64  `json:"wal_bytes"`
	WriteStalls uint64 `json:"write_stalls"`
	// In-memory work (Accordion).
	InMemoryFlushes      uint64 `json:"in_memory_flushes"`
	Merges               uint64 `json:"merges"`
	InMemoryCompactions  uint64 `json:"in_memory_compactions"`
	VersionsDropped      uint64 `json:"versions_dropped"`
	InMemoryAborted      uint64 `json:"in_memory_aborted"`
	PipelineSegmentsLast int    `json:"pipeline_segments_at_end"`
	// GCCPUShare is GC CPU over all CPU (GOMAXPROCS × wall time,
	// runtime/metrics) during the writes; GCCPUShareOfUsed over CPU not
	// idle. GCCycles are the collections during the writes.
	GCCPUShare       float64 `json:"gc_cpu_share"`
	GCCPUShareOfUsed float64 `json:"gc_cpu_share_of_used"`
	GCCycles         uint64  `json:"gc_cycles"`
	// GCPauseMsPerS is the GC's stop-the-world time per second of the
	// writes, GCPauseMaxMs the longest pause. A pause stops the reader too,
	// and it lasts until every thread has stopped: on a CPU the writers
	// oversubscribe, until the kernel runs each of them.
	GCPauseMsPerS float64 `json:"gc_pause_ms_per_s"`
	GCPauseMaxMs  float64 `json:"gc_pause_max_ms"`
	// The reader during the writes.
	Gets       int     `json:"gets"`
	Scans      int     `json:"scans"`
	GetMeanMs  float64 `json:"get_mean_ms"`
	GetP99Ms   float64 `json:"get_p99_ms"`
	ScanMeanMs float64 `json:"scan_mean_ms"`
	ScanP99Ms  float64 `json:"scan_p99_ms"`
	// ScanRows are the rows the scans returned in all (a sanity check:
	// scans read real data).
	ScanRows int `json:"scan_rows"`
	// ReadMaxMs is the slowest read (get or scan); SlowReads the reads
	// that took slowReadAt or more, and SlowReadMs their time in all. A
	// mean can move by a few such reads that no percentile shows
	// (docs/memstore.md, "Measuring reads while writers run flat out").
	ReadMaxMs  float64 `json:"read_max_ms"`
	SlowReads  int     `json:"slow_reads"`
	SlowReadMs float64 `json:"slow_read_ms"`
	// The read sources a read met (region.ReadSources taken before each
	// read, mean over the reads): skiplists (active segments, pushed ones
	// not yet flattened) and flat segments of every memstore, frozen ones
	// included, and SST files. What makes a policy's read dearer or
	// cheaper than None's, counted rather than timed.
	SkiplistsPerRead float64 `json:"skiplists_per_read"`
	FlatsPerRead     float64 `json:"flat_segments_per_read"`
	FilesPerRead     float64 `json:"files_per_read"`
	// SkiplistVersionsPerRead are the versions the skiplists held, mean
	// per read: a skiplist's search costs a cache miss per level, so a
	// large one is dear, and Accordion keeps its skiplists small.
	SkiplistVersionsPerRead float64 `json:"skiplist_versions_per_read"`
	// MissesPerKRead are the block-cache misses per 1,000 reads (each a
	// block read from the file and decoded): the reader's SST cost,
	// counted. Compactions read their inputs past the cache, so every
	// miss is a read's. New files (flushes, compactions) start cold, so
	// the faster the writes, the more a read misses.
	MissesPerKRead float64 `json:"misses_per_1k_reads"`
	// The reader's CPU time per get and per scan, mean (its thread's CPU
	// clock around each read; with --reader-core only, where the reader is
	// locked to its thread): a read's latency less this was spent waiting
	// (for a CPU, a P, a lock, the disk).
	GetCPUMs  float64 `json:"get_cpu_ms,omitempty"`
	ScanCPUMs float64 `json:"scan_cpu_ms,omitempty"`
	// The reader during the paced writes, and the write rate achieved.
	PacedWriteOpsPerS            float64 `json:"paced_write_ops_per_s,omitempty"`
	PacedGets                    int     `json:"paced_gets,omitempty"`
	PacedGetMeanMs               float64 `json:"paced_get_mean_ms,omitempty"`
	PacedGetP99Ms                float64 `json:"paced_get_p99_ms,omitempty"`
	PacedScanMeanMs              float64 `json:"paced_scan_mean_ms,omitempty"`
	PacedScanP99Ms               float64 `json:"paced_scan_p99_ms,omitempty"`
	PacedSkiplistsPerRead        float64 `json:"paced_skiplists_per_read,omitempty"`
	PacedFlatsPerRead            float64 `json:"paced_flat_segments_per_read,omitempty"`
	PacedFilesPerRead            float64 `json:"paced_files_per_read,omitempty"`
	PacedSkiplistVersionsPerRead float64 `json:"paced_skiplist_versions_per_read,omitempty"`
	PacedMissesPerKRead          float64 `json:"paced_misses_per_1k_reads,omitempty"`
	PacedGetCPUMs                float64 `json:"paced_get_cpu_ms,omitempty"`
	PacedScanCPUMs               float64 `json:"paced_scan_cpu_ms,omitempty"`
}

// perKRead is misses per 1,000 of reads (0 without reads).
func perKRead(misses uint64, reads int) float64 {
	if reads == 0 {
		return 0
	}
	return float64(misses) * 1000 / float64(reads)
}

// Progress reports what the run is doing and how far it is (0..1).
type Progress func(what string, done float64)

// Run runs every policy on every distribution, cfg.Runs times each,
// interleaved: for each distribution, round 1 runs every policy in order,
// then round 2, and so on, each in a fresh directory under dir and a fresh
// region. Policies in one round see the same key sequences.
func Run(ctx context.Context, cfg Config, dir string, progress Progress) (Report, error) {
	cfg = cfg.Resolved()
	if err := cfg.Validate(); err != nil {
		return Report{}, err
	}
	if progress == nil {
		progress = func(string, float64) {}
	}
	cfg.Machine = fmt.Sprintf("%s/%s, %d CPUs, GOMAXPROCS %d, %s, GOGC %s",
		runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), runtime.GOMAXPROCS(0), runtime.Version(), gogc())
	cfg.Started = time.Now().UTC().Format(time.RFC3339)
	runs := map[key][]RunResult{}
	total := float64(len(cfg.Distributions) * cfg.Runs * len(cfg.Policies))
	n := 0
	for _, dist := range cfg.Distributions {
		for round := 0; round < cfg.Runs; round++ {
			for _, p := range cfg.Policies {
				label := fmt.Sprintf("%s %s (run %d/%d)", dist, p, round+1, cfg.Runs)
				step := func(what string, frac float64) {
					progress(label+": "+what, (float64(n)+frac)/total)
				}
				rdir := filepath.Join(dir, fmt.Sprintf("%s-%s-%d", dist, p, round))
				res, err := runOne(ctx, cfg, rdir, memstore.Policy(p), dist, round, step)
				_ = os.RemoveAll(rdir)
				if err != nil {
					return Report{}, fmt.Errorf("%s: %w", label, err)
				}
				runs[key{p, dist}] = append(runs[key{p, dist}], res)
				n++
			}
		}
	}
	progress("done", 1)
	return summarize(cfg, runs), nil
}

type key struct{ policy, dist string }

func gogc() string {
	if v := os.Getenv("GOGC"); v != "" {
		return v
	}
	return "100 (default)"
}

// keyOf writes key i: "k", 15 decimal digits, padded with 'x' to size, so
// key order is numeric order and a scan from a key reads its neighbours.
func keyOf(dst []byte, i uint64, size int) []byte {
	dst = dst[:0]
	dst = append(dst, 'k')
	var d [15]byte
	for j := len(d) - 1; j >= 0; j-- {
		d[j] = byte('0' + i%10)
		i /= 10
	}
	dst = append(dst, d[:]...)
	for len(dst) < size {
		dst = append(dst, 'x')
	}
	return dst
}

// keyGen draws keys of one distribution.
type keyGen func() uint64

func newKeyGen(cfg Config, dist string, rng *rand.Rand) keyGen {
	if dist == Zipf {
		z := engine.NewZipf(rng, uint64(cfg.Keys), cfg.Theta)
		return z.Next
	}
	n := uint64(cfg.Keys)
	return func() uint64 { return rng.Uint64N(n) }
}

// Stream seeds: writers are 0..Writers-1, the reader and the values these.
const (
	readerStream = 1000
	valueStream  = 1001
)

func runOne(ctx context.Context, cfg Config, dir string, policy memstore.Policy, dist string, round int, step Progress) (RunResult, error) {
	res := RunResult{Round: round + 1}
	// Profile labels of the reader (reader.start) and the writers.
	ctx = pprof.WithLabels(ctx, pprof.Labels("policy", string(policy), "distribution", dist))
	pprof.SetGoroutineLabels(ctx)
	defer pprof.SetGoroutineLabels(context.Background())
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return res, err
	}
	bucket, err := blob.Open(ctx, "file://"+filepath.Join(dir, "bucket"))
	if err != nil {
		return res, err
	}
	defer bucket.Close()
	cache := blockcache.New(cfg.CacheBytes)
	r, err := region.Open(ctx, region.Options{
		Name: "memstore", Bucket: bucket, WALDir: filepath.Join(dir, "wal"), WALMode: wal.ModeAsync,
		MemstoreBytes: cfg.MemstoreBytes,
		Memstore: region.MemstoreOptions{Policy: policy, ActiveFraction: cfg.ActiveFraction,
			PipelineSegments: cfg.PipelineSegments, RedundancyThreshold: cfg.RedundancyThreshold},
		BlockCache: cache, CacheFlushes: cfg.CacheFlushes,
		Retention: compaction.Retention{MaxVersions: cfg.MaxVersions, GCTTL: cfg.GCTTL},
	})
	if err != nil {
		return res, err
	}
	closed := false
	defer func() {
		if !closed {
			_ = r.Close()
		}
	}()

	// Everything a writer or the reader needs is made before the clock
	// starts (the Zipf generator's zeta is O(keys)).
	step("preparing", 0)
	seed := cfg.Seed*1_000_003 + uint64(round)
	values := make([]byte, 1<<20)
	vrng := rand.New(rand.NewPCG(seed, valueStream))
	for i := range values {
		values[i] = byte(vrng.Uint32())
	}
	perBatch := cfg.PutsPerBatch
	batches := (cfg.Writes + perBatch - 1) / perBatch
	writers := make([]writer, cfg.Writers)
	for w := range writers {
		rng := rand.New(rand.NewPCG(seed, uint64(w)))
		writers[w] = writer{next: newKeyGen(cfg, dist, rng), rng: rng, batches: batches / cfg.Writers}
		if w < batches%cfg.Writers {
			writers[w].batches++
		}
	}
	rrng := rand.New(rand.NewPCG(seed, readerStream))
	readKey := newKeyGen(cfg, dist, rrng)

	// The previous run's garbage is not this run's GC work; the collection
	// also takes the runtime's CPU snapshot the GC share starts from.
	runtime.GC()
	debug.FreeOSMemory()
	gc0 := readGC()

	step("writing", 0.05)
	var rd reader
	var stopTrace func() error
	if cfg.TraceSlow > 0 {
		slow := make(chan struct{}, 1)
		rd.slowAt, rd.slow = cfg.TraceSlow, slow
		stopTrace, err = traceSlowRead(ctx, cfg, dist, policy, round, slow)
	} else {
		stopTrace, err = traceWindow(ctx, cfg, dist, policy, round)
	}
	if err != nil {
		return res, err
	}
	misses0 := cache.Stats().Misses
	stopReader := rd.start(ctx, r, cfg, readKey)
	began := time.Now()
	err = writeAll(ctx, r, cfg, writers, values, nil)
	elapsed := time.Since(began)
	if terr := stopTrace(); err == nil && terr != nil {
		err = fmt.Errorf("trace: %w", terr)
	}
	gc1 := readGC()
	if rerr := stopReader(); err == nil && rerr != nil {
		err = fmt.Errorf("reader: %w", rerr)
	}
	res.MissesPerKRead = perKRead(cache.Stats().Misses-misses0, len(rd.gets)+len(rd.scans))
	if err != nil {
		return res, err
	}
	res.Writes = batches * perBatch
	res.WriteSeconds = elapsed.Seconds()
	res.WriteOpsPerS = float64(res.Writes) / elapsed.Seconds()
	res.GCCPUShare, res.GCCPUShareOfUsed, res.GCCycles = gc1.since(gc0)
	pauses, longest := gc1.pausesSince(gc0)
	res.GCPauseMsPerS = ms(pauses) / elapsed.Seconds()
	res.GCPauseMaxMs = ms(longest)
	res.Gets, res.GetMeanMs, res.GetP99Ms = latency(rd.gets)
	res.Scans, res.ScanMeanMs, res.ScanP99Ms = latency(rd.scans)
	res.ScanRows = rd.scanRows
	res.ReadMaxMs, res.SlowReads, res.SlowReadMs = slowReads(slowReadAt, rd.gets, rd.scans)
	res.SkiplistsPerRead, res.FlatsPerRead, res.FilesPerRead, res.SkiplistVersionsPerRead = rd.sourcesPerRead()
	res.GetCPUMs, res.ScanCPUMs = rd.cpuPerRead()

	res.WALBytes = r.WALAppendedBytes()
	res.PipelineSegmentsLast = r.PipelineSegments()

	// Get the rest of the writes onto disk and let the compactions they
	// cause finish, so the bytes are those of the whole run. One put
	// makes sure the active memstore is not empty, so the final flush is
	// exactly one flush (not counted in Flushes).
	step("final flush and compactions", 0.6)
	st := r.Stats()
	flushedBefore := st.FlushedBytes.Load()
	if _, err := r.Put(keyOf(nil, 0, cfg.KeySize), values[:cfg.ValueSize]); err != nil {
		return res, err
	}
	if err := r.Flush(ctx); err != nil {
		return res, fmt.Errorf("final flush: %w", err)
	}
	if err := awaitCompactions(ctx, r); err != nil {
		return res, err
	}
	res.Flushes = st.Flushes.Load() - 1
	res.WALForcedFlushes = st.WALForcedFlushes.Load()
	res.Compactions = st.CompactionsDone.Load()
	res.FlushedBytes = st.FlushedBytes.Load()
	res.CompactionBytes = st.CompactionWrittenBytes.Load()
	res.SSTBytes = res.FlushedBytes + res.CompactionBytes
	res.FinalFlushBytes = res.FlushedBytes - flushedBefore
	res.WriteStalls = st.WriteStalls.Load()
	ms := r.MemstoreStats()
	res.InMemoryFlushes = ms.InMemoryFlushes.Load()
	res.Merges = ms.Merges.Load()
	res.InMemoryCompactions = ms.Compactions.Load()
	res.VersionsDropped = ms.VersionsDropped.Load()
	res.InMemoryAborted = ms.Aborted.Load()
	if n := st.CompactionFailed.Load(); n > 0 {
		return res, fmt.Errorf("%d compactions failed", n)
	}

	if cfg.PacedWrites > 0 {
		// The paced phase compares the memstores' reads under the same
		// write load, so every policy starts it from the same disk: one
		// SST file (a major compaction, not counted above), every block of
		// it in the cache (a scan of the whole key space). Otherwise a
		// read meets as many files as the policy's compactions happened to
		// leave, which with the same algorithm varied from 2.2 to 3.0 per
		// read between runs, and the cold blocks of the newest outputs.
		step("one cached file", 0.65)
		if err := oneCachedFile(ctx, r); err != nil {
			return res, err
		}
		step("paced writes", 0.7)
		pacedBatches := (cfg.PacedWrites + perBatch - 1) / perBatch
		for w := range writers {
			writers[w].batches = pacedBatches / len(writers)
			if w < pacedBatches%len(writers) {
				writers[w].batches++
			}
		}
		// One token per batch, shared by the writers, no burst beyond one
		// batch each: the write load is the same for every policy.
		lim := rate.NewLimiter(rate.Limit(float64(cfg.PacedWritesPerSec)/float64(perBatch)), len(writers))
		var prd reader
		misses0 := cache.Stats().Misses
		stop := prd.start(ctx, r, cfg, readKey)
		began := time.Now()
		err := writeAll(ctx, r, cfg, writers, values, lim)
		pacedElapsed := time.Since(began)
		if rerr := stop(); err == nil && rerr != nil {
			err = fmt.Errorf("reader: %w", rerr)
		}
		res.PacedMissesPerKRead = perKRead(cache.Stats().Misses-misses0, len(prd.gets)+len(prd.scans))
		if err != nil {
			return res, err
		}
		res.PacedWrites = pacedBatches * perBatch
		res.PacedWriteOpsPerS = float64(pacedBatches*perBatch) / pacedElapsed.Seconds()
		res.PacedGets, res.PacedGetMeanMs, res.PacedGetP99Ms = latency(prd.gets)
		_, res.PacedScanMeanMs, res.PacedScanP99Ms = latency(prd.scans)
		res.PacedSkiplistsPerRead, res.PacedFlatsPerRead, res.PacedFilesPerRead, res.PacedSkiplistVersionsPerRead = prd.sourcesPerRead()
		res.PacedGetCPUMs, res.PacedScanCPUMs = prd.cpuPerRead()
	}
	closed = true
	if err := r.Close(); err != nil {
		return res, err
	}
	step("done", 1)
	return res, nil
}

// traceWindow traces TraceWindow of the full-speed writes from TraceAfter
// into Config.TraceDir, if set; stop ends it early (writes shorter than
// the window) and waits for the file.
func traceWindow(ctx context.Context, cfg Config, dist string, policy memstore.Policy, round int) (stop func() error, err error) {
	if cfg.TraceDir == "" {
		return func() error { return nil }, nil
	}
	f, err := os.Create(filepath.Join(cfg.TraceDir, fmt.Sprintf("%s-%s-%d.trace", dist, policy, round)))
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer f.Close()
		select {
		case <-ctx.Done():
			return
		case <-time.After(TraceAfter):
		}
		if err := trace.Start(f); err != nil {
			return
		}
		select {
		case <-ctx.Done():
		case <-time.After(TraceWindow):
		}
		trace.Stop()
	}()
	return func() error { cancel(); <-done; return nil }, nil
}

// traceSlowRead runs a flight recorder over the full-speed writes and, at
// the first signal on slow, writes its last slowTraceAge (the slow read
// among them) to <dist>-<policy>-<round>-slow.trace in Config.TraceDir.
// Later slow reads of the run are not traced: one trace a run is enough to
// read, and writing one costs the writers' CPU. stop ends the recorder and
// waits for the file.
func traceSlowRead(ctx context.Context, cfg Config, dist string, policy memstore.Policy, round int, slow <-chan struct{}) (stop func() error, err error) {
	fr := trace.NewFlightRecorder(trace.FlightRecorderConfig{MinAge: slowTraceAge})
	if err := fr.Start(); err != nil {
		return nil, fmt.Errorf("flight recorder: %w", err)
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		defer fr.Stop()
		select {
		case <-ctx.Done():
			// A slow read signalled just before stop still writes its
			// trace: select picks at random among ready cases.
			select {
			case <-slow:
			default:
				done <- nil
				return
			}
		case <-slow:
		}
		f, err := os.Create(filepath.Join(cfg.TraceDir, fmt.Sprintf("%s-%s-%d-slow.trace", dist, policy, round)))
		if err != nil {
			done <- err
			return
		}
		_, err = fr.WriteTo(f)
		done <- errors.Join(err, f.Close())
	}()
	return func() error {
		cancel()
		return <-done
	}, nil
}

// oneCachedFile compacts the region's files into one and reads all of it
// once, so that every block of it is in the cache.
func oneCachedFile(ctx context.Context, r *region.Region) error {
	if _, err := r.Compact(ctx, true); err != nil {
		return fmt.Errorf("major compaction before the paced writes: %w", err)
	}
	it, err := r.NewIterator(nil, nil, kv.MaxTimestamp)
	if err != nil {
		return err
	}
	defer it.Close()
	for ok := it.First(); ok; ok = it.Next() {
	}
	return it.Err()
}

// writer is one writer goroutine's key stream and its share of a phase.
type writer struct {
	next    keyGen
	rng     *rand.Rand
	batches int
}

// writeAll runs every writer's batches, each paced by lim if it is set,
// and returns the first error. Unpaced writers yield their CPU after each
// batch under cfg.WriterYield, and take SCHED_IDLE threads under
// cfg.IdleWriters. Paced ones do neither: their limiter leaves the gaps a
// yield would, and a limiter's wakeup of a locked idle thread comes late
// enough that the pace is lost (with it, every policy's paced writers fell
// to 56,000–87,000 puts/s of 100,000).
func writeAll(ctx context.Context, r *region.Region, cfg Config, writers []writer, values []byte, lim *rate.Limiter) error {
	var g errgroup.Group
	for _, w := range writers {
		g.Go(func() error {
			if cfg.ReaderOwnCore && cfg.IdleWriters && lim == nil {
				release, err := cpu.LockIdle()
				if err != nil {
					return fmt.Errorf("--idle-writers: %w", err)
				}
				defer release()
			}
			k := make([]byte, 0, cfg.KeySize)
			for b := 0; b < w.batches; b++ {
				if lim != nil {
					if err := lim.Wait(ctx); err != nil {
						return err
					}
				} else if err := ctx.Err(); err != nil {
					return err
				} else if cfg.ReaderOwnCore && cfg.WriterYield && b > 0 {
					cpu.Yield()
				}
				// As the store's server builds one from a request.
				batch := new(region.Batch).Grow(cfg.PutsPerBatch, cfg.PutsPerBatch*(cfg.KeySize+cfg.ValueSize))
				for j := 0; j < cfg.PutsPerBatch; j++ {
					k = keyOf(k, w.next(), cfg.KeySize)
					off := w.rng.IntN(len(values) - cfg.ValueSize)
					batch.Put(k, values[off:off+cfg.ValueSize])
				}
				if _, err := r.Apply(batch); err != nil {
					return err
				}
			}
			return nil
		})
	}
	return g.Wait()
}

// awaitCompactions waits until the region's automatic compactions are
// done, without starting one of its own: Compact with a context already
// cancelled takes the compaction lock (so it waits for the compaction
// holding it), returns without compacting, and then starts the request
// queued meanwhile, if any, as the region would. Done when two such waits,
// some time apart, see no compaction asked for, finished or failed between
// them (a flush asks for its compaction just after it completes).
func awaitCompactions(ctx context.Context, r *region.Region) error {
	st := r.Stats()
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	barrier := func() [3]uint64 {
		_, _ = r.Compact(cancelled, false)
		return [3]uint64{st.CompactionsRequested.Load(), st.CompactionsDone.Load(), st.CompactionFailed.Load()}
	}
	deadline := time.Now().Add(10 * time.Minute)
	last := barrier()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		now := barrier()
		if now == last {
			return nil
		}
		if time.Now().After(deadline) {
			return errors.New("compactions did not finish within 10 minutes of the final flush")
		}
		last = now
	}
}

// reader alternates point gets and scans of ScanLength keys, paced at
// ReadsPerSec (open loop, so every policy gets the same read load), and
// records every latency.
type reader struct {
	gets, scans []time.Duration
	scanRows    int
	// sources sums region.ReadSources over the reads.
	sources region.ReadSources
	// getCPU and scanCPU sum the reader thread's CPU time over the reads,
	// when it is locked to its thread (ownCore).
	getCPU, scanCPU time.Duration
	ownCore         bool
	// slow, if set, is signalled (without blocking) after each read that
	// took slowAt or more: traceSlowRead writes its trace then.
	slow   chan<- struct{}
	slowAt time.Duration
}

// timed records one read's latency and CPU into the get or scan tallies,
// and signals a slow read.
func (rd *reader) timed(into *[]time.Duration, cpuInto *time.Duration, took, cpuTook time.Duration) {
	*into = append(*into, took)
	*cpuInto += cpuTook
	if rd.slow != nil && took >= rd.slowAt {
		select {
		case rd.slow <- struct{}{}:
		default:
		}
	}
}

// slowReadAt is where a read counts as slow in RunResult.SlowReads: some
// 50 times a mean read, and longer than any GC pause but a starved one.
const slowReadAt = 5 * time.Millisecond

// slowReads is the slowest of the reads, and the count and total time of
// those that took at least at.
func slowReads(at time.Duration, reads ...[]time.Duration) (maxMs float64, n int, totalMs float64) {
	var longest, total time.Duration
	for _, rs := range reads {
		for _, d := range rs {
			longest = max(longest, d)
			if d >= at {
				n++
				total += d
			}
		}
	}
	return ms(longest), n, ms(total)
}

// cpuPerRead is the mean CPU time of a get and of a scan, 0 if the reader
// did not have a core (and so a thread) of its own.
func (rd *reader) cpuPerRead() (getMs, scanMs float64) {
	if !rd.ownCore || len(rd.gets) == 0 || len(rd.scans) == 0 {
		return 0, 0
	}
	return ms(rd.getCPU) / float64(len(rd.gets)), ms(rd.scanCPU) / float64(len(rd.scans))
}

// sourcesPerRead is the mean of each kind of read source over the reads.
func (rd *reader) sourcesPerRead() (skiplists, flats, files, skiplistVersions float64) {
	n := float64(len(rd.gets) + len(rd.scans))
	if n == 0 {
		return 0, 0, 0, 0
	}
	return float64(rd.sources.Skiplists) / n, float64(rd.sources.FlatSegments) / n, float64(rd.sources.Files) / n,
		float64(rd.sources.SkiplistVersions) / n
}

// start runs the reader until the returned stop is called; stop returns
// the reader's error.
func (rd *reader) start(ctx context.Context, r *region.Region, cfg Config, next keyGen) (stop func() error) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	// The label lets a CPU profile (--cpuprofile) tell the reader's CPU
	// from the writers' and the memstore's background work:
	// go tool pprof -tagfocus=role=reader.
	go pprof.Do(ctx, pprof.Labels("role", "reader"), func(ctx context.Context) { done <- rd.run(ctx, r, cfg, next) })
	return func() error {
		cancel()
		return <-done
	}
}

func (rd *reader) run(ctx context.Context, r *region.Region, cfg Config, next keyGen) error {
	if cfg.ReadsPerSec == 0 {
		<-ctx.Done()
		return nil
	}
	lim := rate.NewLimiter(rate.Limit(cfg.ReadsPerSec), 1)
	if cfg.ReaderOwnCore {
		release, err := cpu.OwnCore()
		if err != nil {
			return fmt.Errorf("--reader-core: %w", err)
		}
		defer release()
		rd.ownCore = true
	}
	k := make([]byte, 0, cfg.KeySize)
	for i := 0; ; i++ {
		if err := lim.Wait(ctx); err != nil {
			return nil
		}
		k = keyOf(k, next(), cfg.KeySize)
		src := r.ReadSources()
		rd.sources.Skiplists += src.Skiplists
		rd.sources.FlatSegments += src.FlatSegments
		rd.sources.Files += src.Files
		rd.sources.SkiplistVersions += src.SkiplistVersions
		// The CPU clock is a system call: read outside the timed span
		// (inside it, its spells were up to 0.6 ms, a P retaken by sysmon
		// among them, as bellows-bench tracewaits showed).
		c := cpu.ThreadCPUTime()
		t := time.Now()
		if i%2 == 0 {
			if _, _, err := r.Get(k, kv.MaxTimestamp); err != nil {
				return err
			}
			took := time.Since(t)
			rd.timed(&rd.gets, &rd.getCPU, took, cpu.ThreadCPUTime()-c)
			continue
		}
		rows, err := r.Scan(k, nil, cfg.ScanLength, kv.MaxTimestamp)
		if err != nil {
			return err
		}
		took := time.Since(t)
		rd.timed(&rd.scans, &rd.scanCPU, took, cpu.ThreadCPUTime()-c)
		rd.scanRows += len(rows)
	}
}

// latency is the count, mean and p99 (nearest rank) in milliseconds.
func latency(d []time.Duration) (n int, meanMs, p99Ms float64) {
	if len(d) == 0 {
		return 0, 0, 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	var sum time.Duration
	for _, v := range s {
		sum += v
	}
	rank := int(math.Ceil(0.99*float64(len(s)))) - 1
	return len(s), ms(sum) / float64(len(s)), ms(s[max(rank, 0)])
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// gcSample is the runtime's CPU accounting (updated at every GC) and the
// GC count.
// pauses are the GC's stop-the-world pauses so far (counts per bucket,
// buckets their lower bounds): readers stop in them too.
type gcSample struct {
	gc, total, idle, cycles float64
	pauseCounts             []uint64
	pauseBuckets            []float64
}

var gcMetrics = []string{"/cpu/classes/gc/total:cpu-seconds", "/cpu/classes/total:cpu-seconds", "/cpu/classes/idle:cpu-seconds", "/gc/cycles/total:gc-cycles",
	"/sched/pauses/total/gc:seconds"}

func readGC() gcSample {
	s := make([]metrics.Sample, len(gcMetrics))
	for i, name := range gcMetrics {
		s[i].Name = name
	}
	metrics.Read(s)
	v := func(i int) float64 {
		switch s[i].Value.Kind() {
		case metrics.KindFloat64:
			return s[i].Value.Float64()
		case metrics.KindUint64:
			return float64(s[i].Value.Uint64())
		}
		return 0
	}
	g := gcSample{gc: v(0), total: v(1), idle: v(2), cycles: v(3)}
	if s[4].Value.Kind() == metrics.KindFloat64Histogram {
		h := s[4].Value.Float64Histogram()
		g.pauseCounts, g.pauseBuckets = slices.Clone(h.Counts), h.Buckets
	}
	return g
}

// pausesSince is the GC's stop-the-world time between two samples, each
// pause counted at its histogram bucket's lower bound (an underestimate by
// at most the bucket's width), and the longest pause's bucket.
func (s gcSample) pausesSince(from gcSample) (total, longest time.Duration) {
	for i, n := range s.pauseCounts {
		if i < len(from.pauseCounts) {
			n -= from.pauseCounts[i]
		}
		if n == 0 {
			continue
		}
		lo := time.Duration(max(s.pauseBuckets[i], 0) * float64(time.Second)) // the first bucket starts at -Inf
		total += time.Duration(n) * lo
		longest = lo
	}
	return total, longest
}

// since is the GC CPU share of all CPU and of the CPU not idle between two
// samples, and the collections between them. The runtime's CPU figures are
// a snapshot taken at each GC, so the share is over the span from the first
// sample's GC to the last GC before the second.
func (s gcSample) since(from gcSample) (share, ofUsed float64, cycles uint64) {
	gc, total, idle := s.gc-from.gc, s.total-from.total, s.idle-from.idle
	if total > 0 {
		share = gc / total
	}
	if used := total - idle; used > 0 {
		ofUsed = gc / used
	}
	return share, ofUsed, uint64(s.cycles - from.cycles)
}
