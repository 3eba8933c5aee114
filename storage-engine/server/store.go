package server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/bellows-kv/bellows/internal/contract"
	"github.com/bellows-kv/bellows/storage-engine/hlc"
	"github.com/bellows-kv/bellows/storage-engine/manifest"
	"github.com/bellows-kv/bellows/storage-engine/region"
	"github.com/bellows-kv/bellows/storage-engine/regionmap"
	"github.com/bellows-kv/bellows/storage-engine/wal"
)

// Store is the set of regions one storage pod is assigned, with their key
// ranges. A region another store still owns is claimed in the background as
// soon as that store releases it (a region moving between pods); until then
// requests for it fail with UNAVAILABLE. Release hands every open region to
// its next owner; from its first moment requests for them fail with
// UNAVAILABLE too.
type Store struct {
	opts StoreOptions
	// checkpoints counts the backups' region checkpoints this store ran.
	checkpoints CheckpointStats
	// snap is the assignment every request looks up: replaced whole
	// (copy on write) by Reassign, so a lookup takes no lock.
	snap atomic.Pointer[assigned]
	// mu serializes the changes of the assignment: Reassign, Release,
	// Close.
	mu     sync.Mutex
	closed bool
	bg     context.Context
	cancel context.CancelFunc
	claims sync.WaitGroup
	// applied holds the idempotency keys of the writes recently applied
	// in each region (dedupe.go), handed over with a released region
	// (handover.go).
	applied dedupe
	// loops are the store's background loops (the WAL bound), ended
	// with claims by stopClaims.
	loops    sync.WaitGroup
	walStats WALBoundStats
	// opened is how long OpenStore took: the store's recovery.
	opened time.Duration
	// regionMap is the newest region map the store knows (nil: fixed
	// regions); mapMu serialises this store's commits of it (split.go).
	regionMap atomic.Pointer[mapState]
	// owns says whether this store owns a region under the map (its
	// Assigner's rule); nil: no Assigner, the store owns what it serves.
	owns atomic.Pointer[func(Span) bool]
	// replicas is the cluster's store count (its Assigner's); nil: not
	// known. It tells which store the map gives a region to.
	replicas atomic.Pointer[func() (int, bool)]
	mapMu    sync.Mutex
	// sizeSplits and loadSplits count the splits this store committed,
	// merges its merges (merge.go).
	sizeSplits, loadSplits atomic.Uint64
	merges                 atomic.Uint64
	// recuts counts its re-cuts (recut.go).
	recuts atomic.Uint64
	// mergeCrash, set by tests, stops a merge after the step it names,
	// as a crash there would (merge.go).
	mergeCrash func(step string) bool
}

