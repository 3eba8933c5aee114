package server

// The balancer (docs/regions.md §4): one store at a time — the holder of the
// balancer lease (regionmap.AcquireLease) — reads every store's regions,
// plans moves with the pure regionmap.Plan, and commits them as one region
// map epoch with the regions' new owners. It moves nothing itself: every
// store's Assigner sees the new owners, the old owner releases the region
// (flush, released manifest, applied requests) and the new one claims it,
// the handover a replica change already uses.
//
// Why a lease among the stores and not the operator: `bellows local` has no
// operator and must balance with the same code; the operator is off the
// data path by design (it may be down while the stores serve); and the
// lease needs only the bucket every store already depends on. The lease
// only keeps two planners apart: the map commit is create-if-absent, so a
// holder that lost its term unknowingly is fenced by any commit made
// meanwhile, and plans again on the newer map.
//
// A move is in flight from its commit until its new owner answers with the
// region open; in-flight moves count against MaxMovesInFlight and are not
// moved again. A store that does not answer is left out of the plan: no
// region goes to it, none is taken from it.

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/bellows-kv/bellows/internal/contract"
	kvpb "github.com/bellows-kv/bellows/proto/bellows/kv/v1"
	"github.com/bellows-kv/bellows/storage-engine/regionmap"
)

// Balancer plans and commits region moves while its store holds the lease.
type Balancer struct {
	KV *KV
	// Ordinal is this store's.
	Ordinal int
	// Stores is the cluster's store count; ok false while unknown.
	Stores func() (n int, ok bool)
	// Serving is how many of them stay (nil, or ok false: all): the
	// ordinals from Serving up to Stores are leaving (the operator marked
	// them before shrinking the StatefulSet), and every plan moves their
	// regions off first (regionmap.BalanceSettings.Leaving).
	Serving func() (m int, ok bool)
	// Tolerance and MaxMovesInFlight: regionmap.BalanceSettings; defaults
	// contract.DefaultBalanceTolerance, contract.DefaultMaxMovesInFlight.
	Tolerance        float64
	MaxMovesInFlight int
	// MinBytes and MinQPS: regionmap.BalanceSettings (0: none; the store
	// command passes contract.DefaultBalanceMinBytes and MinQPS).
	MinBytes int64
	MinQPS   float64
	// MergeBytes is the stores' merge size (StoreOptions.MergeBytes): the
	// plan brings small neighbours onto one store so they can merge.
	MergeBytes int64
	// MergeQPS: regionmap.BalanceSettings.MergeQPS (the stores' quarter of
	// their split rate; 0: load is not looked at).
	MergeQPS float64
	// MergeAfter is how long two small neighbours stay small before the
	// plan brings them onto one store: the stores' own merge wait
	// (StoreOptions.MergeAfter), default contract.DefaultMergeAfter.
	MergeAfter time.Duration
	// RecutTolerance: two adjacent regions that stopped growing (their
	// sizes held within recutStill for MergeAfter), one of them further
	// than this fraction from the mean region size, are brought onto this
	// balancer's store and re-cut there (regionmap.Recut, Store.Recut).
	// 0: no re-cuts.
	RecutTolerance float64
	// Interval between plans, default contract.DefaultBalanceInterval;
	// LeaseTerm, default contract.DefaultBalancerLeaseTerm; MaxClockOffset,
	// default contract.DefaultMaxClockOffset.
	Interval, LeaseTerm, MaxClockOffset time.Duration

	moves     atomic.Uint64
	leaseHeld atomic.Bool
	// leaseUntil is the held lease term's expiry (Unix ns).
	leaseUntil atomic.Int64
	// failovers counts the regions failed over; fenced, the incarnation
	// last fenced of each store (liveness.go), so each is logged once.
	failovers atomic.Uint64
	fenced    map[int]string
	// ownerless is how many regions the map gave, at the last failover
	// check, to a store whose lease ran out; failoverSeconds observes,
	// per dead store, its lease's end to the epoch that moved its regions.
	// (A prometheus.Histogram, set by RegisterBalancerMetrics, which may
	// run after the balancer started.)
	ownerless       atomic.Int64
	failoverSeconds atomic.Value
	// movedAt is when this balancer last moved each region: a region
	// settles for settleIntervals intervals before it moves again.
	movedAt map[string]time.Time
	// smallSince is when this balancer first read each region as a merge
	// candidate, without a reading since that said otherwise.
	smallSince map[string]time.Time
	// stillSince is when this balancer first read each region at about
	// its present size (within recutStill of it), and that size;
	// clusterStill, the same of the sum of every region read.
	stillSince   map[string]stillMark
	clusterStill stillMark
	// recutting is set while a re-cut runs (one at a time, beside the
	// plans: a merge and a split take seconds).
	recutting atomic.Bool
	// now is the clock of movedAt and smallSince (tests turn it).
	now func() time.Time
}

