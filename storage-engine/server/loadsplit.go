package server

// Split by load (docs/regions.md, "By load"; TiKV's load-based split is the
// model): every request a region serves here is counted, and one in
// loadSampleEvery records its key into a fixed-size reservoir. Every load
// window the store computes each region's request rate; a region over
// SplitQPS, and over twice the median of the store's regions when it has
// peers, splits at the median of its sampled keys, provided each side of
// it holds at least a quarter of the samples. So a hot key range splits so
// that its load halves, and a single hot key (more than half the samples
// on one key) never splits: no key divides its load.
//
// Invariant: a sampler belongs to one Assignment, which a split replaces:
// the daughters start with fresh samplers.

import (
	"bytes"
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bellows-kv/bellows/storage-engine/region"
)

const (
	// loadSampleEvery: one request in this many records its key, so the
	// request path takes the sampler's lock rarely.
	loadSampleEvery = 8
	// loadSampleSize is the reservoir: enough for a median within a few
	// percent of the load.
	loadSampleSize = 512
	// loadMinSide is the least share of the sampled requests each side of
	// a load split must keep.
	loadMinSide = 0.25
)

// loadSampler counts a region's requests and samples their keys over one
// window.
type loadSampler struct {
	// total counts every request since the region opened here (the
	// bellows_region_requests_total counter); count, this window's.
	total atomic.Uint64
	count atomic.Uint64
	// rate is the requests per second of the last window that ended
	// (math.Float64bits): the region's load as the Regions RPC reports it.
	rate atomic.Uint64
	// windows counts the windows ended; began is when the current one
	// began (unix nanoseconds; 0 until the first request): until a window
	// ends, the rate is what the current one shows so far, so a region
	// that just moved here does not look idle to the balancer.
	windows atomic.Uint64
	began   atomic.Int64
	mu      sync.Mutex
	seen    int // keys offered to the reservoir this window
	keys    [][]byte
}

// record counts one request for key.
func (l *loadSampler) record(key []byte) {
	l.total.Add(1)
	if l.began.Load() == 0 {
		l.began.CompareAndSwap(0, time.Now().UnixNano())
	}
	if l.count.Add(1)%loadSampleEvery != 0 {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.seen++
	// Reservoir sampling (Algorithm R): every offered key stays with
	// probability loadSampleSize/seen.
	if len(l.keys) < loadSampleSize {
		l.keys = append(l.keys, bytes.Clone(key))
	} else if i := rand.IntN(l.seen); i < loadSampleSize {
		l.keys[i] = bytes.Clone(key)
	}
}

// Rate is the region's requests per second over the last load window;
// before one has ended, over the current window so far.
func (l *loadSampler) Rate() float64 {
	if l.windows.Load() > 0 {
		return math.Float64frombits(l.rate.Load())
	}
	began := l.began.Load()
	if began == 0 {
		return 0
	}
	return float64(l.count.Load()) / max(time.Since(time.Unix(0, began)).Seconds(), 1e-3)
}

// take ends the window, of length window: its rate (now the reported
// one) and the sampled keys.
func (l *loadSampler) take(window time.Duration) (float64, [][]byte) {
	l.mu.Lock()
	defer l.mu.Unlock()
	keys := l.keys
	l.keys, l.seen = nil, 0
	rate := float64(l.count.Swap(0)) / window.Seconds()
	l.rate.Store(math.Float64bits(rate))
	l.windows.Add(1)
	l.began.Store(time.Now().UnixNano())
	return rate, keys
}

// recordLoad counts a request a served here for key.
func (a *Assignment) recordLoad(key []byte) { a.load.record(key) }

// loadSplitKey is the key that halves the load the samples show, inside
// [start, end): the samples' median, if each side of it keeps at least
// loadMinSide of them. ok false when no key does (one hot key, or too few
// samples to tell).
func loadSplitKey(samples [][]byte, start, end []byte) (key []byte, ok bool) {
	if len(samples) < 16 {
		return nil, false
	}
	keys := slices.Clone(samples)
	slices.SortFunc(keys, bytes.Compare)
	mid := keys[len(keys)/2]
	// The right daughter starts at mid: every sample equal to it goes
	// right, so count the left side as the samples strictly below.
	left := sort.Search(len(keys), func(i int) bool { return bytes.Compare(keys[i], mid) >= 0 })
	if float64(left) < loadMinSide*float64(len(keys)) || float64(len(keys)-left) < loadMinSide*float64(len(keys)) {
		return nil, false
	}
	if bytes.Compare(mid, start) <= 0 || (end != nil && bytes.Compare(mid, end) >= 0) {
		return nil, false
	}
	return bytes.Clone(mid), true
}

// loadCandidates are the regions to split by load after a window of
// length window: over splitQPS, and over twice the median rate of the
// store's regions when there are several; with the key to split each at.
func loadCandidates(rates map[*Assignment]float64, samples map[*Assignment][][]byte, splitQPS float64) map[*Assignment][]byte {
	all := make([]float64, 0, len(rates))
	for _, r := range rates {
		all = append(all, r)
	}
	slices.Sort(all)
	var median float64
	if len(all) > 0 {
		median = all[len(all)/2]
	}
	out := map[*Assignment][]byte{}
	for a, r := range rates {
		if r < splitQPS || (len(all) > 1 && r < 2*median) {
			continue
		}
		if k, ok := loadSplitKey(samples[a], a.Span.Start, a.Span.End); ok {
			out[a] = k
		}
	}
	return out
}

// checkLoad ends a load window of length window and splits the regions it
// finds hot (loadCandidates). It returns how many it split.
func (s *Store) checkLoad(ctx context.Context, window time.Duration) int {
	rates := map[*Assignment]float64{}
	samples := map[*Assignment][][]byte{}
	for _, a := range s.Assignments() {
		rates[a], samples[a] = a.load.take(window)
	}
	if s.opts.SplitQPS <= 0 || s.opts.Map == nil {
		return 0
	}
	split := 0
	for a, key := range loadCandidates(rates, samples, s.opts.SplitQPS) {
		_, err := s.splitAt(ctx, a.Name(), key, splitByLoad)
		switch {
		case err == nil:
			split++
		case errors.Is(err, region.ErrCannotSplit), ctx.Err() != nil:
		default:
			s.opts.Region.Logger.Warn("splitting a hot region", "region", a.Name(), "requests/s", rates[a], "err", err)
		}
	}
	return split
}

// runLoadSplits ends a load window every window until ctx ends (splitting
// only with SplitQPS set).
func (s *Store) runLoadSplits(ctx context.Context, window time.Duration) {
	t := time.NewTicker(window)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			s.checkLoad(ctx, window)
		}
	}
}