// StoreOptions configure OpenStore.
type StoreOptions struct {
	// WALRoot holds one WAL directory per region, WALRoot/<name>.
	WALRoot string
	// Region is copied for each region, with Name set to the span's name
	// and WALDir to WALRoot/<name>.
	Region region.Options
	// ReleasePollInterval is how often a region another store owns is
	// checked for its owner's next manifest commit (the release), one
	// existence check each time. Default contract.DefaultReleasePollInterval.
	ReleasePollInterval time.Duration
	// ClaimRetryMin and ClaimRetryMax bound the backoff after a claim
	// failed for another reason than ownership (the bucket unreachable,
	// say). Defaults 200ms and 5s.
	ClaimRetryMin, ClaimRetryMax time.Duration
	// TxnLockTTL, TxnLockResolveInterval and TxnOutcomeRetention: the
	// cross-region commits' timings (storage-engine/txn); defaults in contract.
	TxnLockTTL             time.Duration
	TxnLockResolveInterval time.Duration
	TxnOutcomeRetention    time.Duration
	TxnOutcomeRetryWindow  time.Duration
	// TxnTimeout ends a transaction BeginTxn registered that is neither
	// committed nor rolled back this long after it began (txn.Registry).
	// Default contract.DefaultTxnTimeout.
	TxnTimeout time.Duration
	// MaxWALAge flushes a region whose oldest unflushed write is older
	// (walbound.go). Default contract.DefaultMaxWALAge.
	MaxWALAge time.Duration
	// MaxStoreWALBytes caps the WAL of all the store's regions together:
	// past it the regions with the oldest unflushed writes are flushed
	// first. 0: the store's memstore budget, its open regions times
	// Region.MemstoreBytes.
	MaxStoreWALBytes int64
	// WALBoundInterval is how often the store checks the WAL bound.
	// Default contract.DefaultWALBoundInterval.
	WALBoundInterval time.Duration
	// OpenConcurrency is how many regions OpenStore opens (and so
	// replays) at once. Default contract.DefaultRegionOpenConcurrency.
	OpenConcurrency int
	// Map is the cluster's region map the spans come from (SpansOf);
	// nil: the regions are fixed and never split.
	Map *regionmap.Map
	// SplitBytes: a region whose data (region.DataBytes) passes it is
	// split (split.go); 0 never splits. Needs Map.
	SplitBytes int64
	// SplitCheckInterval is how often region sizes are compared with
	// SplitBytes, and MapPollInterval how often the bucket is checked for
	// a newer map. Defaults contract.DefaultSplitCheckInterval and
	// contract.DefaultMapPollInterval.
	SplitCheckInterval time.Duration
	MapPollInterval    time.Duration
	// SplitQPS: a region serving more requests per second than this (and
	// twice its store's median) splits where its load halves
	// (loadsplit.go); 0 never splits by load. LoadWindow is the window
	// rates are measured over; default contract.DefaultLoadWindow.
	SplitQPS   float64
	LoadWindow time.Duration
	// MergeBytes: two adjacent regions this store serves merge when each
	// holds less than this, together less than half SplitBytes, each
	// serves under a quarter of SplitQPS (when set), and that has lasted
	// MergeAfter (automerge.go). 0 never merges. MergeCheckInterval
	// defaults to SplitCheckInterval, MergeAfter to
	// contract.DefaultMergeAfter.
	MergeBytes         int64
	MergeAfter         time.Duration
	MergeCheckInterval time.Duration
	// Name is how the store names itself in its Regions answers (the
	// regions' owner). Default: the host name, which in Kubernetes is the
	// pod's name.
	Name string
	// Ordinal is the store's ordinal among the cluster's stores, which
	// its Regions answers carry for the balancer; nil: it has none.
	Ordinal *int
	// Liveness is the store's liveness lease (docs/failover.md): the
	// manifests it claims name it, a claim waiting on a dead lease takes
	// the region over, and the balancer fails dead stores over. Nil: no
	// failover.
	Liveness *Liveness
}