// settleIntervals is how many balance intervals a moved region stays put.
const settleIntervals = 10

func (b *Balancer) ensureDefaults() {
	if b.Tolerance <= 0 {
		b.Tolerance = contract.DefaultBalanceTolerance
	}
	if b.MaxMovesInFlight <= 0 {
		b.MaxMovesInFlight = contract.DefaultMaxMovesInFlight
	}
	if b.Interval <= 0 {
		b.Interval = contract.DefaultBalanceInterval
	}
	if b.LeaseTerm <= 0 {
		b.LeaseTerm = contract.DefaultBalancerLeaseTerm
	}
	if b.MaxClockOffset <= 0 {
		b.MaxClockOffset = contract.DefaultMaxClockOffset
	}
	if b.MergeAfter <= 0 {
		b.MergeAfter = contract.DefaultMergeAfter
	}
	if b.now == nil {
		b.now = time.Now
	}
}

// Moves is how many moves this store's balancer committed.
func (b *Balancer) Moves() uint64 {
	if b == nil {
		return 0
	}
	return b.moves.Load()
}

// LeaseHeld reports whether this store held the balancer lease at its last
// attempt.
func (b *Balancer) LeaseHeld() bool { return b != nil && b.leaseHeld.Load() }

// holder names this store in the lease: its ordinal decides (a restarted
// store takes its own unexpired term back at once), its name says where.
func (b *Balancer) holder() string {
	return fmt.Sprintf("ordinal %d (%s)", b.Ordinal, b.KV.store.opts.Name)
}

// Readings are what the stores answered, by ordinal.
type Readings struct {
	// Load of each region open somewhere, as its serving store reports it.
	Load map[string]regionmap.RegionLoad
	// OpenAt is the ordinal serving each open region.
	OpenAt map[string]int
	// Answered are the ordinals that answered.
	Answered map[int]bool
}

// readings asks every store (this one directly, the peers through the
// router) for its regions.
func (b *Balancer) readings(ctx context.Context) Readings {
	r := Readings{Load: map[string]regionmap.RegionLoad{}, OpenAt: map[string]int{}, Answered: map[int]bool{}}
	add := func(resp *kvpb.RegionsResponse) {
		if resp == nil || resp.Ordinal == nil {
			return
		}
		o := int(resp.GetOrdinal())
		r.Answered[o] = true
		for _, info := range resp.Regions {
			if info.Waiting != "" {
				continue
			}
			r.OpenAt[info.Name] = o
			r.Load[info.Name] = regionmap.RegionLoad{Bytes: info.DataBytes, QPS: info.RequestsPerSecond}
		}
	}
	own, _ := b.KV.Regions(ctx, &kvpb.RegionsRequest{})
	add(own)
	if b.KV.fwd == nil {
		return r
	}
	router := b.KV.fwd.Router
	for _, addr := range router.Peers() {
		func() {
			cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			defer cancel()
			l, err := router.Acquire(cctx, addr)
			if err != nil {
				return
			}
			defer l.Release()
			resp, err := l.Client().Regions(cctx, &kvpb.RegionsRequest{})
			if err == nil {
				add(resp)
			}
		}()
	}
	return r
}

// leaving are the ordinals from Serving up to n.
func (b *Balancer) leaving(n int) []int {
	if b.Serving == nil {
		return nil
	}
	m, ok := b.Serving()
	if !ok {
		return nil
	}
	var out []int
	for o := max(m, 0); o < n; o++ {
		out = append(out, o)
	}
	return out
}

