package engine

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"syscall"
	"time"
)

// Config sizes a run.
type Config struct {
	Keys        int     // keys loaded by fill-random
	KeySize     int     // bytes
	ValueSize   int     // bytes
	Ops         int     // operations per read/mixed workload
	ScanOps     int     // operations of the short-scan workload
	ScanLen     int     // keys per short scan
	LongScanOps int     // operations of the long-scan workload
	LongScanLen int     // keys per long scan
	SyncOps     int     // writes of the sync-write workload
	Threads     int     // client goroutines for the read, mixed and sync-write workloads
	Theta       float64 // Zipf skew for YCSB
	Seed        uint64
	Budget      Budget
}

// Result is one workload on one engine.
type Result struct {
	Workload string
	Engine   string
	Ops      int
	Elapsed  time.Duration
	P50, P99 time.Duration
	Reads    int // gets and scans issued
	Found    int // reads that found data (sanity: reads are real)
	// CPU is the process's CPU time (user and system, every thread)
	// during the workload: the engine's background work (flushes,
	// compactions, the collector) included, the client's too.
	CPU time.Duration
	// Layout is what the engine said of its sorted runs as the workload
	// began (Layouter), if it says.
	Layout string `json:",omitempty"`
	// Misses is the block cache misses during the workload (-1: the
	// engine does not say): each one a block read from the file and
	// decompressed.
	Misses int64
}

// MissesPerOp is the block cache misses per operation, or -1.
func (r Result) MissesPerOp() float64 {
	if r.Misses < 0 || r.Ops == 0 {
		return -1
	}
	return float64(r.Misses) / float64(r.Ops)
}

// CacheMisser is an engine that counts its block cache misses.
type CacheMisser interface{ CacheMisses() int64 }

func cacheMisses(e Engine) int64 {
	if m, ok := e.(CacheMisser); ok {
		return m.CacheMisses()
	}
	return -1
}

// Layouter is an engine that can say what a scan merges: its sorted runs.
type Layouter interface{ Layout() string }

// CPUPerOp is the CPU time per operation.
func (r Result) CPUPerOp() time.Duration {
	if r.Ops == 0 {
		return 0
	}
	return r.CPU / time.Duration(r.Ops)
}

// cpuTime is the CPU time the process has used.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// OpsPerSec is the throughput.
func (r Result) OpsPerSec() float64 { return float64(r.Ops) / r.Elapsed.Seconds() }

// keyOf returns key i: an 8-byte big-endian id padded to KeySize, so keys
// of both engines and all workloads agree.
func keyOf(dst []byte, i uint64, size int) []byte {
	dst = dst[:0]
	dst = binary.BigEndian.AppendUint64(dst, i)
	for len(dst) < size {
		dst = append(dst, 'k')
	}
	return dst
}

func fillValue(rng *rand.Rand, dst []byte) {
	for i := range dst {
		dst[i] = byte(rng.Uint32())
	}
}

// FillRandom writes Keys keys in random order from one goroutine, as
// db_bench's fillrandom does.
func FillRandom(e Engine, c Config) (Result, error) {
	rng := rand.New(rand.NewPCG(c.Seed, 1))
	perm := rng.Perm(c.Keys)
	lat := make([]time.Duration, 0, c.Keys)
	k := make([]byte, 0, c.KeySize)
	v := make([]byte, c.ValueSize)
	cpu0 := cpuTime()
	start := time.Now()
	for _, i := range perm {
		k = keyOf(k, uint64(i), c.KeySize)
		fillValue(rng, v)
		t0 := time.Now()
		if err := e.Put(k, v); err != nil {
			return Result{}, fmt.Errorf("%s fill-random: %w", e.Name(), err)
		}
		lat = append(lat, time.Since(t0))
	}
	elapsed := time.Since(start)
	res := summarize("fill-random", e, lat, elapsed, 0)
	res.CPU = cpuTime() - cpu0
	return res, nil
}

// op is one operation of a mixed workload.
type op int

const (
	opGet op = iota
	opPut
	opScan
)