// EnsureDefaults fills the unset fields with their defaults.
func (o *StoreOptions) EnsureDefaults() {
	if o.Region.Logger == nil {
		o.Region.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Region.Clock == nil {
		// One process, one clock: no offset to bound (the store binary
		// sets --max-clock-offset).
		o.Region.Clock = hlc.New(nil, 0)
	}
	if o.ReleasePollInterval <= 0 {
		o.ReleasePollInterval = contract.DefaultReleasePollInterval
	}
	if o.ClaimRetryMin <= 0 {
		o.ClaimRetryMin = 200 * time.Millisecond
	}
	if o.ClaimRetryMax <= 0 {
		o.ClaimRetryMax = 5 * time.Second
	}
	if o.TxnLockTTL <= 0 {
		o.TxnLockTTL = contract.DefaultTxnLockTTL
	}
	if o.TxnLockResolveInterval <= 0 {
		o.TxnLockResolveInterval = contract.DefaultTxnLockResolveInterval
	}
	if o.TxnOutcomeRetention <= 0 {
		o.TxnOutcomeRetention = contract.DefaultTxnOutcomeRetention
	}
	if o.TxnOutcomeRetryWindow <= 0 {
		o.TxnOutcomeRetryWindow = contract.DefaultTxnOutcomeRetryWindow
	}
	if o.TxnTimeout <= 0 {
		o.TxnTimeout = contract.DefaultTxnTimeout
	}
	if o.MaxWALAge <= 0 {
		o.MaxWALAge = contract.DefaultMaxWALAge
	}
	if o.WALBoundInterval <= 0 {
		o.WALBoundInterval = contract.DefaultWALBoundInterval
	}
	if o.OpenConcurrency <= 0 {
		o.OpenConcurrency = contract.DefaultRegionOpenConcurrency
	}
	if o.SplitCheckInterval <= 0 {
		o.SplitCheckInterval = contract.DefaultSplitCheckInterval
	}
	if o.MergeCheckInterval <= 0 {
		o.MergeCheckInterval = o.SplitCheckInterval
	}
	if o.MergeAfter <= 0 {
		o.MergeAfter = contract.DefaultMergeAfter
	}
	if o.MapPollInterval <= 0 {
		o.MapPollInterval = contract.DefaultMapPollInterval
	}
	if o.LoadWindow <= 0 {
		o.LoadWindow = contract.DefaultLoadWindow
	}
	if o.Name == "" {
		o.Name, _ = os.Hostname()
	}
}

// Assignment is a region assigned to this store: open, or waiting for its
// owner to release it. (region.Region is the engine's open region itself.)
type Assignment struct {
	Span Span
	eng  atomic.Pointer[region.Region]
	// waiting is why the region is not open yet.
	waiting atomic.Pointer[error]
	// released: this store has handed the region over (Release,
	// Reassign), or is doing so.
	released atomic.Bool
	// stopClaim ends this region's background claim; claimDone is closed
	// when it ended (nil: no claim was started).
	stopClaim context.CancelFunc
	claimDone chan struct{}
	// load counts and samples the requests served here (loadsplit.go).
	load loadSampler
}

// assigned is one version of a Store's assignment.
type assigned struct {
	// live are the assigned regions, by Span.Start.
	live []*Assignment
	// all are live and the regions Reassign released (which answer
	// UNAVAILABLE, region.ErrReleasing, until they are assigned here
	// again), by Span.Start: what requests are routed by.
	all []*Assignment
}

func newAssigned(live, gone []*Assignment) *assigned {
	byStart := func(a, b *Assignment) int { return bytes.Compare(a.Span.Start, b.Span.Start) }
	live = slices.Clone(live)
	slices.SortFunc(live, byStart)
	all := append(slices.Clone(live), gone...)
	slices.SortFunc(all, byStart)
	return &assigned{live: live, all: all}
}

// Name is the region's name.
func (a *Assignment) Name() string { return a.Span.Name }

// Engine is the open region, or why it is not open: an error matching
// region.ErrOwned that says which store holds it (waiting for its release),
// region.ErrReleasing (this store is handing it over), or region.ErrClosed;
// each names the region (region.Error).
func (a *Assignment) Engine() (*region.Region, error) {
	if e := a.eng.Load(); e != nil {
		return e, nil
	}
	if a.released.Load() {
		return nil, &region.Error{Region: a.Name(), Err: region.ErrReleasing}
	}
	if err := a.waiting.Load(); err != nil {
		if fo := (*FailingOverError)(nil); errors.As(*err, &fo) {
			return nil, *err
		}
		return nil, fmt.Errorf("not open yet, waiting for its owner to release it: %w", *err)
	}
	return nil, &region.Error{Region: a.Name(), Err: region.ErrClosed}
}

// heldHere are the live regions of m outside spans that this store still
// holds: their WAL directory is here, and their last manifest names that
// WAL, neither released nor retired. That is a region the balancer moved
// away while this store was down, killed between the map commit and its
// release: no other store may claim it (its WAL may hold acknowledged
// writes), and, not assigned here any more, it would never be opened to
// be released, so its new owner would wait forever. OpenStore opens such
// regions with the rest, replaying their WALs, and the Assigner's first
// step releases them, as any region given up.
func (s *Store) heldHere(ctx context.Context, m regionmap.Map, spans []Span) []Span {
	in := map[string]bool{}
	for _, sp := range spans {
		in[sp.Name] = true
	}
	var out []Span
	for _, sp := range SpansOf(m) {
		if in[sp.Name] {
			continue
		}
		id, ok, err := wal.ReadIdentity(filepath.Join(s.opts.WALRoot, sp.Name))
		if err != nil || !ok {
			continue
		}
		man, err := manifest.Load(ctx, s.opts.Region.Bucket.Prefixed(region.BucketPrefix(sp.Name)))
		if err != nil || man.Number == 0 || man.Released || man.Retired || man.WALID != id {
			continue
		}
		s.opts.Region.Logger.Warn("a region moved away while this store was down still holds this store's WAL: opening it to release it to its new owner",
			"region", sp.Name, "manifest", man.Number)
		out = append(out, sp)
	}
	return out
}

// OpenStore opens every span's region (see StoreOptions), OpenConcurrency
// at a time: a restart's recovery is then about its largest replays rather
// than their sum. A region that another store owns (region.ErrOwned) is
// claimed in the background; any other error closes what was opened and is
// returned (every error, joined). It starts the WAL bound (walbound.go).
func OpenStore(ctx context.Context, spans []Span, o StoreOptions) (*Store, error) {
	began := time.Now()
	o.EnsureDefaults()
	bg, cancel := context.WithCancel(context.Background())
	s := &Store{opts: o, bg: bg, cancel: cancel}
	if o.Map != nil {
		s.regionMap.Store(newMapState(*o.Map))
		s.removeRetiredWALs(*o.Map)
		spans = append(slices.Clone(spans), s.heldHere(ctx, *o.Map, spans)...)
	}
	live := make([]*Assignment, len(spans))
	errs := make([]error, len(spans))
	var g errgroup.Group
	g.SetLimit(o.OpenConcurrency)
	for i, sp := range spans {
		r := &Assignment{Span: sp}
		live[i] = r
		g.Go(func() error {
			opts := s.regionOptions(sp)
			e, err := region.Open(ctx, opts)
			switch {
			case err == nil:
				s.seedApplied(ctx, r, e)
				r.eng.Store(e)
			case errors.Is(err, region.ErrOwned):
				opts.Logger.Warn("region owned by another store; claiming it once released", "region", sp.Name, "err", err)
				s.startClaim(r, opts, err)
			default:
				errs[i] = err
			}
			return nil
		})
	}
	_ = g.Wait()
	s.snap.Store(newAssigned(live, nil))
	if err := errors.Join(errs...); err != nil {
		_ = s.Close()
		return nil, err
	}
	s.opened = time.Since(began)
	s.loops.Add(1)
	go func() {
		defer s.loops.Done()
		s.runWALBound(bg, o.WALBoundInterval)
	}()
	if o.Map != nil {
		s.loops.Add(2)
		go func() {
			defer s.loops.Done()
			s.followMap(bg, o.MapPollInterval)
		}()
		go func() {
			defer s.loops.Done()
			s.runJanitor(bg, contract.DefaultJanitorInterval)
		}()
		if o.SplitBytes > 0 {
			s.loops.Add(1)
			go func() {
				defer s.loops.Done()
				s.runSplits(bg, o.SplitCheckInterval)
			}()
		}
		if o.MergeBytes > 0 {
			s.loops.Add(1)
			go func() {
				defer s.loops.Done()
				s.runMerges(bg, o.MergeCheckInterval)
			}()
		}
	}
	// The load windows run without load splits too: they measure each
	// region's request rate, which the Regions RPC reports.
	s.loops.Add(1)
	go func() {
		defer s.loops.Done()
		s.runLoadSplits(bg, o.LoadWindow)
	}()
	return s, nil
}

// Clock is the store's clock: every timestamp its regions and
// transactions issue comes from it (docs/clock.md).
func (s *Store) Clock() *hlc.Clock { return s.opts.Region.Clock }

// Recovered is how long OpenStore took to open every region it could
// (those another store owned are claimed later, not counted).
func (s *Store) Recovered() time.Duration { return s.opened }

// WALArchiveInterval is how often the store's regions ship their WAL to the
// archive (0: not archived).
func (s *Store) WALArchiveInterval() time.Duration { return s.opts.Region.WALArchiveInterval }

// WALBoundStats counts the flushes the WAL bound forced.
func (s *Store) WALBoundStats() *WALBoundStats { return &s.walStats }

// regionOptions are the options of sp's region.
func (s *Store) regionOptions(sp Span) region.Options {
	opts := s.opts.Region
	opts.Name = sp.Name
	opts.WALDir = filepath.Join(s.opts.WALRoot, sp.Name)
	opts.BeforeFlushCommit = func(ctx context.Context, final bool) { s.saveApplied(ctx, sp.Name, final) }
	if len(sp.Parents) > 0 {
		df := &region.DeriveFrom{Start: sp.Start, End: sp.End}
		for _, p := range sp.Parents {
			df.Parents = append(df.Parents, manifest.ParentRef{Name: p.Name, Manifest: p.Manifest})
		}
		opts.DeriveFrom = df
	}
	opts.KeepReplayedRequests = s.applied.maxEntries()
	if s.opts.Liveness != nil {
		opts.Lease = s.opts.Liveness.Lease()
	}
	return opts
}

// startClaim claims r in the background (claim); owned is why it is not
// open (nil: not tried yet, tried at once).
func (s *Store) startClaim(r *Assignment, opts region.Options, owned error) {
	if owned == nil {
		owned = &region.Error{Region: r.Name(), Err: fmt.Errorf("%w: newly assigned to this store, claiming it", region.ErrClosed)}
	}
	r.waiting.Store(&owned)
	ctx, stop := context.WithCancel(s.bg)
	r.stopClaim, r.claimDone = stop, make(chan struct{})
	s.claims.Add(1)
	go func() {
		defer close(r.claimDone)
		s.claim(ctx, r, opts, owned)
	}()
}

// Reassign makes spans this store's assignment while it serves: a region
// newly assigned is claimed in the background (as at OpenStore: at once if
// its owner released it, else once it does); a region no longer assigned is
// released as on SIGTERM (Release), requests for it answering UNAVAILABLE
// (region.ErrReleasing) from the first moment. Requests for the other
// regions are served throughout. It returns once the released regions are
// released; added and released are their names. A region that fails to
// release is closed and stays owned by this store's WAL (the error).
func (s *Store) Reassign(ctx context.Context, spans []Span) (added, released []string, err error) {
	return s.ReassignFunc(ctx, func() []Span { return spans })
}

// ReassignFunc is Reassign to the spans target returns, called under the
// assignment lock: a target computed from the store's state (Assigner)
// then cannot be stale against a split of this store's.
func (s *Store) ReassignFunc(ctx context.Context, target func() []Span) (added, released []string, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, nil, &region.Error{Err: region.ErrClosed}
	}
	spans := target()
	cur := s.current()
	want := map[string]Span{}
	for _, sp := range spans {
		want[sp.Name] = sp
	}
	var keep, drop []*Assignment
	for _, a := range cur.live {
		if _, ok := want[a.Name()]; ok {
			keep = append(keep, a)
			delete(want, a.Name())
		} else {
			drop = append(drop, a)
		}
	}
	if len(want) == 0 && len(drop) == 0 {
		return nil, nil, nil
	}
	// Released earlier and not assigned again: still answered UNAVAILABLE.
	var gone []*Assignment
	for _, a := range cur.all {
		if a.released.Load() && !slices.Contains(cur.live, a) {
			if _, again := want[a.Name()]; !again {
				gone = append(gone, a)
			}
		}
	}
	for _, sp := range spans {
		if _, ok := want[sp.Name]; !ok {
			continue
		}
		r := &Assignment{Span: sp}
		s.startClaim(r, s.regionOptions(sp), nil)
		keep = append(keep, r)
		added = append(added, sp.Name)
	}
	for _, a := range drop {
		a.released.Store(true)
		released = append(released, a.Name())
	}
	s.snap.Store(newAssigned(keep, append(gone, drop...)))
	for _, a := range drop {
		if a.stopClaim != nil {
			a.stopClaim()
			<-a.claimDone
		}
	}
	err = s.release(ctx, drop)
	return added, released, err
}