// Plan is the balancer's decision on map m for readings rd among n
// stores: the moves in flight, the unreachable stores, and the moves.
func (b *Balancer) Plan(m regionmap.Map, rd Readings, n int) (moves []regionmap.Move, inFlight map[string]bool) {
	b.ensureDefaults()
	inFlight = map[string]bool{}
	var unreachable []int
	for o := range n {
		if !rd.Answered[o] {
			unreachable = append(unreachable, o)
		}
	}
	for _, r := range m.Region {
		o := r.OwnerOf(n)
		if at, open := rd.OpenAt[r.Name]; rd.Answered[o] && (!open || at != o) {
			inFlight[r.Name] = true
		}
	}
	settling := map[string]bool{}
	for name, at := range b.movedAt {
		if b.now().Sub(at) < settleIntervals*b.Interval {
			settling[name] = true
		} else {
			delete(b.movedAt, name)
		}
	}
	moves = regionmap.Plan(m, rd.Load, inFlight, regionmap.BalanceSettings{
		Stores: n, Tolerance: b.Tolerance, MaxMovesInFlight: b.MaxMovesInFlight, Unreachable: unreachable, Leaving: b.leaving(n), Settling: settling, MergeBytes: b.MergeBytes, MergeQPS: b.MergeQPS,
		MergeReady: b.mergeReady(rd), MinBytes: b.MinBytes, MinQPS: b.MinQPS,
		RecutTolerance: b.RecutTolerance, RecutReady: b.recutReady(rd), RecutStore: b.Ordinal})
	return moves, inFlight
}

// recutStill is how much a region's size may drift and still count as
// holding still for a re-cut: compactions shrink a region that takes no
// writes by a few percent; a region the load still writes grows past it.
const recutStill = 0.05

// stillMark is a region's size when it was first read holding still.
type stillMark struct {
	since time.Time
	bytes int64
}

// recutReady are the regions read at about the same size (within
// recutStill) at every reading for MergeAfter, they stopped growing, in
// a cluster whose data did the same: none while it grows. A load that
// walks the key space leaves regions behind it that hold still long
// before it ends; re-cut then, they would cost the load their merges'
// compactions and moves (a 2 M-record load ran at 0.69× its pre-split
// baseline with re-cuts under it), and the regions it has yet to leave
// behind would need re-cutting anyway.
func (b *Balancer) recutReady(rd Readings) map[string]bool {
	if b.RecutTolerance <= 0 {
		return nil
	}
	if b.stillSince == nil {
		b.stillSince = map[string]stillMark{}
	}
	now := b.now()
	var total int64
	for _, l := range rd.Load {
		total += l.Bytes
	}
	if float64(abs64(total-b.clusterStill.bytes)) > recutStill*float64(max(b.clusterStill.bytes, 1)) || b.clusterStill.since.IsZero() {
		b.clusterStill = stillMark{since: now, bytes: total}
	}
	clusterReady := now.Sub(b.clusterStill.since) >= b.MergeAfter
	ready := map[string]bool{}
	for name, l := range rd.Load {
		mark, ok := b.stillSince[name]
		if !ok || float64(abs64(l.Bytes-mark.bytes)) > recutStill*float64(max(mark.bytes, 1)) {
			mark = stillMark{since: now, bytes: l.Bytes}
			b.stillSince[name] = mark
		}
		ready[name] = clusterReady && now.Sub(mark.since) >= b.MergeAfter
	}
	for name := range b.stillSince {
		if _, read := rd.Load[name]; !read {
			delete(b.stillSince, name) // gone (split, merged, moved off a silent store): start over
		}
	}
	return ready
}

// maybeRecut starts the re-cut of the worst uneven pair of neighbours that
// stopped growing and that this store serves both of, unless one runs.
func (b *Balancer) maybeRecut(ctx context.Context, m regionmap.Map, rd Readings) {
	if b.RecutTolerance <= 0 || b.recutting.Load() {
		return
	}
	if b.now().Sub(b.clusterStill.since) < b.MergeAfter {
		return // the cluster's data still grows (recutReady)
	}
	ready := map[string]bool{}
	for name, mark := range b.stillSince {
		ready[name] = b.now().Sub(mark.since) >= b.MergeAfter
	}
	left, right, ok := recutCandidate(m, rd, ready, b.Ordinal, b.RecutTolerance, b.MergeBytes)
	if !ok {
		return
	}
	b.recutting.Store(true)
	go func() {
		defer b.recutting.Store(false)
		if _, err := b.KV.store.Recut(ctx, left, right); err != nil && ctx.Err() == nil {
			b.KV.store.opts.Region.Logger.Warn("re-cutting uneven regions", "left", left, "right", right, "err", err)
		}
	}()
}