// Mixed runs ops operations from Threads goroutines. readFrac of them are
// gets (or scans of scanLen keys when scanLen > 0) and the rest updates;
// zipf chooses keys with skew Theta, else keys are uniform.
func Mixed(name string, e Engine, c Config, ops int, readFrac float64, zipf bool, scanLen int) (Result, error) {
	scan := scanLen > 0
	per := ops / c.Threads
	lats := make([][]time.Duration, c.Threads)
	found := make([]int, c.Threads)
	reads := make([]int, c.Threads)
	errs := make([]error, c.Threads)
	var wg sync.WaitGroup
	cpu0 := cpuTime()
	start := time.Now()
	for t := 0; t < c.Threads; t++ {
		wg.Add(1)
		go func(t int) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(c.Seed+uint64(t)*7919, uint64(len(name))))
			var z *Zipf
			if zipf {
				z = NewZipf(rng, uint64(c.Keys), c.Theta)
			}
			k := make([]byte, 0, c.KeySize)
			v := make([]byte, c.ValueSize)
			lat := make([]time.Duration, 0, per)
			for i := 0; i < per; i++ {
				var id uint64
				if z != nil {
					id = z.Next()
				} else {
					id = rng.Uint64N(uint64(c.Keys))
				}
				k = keyOf(k, id, c.KeySize)
				kind := opPut
				if rng.Float64() < readFrac {
					kind = opGet
					if scan {
						kind = opScan
					}
				}
				if kind != opPut {
					reads[t]++
				}
				t0 := time.Now()
				var err error
				switch kind {
				case opGet:
					var ok bool
					ok, err = e.Get(k)
					if ok {
						found[t]++
					}
				case opScan:
					var n int
					n, err = e.Scan(k, scanLen)
					if n > 0 {
						found[t]++
					}
				case opPut:
					fillValue(rng, v)
					err = e.Put(k, v)
				}
				lat = append(lat, time.Since(t0))
				if err != nil {
					errs[t] = fmt.Errorf("%s %s: %w", e.Name(), name, err)
					return
				}
			}
			lats[t] = lat
		}(t)
	}
	wg.Wait()
	elapsed := time.Since(start)
	cpu := cpuTime() - cpu0
	for _, err := range errs {
		if err != nil {
			return Result{}, err
		}
	}
	all := slices.Concat(lats...)
	res := summarize(name, e, all, elapsed, 0)
	res.CPU = cpu
	for t := range found {
		res.Found += found[t]
		res.Reads += reads[t]
	}
	return res, nil
}

func summarize(name string, e Engine, lat []time.Duration, elapsed time.Duration, found int) Result {
	slices.Sort(lat)
	pct := func(p float64) time.Duration {
		if len(lat) == 0 {
			return 0
		}
		return lat[min(len(lat)-1, int(p*float64(len(lat))))]
	}
	return Result{Workload: name, Engine: e.Name(), Ops: len(lat), Elapsed: elapsed, P50: pct(0.50), P99: pct(0.99), Found: found}
}

// Workloads runs the whole suite on one freshly opened engine, in order:
// fill-random; then, after a flush and a reopen with a cold cache sized to
// the budget (for Bellows: less the index and filter memory the load left),
// read-random, YCSB-A, YCSB-B, short scans and long scans; last, after a
// reopen with an fsync per write, sync writes (uniform updates).
func Workloads(e Engine, c Config, progress func(string)) ([]Result, error) {
	var out []Result
	misses := cacheMisses(e)
	r, err := FillRandom(e, c)
	if err != nil {
		return nil, err
	}
	if r.Misses = -1; misses >= 0 {
		r.Misses = cacheMisses(e) - misses
	}
	out = append(out, r)
	progress(fmt.Sprintf("%s fill-random: %.0f ops/s", e.Name(), r.OpsPerSec()))
	if err := e.Flush(); err != nil {
		return nil, fmt.Errorf("%s flush after fill-random: %w", e.Name(), err)
	}
	if err := e.Reopen(false); err != nil {
		return nil, fmt.Errorf("%s reopen after fill-random: %w", e.Name(), err)
	}
	steps := []struct {
		name     string
		ops      int
		readFrac float64
		zipf     bool
		scanLen  int
		sync     bool
	}{
		{"read-random", c.Ops, 1, false, 0, false},
		{"ycsb-a (50/50, zipf)", c.Ops, 0.5, true, 0, false},
		{"ycsb-b (95/5, zipf)", c.Ops, 0.95, true, 0, false},
		{fmt.Sprintf("short scans (%d keys, zipf start)", c.ScanLen), c.ScanOps, 1, true, c.ScanLen, false},
		{fmt.Sprintf("long scans (%d keys, zipf start)", c.LongScanLen), c.LongScanOps, 1, true, c.LongScanLen, false},
		{"sync writes (fsync per write, uniform)", c.SyncOps, 0, false, 0, true},
	}
	for _, s := range steps {
		if s.sync {
			if err := e.Reopen(true); err != nil {
				return nil, fmt.Errorf("%s reopen with sync writes: %w", e.Name(), err)
			}
		}
		var layout string
		if l, ok := e.(Layouter); ok {
			layout = l.Layout()
		}
		misses := cacheMisses(e)
		r, err := Mixed(s.name, e, c, s.ops, s.readFrac, s.zipf, s.scanLen)
		if err != nil {
			return nil, err
		}
		r.Layout = layout
		if misses >= 0 {
			r.Misses = cacheMisses(e) - misses
		} else {
			r.Misses = -1
		}
		out = append(out, r)
		progress(fmt.Sprintf("%s %s: %.0f ops/s", e.Name(), s.name, r.OpsPerSec()))
	}
	return out, nil
}