// claim opens r once its owner has released it, or until the claim fails
// for another reason than ownership, or the store closes. owned is the
// ErrOwned error of the last attempt.
//
// A bucket has no watch, so the claim polls, but cheaply: the owner's
// release is a manifest commit, so only the existence of the manifest after
// the one that said "owned" is checked, every ReleasePollInterval (one
// existence check: 20/s per waiting region at the default 50ms), and the
// region is opened only when it appears. A region moves in about its flush
// plus at most one interval. The alternative, the releasing store telling
// the stores that wait, would need peers to be known (they are not without
// forwarding), a new RPC, and this poll anyway for a message lost with a
// dying store; the manifest is the truth either way. The traffic lasts only
// while the region waits, which is during a move.
func (s *Store) claim(ctx context.Context, r *Assignment, opts region.Options, owned error) {
	defer s.claims.Done()
	seen := ownedManifest(owned)
	poll := time.NewTicker(s.opts.ReleasePollInterval)
	defer poll.Stop()
	retry := s.opts.ClaimRetryMin
	// A region not known to be owned elsewhere (newly assigned by
	// Reassign) is tried at once.
	now := !errors.Is(owned, region.ErrOwned)
	lastOwned := owned
	var checkedLease time.Time
	for {
		if !now {
			select {
			case <-ctx.Done():
				return
			case <-poll.C:
			}
		}
		now = false
		takeover := false
		if seen > 0 && s.claimantDead(ctx, lastOwned, &checkedLease) {
			// Its claimant's lease is dead: no release will come.
			takeover = true
			opts.Logger.Warn("taking over a region whose owner's liveness lease is dead", "region", r.Name(), "owner", lastOwned)
			// Until it opens, requests learn it is failing over, not
			// that it waits for a release.
			marked := takingOverError(r.Name(), lastOwned)
			r.waiting.Store(&marked)
			seen = 0
		}
		if seen > 0 {
			next, err := region.ManifestCommitted(ctx, opts.Bucket, r.Name(), seen+1)
			if ctx.Err() != nil {
				return
			}
			if err != nil {
				opts.Logger.Debug("checking for the release of a region", "region", r.Name(), "err", err)
				continue
			}
			if !next {
				continue
			}
		}
		o := opts
		// Only this attempt: another store may claim first, and its claim
		// is released as usual.
		o.ForceTakeover = o.ForceTakeover || takeover
		e, err := region.Open(ctx, o)
		if err == nil {
			s.seedApplied(ctx, r, e)
			r.eng.Store(e)
			r.waiting.Store(nil)
			if takeover {
				opts.Logger.Info("took over region from a dead store", "region", r.Name(), "replayed", e.Recovery().ReplayedRecords)
			} else {
				opts.Logger.Info("claimed region after its owner released it", "region", r.Name())
			}
			return
		}
		if ctx.Err() != nil {
			return
		}
		r.waiting.Store(&err)
		lastOwned = err
		if seen = ownedManifest(err); seen > 0 || errors.Is(err, region.ErrOwned) {
			// Still owned (the owner committed something else, or
			// another waiting store claimed it first): watch on.
			retry = s.opts.ClaimRetryMin
			continue
		}
		opts.Logger.Error("claiming region", "region", r.Name(), "err", err, "retry in", retry)
		select {
		case <-ctx.Done():
			return
		case <-time.After(retry):
		}
		retry = min(2*retry, s.opts.ClaimRetryMax)
	}
}