// mergeReady are the regions read as merge candidates (under MergeBytes,
// and under MergeQPS when set) at every reading for MergeAfter.
func (b *Balancer) mergeReady(rd Readings) map[string]bool {
	if b.smallSince == nil {
		b.smallSince = map[string]time.Time{}
	}
	now := b.now()
	ready := map[string]bool{}
	for name, l := range rd.Load {
		if l.Bytes >= b.MergeBytes || (b.MergeQPS > 0 && l.QPS >= b.MergeQPS) {
			delete(b.smallSince, name)
			continue
		}
		since, ok := b.smallSince[name]
		if !ok {
			b.smallSince[name], since = now, now
		}
		ready[name] = now.Sub(since) >= b.MergeAfter
	}
	for name := range b.smallSince {
		if _, read := rd.Load[name]; !read {
			delete(b.smallSince, name) // gone (split, merged) or not answered: start over
		}
	}
	return ready
}

// Step takes or renews the lease and, holding it, plans and commits once.
// It returns the moves committed.
func (b *Balancer) Step(ctx context.Context) ([]regionmap.Move, error) {
	b.ensureDefaults()
	n, ok := b.Stores()
	if !ok || n < 2 {
		return nil, nil
	}
	s := b.KV.store
	bucket := s.opts.Region.Bucket
	l, held, err := regionmap.AcquireLease(ctx, bucket, b.holder(), time.Now(), b.LeaseTerm, b.MaxClockOffset)
	b.leaseHeld.Store(held && err == nil)
	if err != nil || !held {
		return nil, err
	}
	b.leaseUntil.Store(l.Expiry.UnixNano())
	// Dead stores first: their regions are unavailable until then.
	if _, err := b.failover(ctx); err != nil {
		return nil, err
	}
	m, ok := s.RegionMap()
	if !ok {
		return nil, nil
	}
	rd := b.readings(ctx)
	moves, _ := b.Plan(m, rd, n)
	if len(moves) == 0 {
		b.maybeRecut(ctx, m, rd)
		return nil, nil
	}
	next, err := m.Moved(moves)
	if err != nil {
		return nil, err
	}
	s.mapMu.Lock()
	err = regionmap.Commit(ctx, bucket, m, &next)
	s.mapMu.Unlock()
	if errors.Is(err, regionmap.ErrFenced) {
		// A split (or another balancer) committed first: plan again on
		// the newer map next time.
		if newer, lerr := regionmap.Load(ctx, bucket); lerr == nil {
			s.learnMap(newer)
		}
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	s.learnMap(next)
	b.moves.Add(uint64(len(moves)))
	if b.movedAt == nil {
		b.movedAt = map[string]time.Time{}
	}
	for _, mv := range moves {
		b.movedAt[mv.Region] = b.now()
	}
	s.opts.Region.Logger.Info("balancer moved regions", "moves", fmt.Sprint(moves), "epoch", next.Epoch, "stores", n, "leaving", fmt.Sprint(b.leaving(n)))
	return moves, nil
}

// Run steps every Interval until ctx ends.
//
// With the store's liveness lease (StoreOptions.Liveness), it also checks
// every store's lease each failover check interval, holding the balancer
// lease, and fails over the regions of the dead (liveness.go). Holding
// it, it deletes old lease terms and liveness records, and old map epochs
// (fencinglogs.go).
func (b *Balancer) Run(ctx context.Context) {
	b.ensureDefaults()
	t := time.NewTicker(b.Interval)
	defer t.Stop()
	var failoverTick <-chan time.Time
	if l := b.KV.store.opts.Liveness; l != nil {
		ft := time.NewTicker(l.checkInterval())
		defer ft.Stop()
		failoverTick = ft.C
	}
	leaseLogs := time.NewTicker(contract.DefaultFencingLogCollectInterval)
	defer leaseLogs.Stop()
	epochs := time.NewTicker(contract.DefaultJanitorInterval)
	defer epochs.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-failoverTick:
			b.failoverStep(ctx)
			continue
		case <-leaseLogs.C:
			b.collectLeaseLogs(ctx)
			continue
		case <-epochs.C:
			b.collectMapEpochs(ctx)
			continue
		case <-t.C:
		}
		if _, err := b.Step(ctx); err != nil && ctx.Err() == nil {
			b.KV.store.opts.Region.Logger.Warn("balancing regions", "err", err)
		}
	}
}