// claimantDead reports whether the owner an ErrOwned error names holds a
// liveness lease that is dead, asking the bucket at most once per check
// interval (*checked is when it last did).
func (s *Store) claimantDead(ctx context.Context, owned error, checked *time.Time) bool {
	l := s.opts.Liveness
	var oe *region.OwnedError
	if l == nil || !errors.As(owned, &oe) || oe.Lease == "" || time.Since(*checked) < l.checkInterval() {
		return false
	}
	*checked = time.Now()
	dead, err := leaseDead(ctx, l.Bucket, oe.Lease)
	if err != nil {
		s.opts.Region.Logger.Debug("reading a region owner's liveness lease", "lease", oe.Lease, "err", err)
		return false
	}
	return dead
}

// ownedManifest is the number of the manifest that an ErrOwned error says
// names another owner; 0 for any other error.
func ownedManifest(err error) uint64 {
	var owned *region.OwnedError
	if errors.As(err, &owned) {
		return owned.Manifest
	}
	return 0
}

// Assignments are the assigned regions in key order, open or not.
func (s *Store) Assignments() []*Assignment { return s.current().live }

// current is the assignment now (empty before OpenStore set it).
func (s *Store) current() *assigned {
	if a := s.snap.Load(); a != nil {
		return a
	}
	return &assigned{}
}

// Open calls f for each open region.
func (s *Store) Open(f func(*Assignment, *region.Region)) {
	for _, r := range s.Assignments() {
		if e := r.eng.Load(); e != nil {
			f(r, e)
		}
	}
}

// ByName finds an assigned region, or one Reassign released (which
// answers UNAVAILABLE).
func (s *Store) ByName(name string) *Assignment {
	for _, r := range s.current().all {
		if r.Name() == name {
			return r
		}
	}
	return nil
}

// Route finds the assigned region holding key, else a region Reassign
// released that holds it (which answers UNAVAILABLE), else nil. The live
// regions come first: since regions split and move, a released region's
// range may overlap a live one's (a parent given away, then one of its
// daughters taken back), and the released one must not hide it.
func (s *Store) Route(key []byte) *Assignment {
	cur := s.current()
	live := cur.live
	i := sort.Search(len(live), func(i int) bool { return bytes.Compare(live[i].Span.Start, key) > 0 }) - 1
	if i >= 0 && live[i].Span.Contains(key) {
		return live[i]
	}
	for _, a := range cur.all {
		if a.released.Load() && a.Span.Contains(key) {
			return a
		}
	}
	return nil
}

// closeAssignments marks the store closed, so no Reassign or split starts,
// ends the background claims and loops, and returns holding mu. The loops
// end without mu held: a split loop may be waiting for it.
func (s *Store) closeAssignments() {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.stopClaims()
	s.mu.Lock()
}

// stopClaims ends the background claims; a claim that succeeds meanwhile
// leaves its region open for the caller to close.
func (s *Store) stopClaims() {
	if s.cancel != nil {
		s.cancel()
	}
	s.claims.Wait()
	s.loops.Wait()
}

// Close closes every open region without releasing it: only this store's
// WAL can reopen them (a restart).
func (s *Store) Close() error {
	s.closeAssignments()
	defer s.mu.Unlock()
	return s.each(s.Assignments(), func(_ *Assignment, e *region.Region) error {
		if err := e.Close(); err != nil && !errors.Is(err, region.ErrClosed) {
			return err
		}
		return nil
	})
}

// Release hands every open region over: from its first moment requests for
// them fail with UNAVAILABLE (region.ErrReleasing), and each is released at
// once, in parallel (region.Release: its compaction aborted, flushed, marked
// released), so whichever store is assigned it next claims it with every
// acknowledged write (a pod shutting down or a region moving) and, written
// before the released manifest, the idempotency keys of the writes applied
// here recently (handover.go). A region
// that fails to release is closed and stays owned by this store's WAL.
// Each release is logged with how long it took: what a region's move costs
// beyond the next owner's claim.
func (s *Store) Release(ctx context.Context) error {
	s.closeAssignments()
	defer s.mu.Unlock()
	return s.release(ctx, s.Assignments())
}

// release hands rs over (Release), their claims ended.
func (s *Store) release(ctx context.Context, rs []*Assignment) error {
	for _, r := range rs {
		if r.eng.Load() != nil {
			r.released.Store(true)
		}
	}
	log := s.opts.Region.Logger
	return s.each(rs, func(r *Assignment, e *region.Region) error {
		began := time.Now()
		if err := e.ReleaseWith(ctx, s.handOver(r)); err != nil {
			return err
		}
		log.Info("released region", "region", r.Name(), "took", time.Since(began))
		return nil
	})
}

// each takes every open region of rs out of service and calls f for it,
// all at once.
func (s *Store) each(rs []*Assignment, f func(*Assignment, *region.Region) error) error {
	var (
		mu   sync.Mutex
		errs []error
		wg   sync.WaitGroup
	)
	for _, r := range rs {
		e := r.eng.Swap(nil)
		if e == nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := f(r, e); err != nil {
				mu.Lock()
				errs = append(errs, fmt.Errorf("%s: %w", r.Name(), err))
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}
