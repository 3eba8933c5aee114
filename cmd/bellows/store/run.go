package store

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/bellows-kv/bellows/cmd/bellows/serve"
	"github.com/bellows-kv/bellows/internal/contract"
	"github.com/bellows-kv/bellows/internal/discovery"
	"github.com/bellows-kv/bellows/internal/tlsconfig"
	kvpb "github.com/bellows-kv/bellows/proto/bellows/kv/v1"
	"github.com/bellows-kv/bellows/storage-engine/blob"
	"github.com/bellows-kv/bellows/storage-engine/blockcache"
	"github.com/bellows-kv/bellows/storage-engine/compaction"
	"github.com/bellows-kv/bellows/storage-engine/health"
	"github.com/bellows-kv/bellows/storage-engine/hlc"
	"github.com/bellows-kv/bellows/storage-engine/liveness"
	"github.com/bellows-kv/bellows/storage-engine/memstore"
	"github.com/bellows-kv/bellows/storage-engine/offload"
	"github.com/bellows-kv/bellows/storage-engine/region"
	"github.com/bellows-kv/bellows/storage-engine/regionmap"
	"github.com/bellows-kv/bellows/storage-engine/server"
	"github.com/bellows-kv/bellows/storage-engine/server/route"
	"github.com/bellows-kv/bellows/storage-engine/wal"
)

// Run serves the store until ctx ends or a signal arrives, then shuts down
// in this order, so that a region moves to its next owner in about its
// flush:
//
//  1. The store stops taking requests for its regions: they answer
//     UNAVAILABLE (region.ErrReleasing), and /readyz fails.
//  2. It releases them (Store.Release, within cfg.ReleaseTimeout): running
//     compactions are aborted (an Admin Compact answers ABORTED), every
//     acknowledged write is flushed, the manifest is marked released. The
//     next owner, polling for that commit, claims each region at once.
//  3. Only then does gRPC stop gracefully (contract.GracefulStopTimeout)
//     for whatever is still running: forwarded requests, scans.
//
// cfg must have passed Validate. The ready line goes to out.
func Run(ctx context.Context, cfg Config, log *slog.Logger, out io.Writer) (err error) {
	// A store whose liveness lease is fenced ends with that as its error.
	ctx, stopRun := context.WithCancelCause(ctx)
	defer func() {
		if cause := context.Cause(ctx); err == nil && errors.Is(cause, liveness.ErrFenced) {
			err = cause
		}
		stopRun(nil)
	}()
	allSpans, err := cfg.Spans()
	if err != nil {
		return err
	}
	kube := &kubeConfig{}
	peers, peerSlices, err := peerList(ctx, cfg, kube)
	if err != nil {
		return err
	}
	own, err := ownershipOf(ctx, cfg, kube, peerSlices, allSpans, log)
	if err != nil {
		return err
	}
	modes, err := engineModesOf(cfg, log)
	if err != nil {
		return err
	}
	workers, err := compactorDiscovery(ctx, cfg, kube, log)
	if err != nil {
		return err
	}
	bucket, err := openBucket(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer bucket.Close()
	// The flags' regions only make the cluster's first region map; from
	// then on the map in the bucket says which regions exist (splits).
	regionMap, err := bootstrapRegionMap(ctx, bucket, allSpans, log)
	if err != nil {
		return err
	}
	allSpans = server.SpansOf(regionMap)
	spans, ordinal := own.place(cfg, allSpans)
	cache := blockcache.New(cfg.Engine.BlockCacheBytes)
	reg := health.NewRegistry()
	var live *server.Liveness
	if ordinal != nil {
		if live, err = startLiveness(ctx, stopRun, bucket, *ordinal, cfg.MaxClockOffset, log); err != nil {
			return err
		}
	}
	// One TLS directory for every connection: served to clients and
	// peers, presented to peers and workers.
	dialTLS, err := tlsconfig.Dial(cfg.TLSDir)
	if err != nil {
		return fmt.Errorf("--%s: %w", contract.FlagTLSDir, err)
	}
	// opened is the store once OpenStore returns, for the offload's
	// callbacks, which a region's first compaction may call before then.
	var opened atomic.Pointer[server.Store]
	exec, err := newOffloadExecutor(cfg, modes, workers, bucket, cache, dialTLS, reg, log, &opened)
	if err != nil {
		return err
	}
	defer exec.Close()
	clock := hlc.New(hlc.Offset(cfg.TestClockOffset), cfg.MaxClockOffset)
	clockCheck := server.NewClockCheck(clock, log, reg)
	m := server.NewMetrics(reg)
	srv, err := listen(cfg, log, m, live, clockCheck)
	if err != nil {
		return err
	}
	store, err := server.OpenStore(ctx, spans, storeOptions(cfg, regionOptions(cfg, modes, bucket, cache, exec, clock, log), &regionMap, ordinal, live))
	if err != nil {
		return err
	}
	opened.Store(store)
	h := startHandover(ctx, cfg, store, own.assigner, log)
	defer h.release()
	srv.BeforeStop = h.release
	log.Info("serving", "regions", len(spans), "recovery", store.Recovered(), "offload", modes.offload, "workers", workers.Compactors(), "bucket", cfg.Bucket)
	server.RegisterStoreGauges(reg, store, cache)
	if live != nil {
		server.RegisterLivenessMetrics(reg, live)
	}
	var fwd *server.Forwarding
	if peers != nil {
		router := route.New(route.Options{Peers: peers, Logger: log, MaxRecvMessageBytes: contract.MaxMessageBytes, DialOption: dialTLS})
		defer router.Close()
		go router.Run(ctx)
		clockCheck.Prime(ctx, router)
		go clockCheck.Run(ctx, router, contract.DefaultClockCheckInterval)
		fwd = &server.Forwarding{Spans: allSpans, Router: router}
		log.Info("forwarding requests for other stores' regions", "peers", peers())
	}
	kv := server.NewKV(store, fwd, m)
	startBalancer(ctx, cfg, kv, own, reg)
	kvpb.RegisterKVServer(srv.GRPC, kv)
	kvpb.RegisterAdminServer(srv.GRPC, kv)
	return srv.Run(ctx, "store", health.Mux(reg, h.ready, nil), out)
}

// ownership is how this store learns which regions are its own: an
// assigner following the replica count (--replicas-from, or a fixed count
// above 1, set once the region map is known), else a fixed owner slice.
type ownership struct {
	assigner *server.Assigner
	owner    server.Owner
	// serving is how many stores stay during a scale-down's drain (the
	// operator's mark on the StatefulSet); nil without --replicas-from.
	serving func() (int, bool)
}

func ownershipOf(ctx context.Context, cfg Config, kube *kubeConfig, peerSlices *discovery.EndpointSlices, all []server.Span, log *slog.Logger) (*ownership, error) {
	o := &ownership{}
	var err error
	if cfg.ReplicasFrom != "" {
		o.assigner, o.serving, err = replicaAssigner(ctx, cfg, kube, peerSlices, all, log)
	} else {
		o.owner, err = server.ParseOwner(cfg.RegionOwner)
	}
	return o, err
}

// place is the regions this store opens first among all (the region map's
// spans), and its ordinal when an assigner follows the map's owners.
func (o *ownership) place(cfg Config, all []server.Span) ([]server.Span, *int) {
	if o.assigner == nil && o.owner.Replicas > 1 {
		// A fixed replica count still follows the map's owners: the
		// balancer moves regions between the stores.
		n := o.owner.Replicas
		o.assigner = &server.Assigner{Ordinal: o.owner.Ordinal, Replicas: func() (int, bool) { return n, true },
			Interval: cfg.ReleasePollInterval, ReleaseTimeout: cfg.ReleaseTimeout, Store: &server.Store{}}
	}
	if o.assigner == nil {
		return o.owner.Owned(all), nil
	}
	o.assigner.Spans = all
	spans, _ := o.assigner.Target()
	return spans, &o.assigner.Ordinal
}

// engineModes are the engine's modes as this store runs them: the
// configured ones, with offload turned off where it cannot run.
type engineModes struct {
	offload offload.Mode
	warmup  region.WarmupMode
	// keepOutput asks a worker to keep a compaction's output, for the
	// warmup modes that stream it from there.
	keepOutput  bool
	wal         wal.Mode
	walInBucket bool
}

func engineModesOf(cfg Config, log *slog.Logger) (engineModes, error) {
	var m engineModes
	var err error
	if m.offload, err = offload.ParseMode(string(cfg.Engine.Offload)); err != nil {
		return m, err
	}
	if cfg.CompactorService == "" && len(cfg.Compactors) == 0 && m.offload == offload.Preferred {
		// Nowhere to offload to: compact here, and say so once.
		log.Info("no compactors given: compactions run in this store", "offload", m.offload)
		m.offload = offload.Disabled
	}
	if m.warmup, err = region.ParseWarmupMode(string(cfg.Engine.Warmup.Mode)); err != nil {
		return m, fmt.Errorf("engine.yaml warmup.mode: %w", err)
	}
	if mode := cfg.Engine.Warmup.Mode; mode.RunsLocally() && m.offload != offload.Disabled {
		// WriteThrough caches what this store writes: it compacts here.
		log.Info("warmup mode compacts in this store: offload is off", "warmup", mode, "offload", m.offload)
		m.offload = offload.Disabled
	}
	m.keepOutput = cfg.Engine.Warmup.Mode.TransfersOutput() && m.offload != offload.Disabled
	if m.wal, err = wal.ParseMode(string(cfg.Engine.SyncMode)); err != nil {
		return m, fmt.Errorf("engine.yaml syncMode: %w", err)
	}
	m.walInBucket = cfg.Durability == contract.DurabilityBucket
	if m.walInBucket {
		// The bucket's copy is what the ack waits for; an fsync of the
		// local copy per group would only add its latency.
		m.wal = wal.ModeAsync
	}
	return m, nil
}

// compactorDiscovery is where the compaction workers are: in Kubernetes
// (the operator passes --compactor-service) the ready endpoints of the
// pool's Service, else the --compactors given.
func compactorDiscovery(ctx context.Context, cfg Config, kube *kubeConfig, log *slog.Logger) (offload.Discovery, error) {
	if cfg.CompactorService == "" {
		return offload.Static(cfg.Compactors), nil
	}
	es, err := watchService(ctx, kube, contract.FlagCompactorService, cfg.CompactorService)
	if err != nil {
		return nil, err
	}
	log.Info("discovering compactors from EndpointSlices", "service", cfg.CompactorService, "now", es.Compactors())
	return es, nil
}

// openBucket opens the cluster's bucket once it answers (within
// contract.BucketStartupWait), is marked as this cluster's and honours
// create-if-absent writes, which every fencing rule relies on.
func openBucket(ctx context.Context, cfg Config, log *slog.Logger) (_ *blob.Bucket, err error) {
	if err := refuseMissingFileBucket(cfg.Bucket, cfg.CreateBucket); err != nil {
		return nil, err
	}
	bucket, err := blob.Open(ctx, cfg.Bucket)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			_ = bucket.Close()
		}
	}()
	began := time.Now()
	if err := awaitBucket(ctx, bucket, cfg.Bucket, contract.BucketStartupWait, func(err error, next time.Duration) {
		log.Warn("the bucket does not answer: waiting for it", "bucket", cfg.Bucket, "err", oneLine(err),
			"next-try-in", next.Round(time.Millisecond), "waited", time.Since(began).Round(time.Second), "gives-up-after", contract.BucketStartupWait)
	}); err != nil {
		return nil, err
	}
	if err := ensureBucketMarker(ctx, bucket, cfg.Bucket, cfg.CreateBucket); err != nil {
		return nil, err
	}
	if err := probeCreateIfAbsent(ctx, bucket, cfg.Bucket); err != nil {
		return nil, err
	}
	return bucket, nil
}

// newOffloadExecutor runs the store's compactions: on the workers, or here
// as modes say. opened is the store once it is open, which the executor's
// placement asks about.
func newOffloadExecutor(cfg Config, modes engineModes, workers offload.Discovery, bucket *blob.Bucket, cache *blockcache.Cache,
	dialTLS grpc.DialOption, reg *prometheus.Registry, log *slog.Logger, opened *atomic.Pointer[server.Store]) (*offload.Executor, error) {
	walDir, err := filepath.Abs(cfg.WALDir)
	if err != nil {
		return nil, err
	}
	return offload.New(offload.Options{
		DialOptions: []grpc.DialOption{dialTLS},
		Mode:        modes.offload, Workers: workers, BucketURL: cfg.Bucket, KeepOutput: modes.keepOutput,
		// The WAL directory is this store's across restarts (and locked by
		// one process at a time); the host tells apart stores on machines
		// with the same layout.
		Store:              hostname() + ":" + walDir,
		RemoteBlockTimeout: cfg.RemoteBlockTimeout, RemoteBlockRetryAfter: cfg.RemoteBlockRetryAfter,
		RemoteCacheRate: int64(cfg.RemoteCacheRate),
		Local:           localExecutor(modes.warmup, bucket, cache), Logger: log, Registerer: reg,
		InputBytes: func(j compaction.Job) int64 {
			if s := opened.Load(); s != nil {
				return s.JobInputBytes(j)
			}
			return 0
		},
		Regions: func() []string {
			if s := opened.Load(); s != nil {
				return s.PlacementRegions()
			}
			return nil
		},
	})
}

// regionOptions are every region's options from the engine settings.
func regionOptions(cfg Config, modes engineModes, bucket *blob.Bucket, cache *blockcache.Cache, exec compaction.Executor, clock *hlc.Clock, log *slog.Logger) region.Options {
	e := cfg.Engine
	return region.Options{
		Bucket: bucket, WALMode: modes.wal, MemstoreBytes: e.Memstore.Bytes, BlockCache: cache, CacheFlushes: e.BlockCacheOnFlush,
		Memstore: region.MemstoreOptions{Policy: memstore.Policy(e.Memstore.Policy), ActiveFraction: e.Memstore.ActiveFraction,
			PipelineSegments: e.Memstore.PipelineSegments, RedundancyThreshold: e.Memstore.RedundancyThreshold},
		MaxWALBytes: e.Memstore.MaxWALBytes,
		Retention:   compaction.Retention{MaxVersions: e.Retention.MaxVersions, GCTTL: e.Retention.GCTTL.Duration},
		Executor:    exec, Owner: fmt.Sprintf("%s pid %d", hostname(), os.Getpid()), Logger: log,
		Clock:  clock,
		Warmup: modes.warmup, WarmupRateBytes: e.Warmup.RateBytesPerSecond,
		Compaction: compaction.Policy{MinFiles: e.Compaction.MinFiles, MaxFiles: e.Compaction.MaxFiles,
			Ratio: e.Compaction.Ratio, MaxBytes: e.Compaction.MaxBytes},
		ForceTakeover: cfg.ForceTakeover, OwnershipCheckInterval: cfg.OwnershipCheckInterval,
		WALArchiveInterval: cfg.WALArchiveInterval, WALInBucket: modes.walInBucket,
		// The limits clients check before sending (contract), so what a
		// client lets through a store accepts.
		MaxValueSize: contract.MaxValueBytes, MaxBatchBytes: contract.MaxBatchBytes,
	}
}

// storeOptions are the store's options: its regions', the region map's,
// and the split, merge, transaction and liveness settings.
func storeOptions(cfg Config, base region.Options, regionMap *regionmap.Map, ordinal *int, live *server.Liveness) server.StoreOptions {
	e := cfg.Engine
	return server.StoreOptions{WALRoot: cfg.WALDir, Region: base,
		ReleasePollInterval: cfg.ReleasePollInterval, TxnLockTTL: cfg.TxnLockTTL, TxnTimeout: cfg.TxnTimeout,
		MaxWALAge: e.Memstore.MaxWALAge.Duration, MaxStoreWALBytes: e.Memstore.MaxStoreWALBytes,
		Map: regionMap, SplitBytes: cfg.SplitBytes, SplitQPS: cfg.SplitQPS, Ordinal: ordinal,
		MergeBytes: cfg.MergeBytes, MergeAfter: cfg.MergeAfter, LoadWindow: cfg.LoadWindow, Liveness: live}
}

// listen opens the store's gRPC and metrics listeners, with the
// interceptors in their order: metrics, authorization, the liveness lease,
// the clock check.
func listen(cfg Config, log *slog.Logger, m *server.Metrics, live *server.Liveness, clockCheck *server.ClockCheck) (*serve.Servers, error) {
	serverOpts, unaryAuthz, streamAuthz, err := authentication(cfg, log)
	if err != nil {
		return nil, err
	}
	var keeper *liveness.Keeper
	if live != nil {
		keeper = live.Keeper
	}
	unaryLease, streamLease := server.LeaseInterceptors(keeper)
	srv, err := serve.Listen(cfg.Listen, cfg.MetricsListen, log, append(serverOpts,
		grpc.ChainUnaryInterceptor(m.UnaryInterceptor, unaryAuthz, unaryLease, clockCheck.UnaryInterceptor),
		grpc.ChainStreamInterceptor(m.StreamInterceptor, streamAuthz, streamLease, clockCheck.StreamInterceptor))...)
	if err != nil {
		return nil, err
	}
	if cfg.TLSDir != "" {
		if srv.HTTPTLS, err = tlsconfig.HTTPServer(cfg.TLSDir); err != nil {
			return nil, fmt.Errorf("--%s: %w", contract.FlagTLSDir, err)
		}
	}
	return srv, nil
}

// handover hands the store's regions over, so a store that is assigned
// them next (a rollout, a scale change) claims them with every
// acknowledged write. release runs once: when serving stops (the server's
// BeforeStop, while gRPC still answers), or on the way out if Run returns
// before that.
type handover struct {
	release  func()
	stopping atomic.Bool
}

// startHandover re-assigns the running store on every replica change (when
// an assigner follows them), until the release.
func startHandover(ctx context.Context, cfg Config, store *server.Store, assigner *server.Assigner, log *slog.Logger) *handover {
	h := &handover{}
	stopAssigner := func() {}
	if assigner != nil {
		actx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		assigner.Store = store
		go func() { defer close(done); assigner.Run(actx) }()
		stopAssigner = func() { cancel(); <-done }
	}
	var once sync.Once
	h.release = func() {
		once.Do(func() {
			h.stopping.Store(true)
			stopAssigner()
			began := time.Now()
			rctx, cancel := context.WithTimeout(context.Background(), cfg.ReleaseTimeout)
			defer cancel()
			if err := store.Release(rctx); err != nil {
				log.Error("releasing regions; they stay owned by this store's WAL", "err", err)
				return
			}
			log.Info("released regions", "took", time.Since(began))
		})
	}
	return h
}

// ready fails once the handover began: /readyz then takes the store out of
// its Service.
func (h *handover) ready() error {
	if h.stopping.Load() {
		return errors.New("shutting down: the regions are being handed over")
	}
	return nil
}

// startBalancer runs the balancer (when an assigner follows the map's
// owners and --balance-interval is set): only the holder of its lease in
// the bucket plans.
func startBalancer(ctx context.Context, cfg Config, kv *server.KV, own *ownership, reg *prometheus.Registry) {
	if own.assigner == nil || cfg.BalanceInterval <= 0 {
		return
	}
	bal := &server.Balancer{KV: kv, Ordinal: own.assigner.Ordinal, Stores: own.assigner.Replicas, Serving: own.serving,
		MaxMovesInFlight: cfg.MaxMovesInFlight, Interval: cfg.BalanceInterval, MaxClockOffset: cfg.MaxClockOffset,
		MergeBytes: cfg.MergeBytes, MergeQPS: cfg.SplitQPS / 4, MergeAfter: cfg.MergeAfter, MinBytes: cfg.BalanceMinBytes, MinQPS: contract.DefaultBalanceMinQPS}
	if cfg.MergeBytes > 0 {
		bal.RecutTolerance = cfg.RecutTolerance // a re-cut merges first
	}
	server.RegisterBalancerMetrics(reg, bal)
	go bal.Run(ctx)
}

// peerList is where the other stores are (--peers, --peer-service), nil
// when neither is set (no forwarding); with --peer-service also the
// headless Service's EndpointSlices.
func peerList(ctx context.Context, cfg Config, kube *kubeConfig) (func() []string, *discovery.EndpointSlices, error) {
	if len(cfg.Peers) > 0 {
		static := cfg.Peers
		return func() []string { return static }, nil, nil
	}
	if cfg.PeerService == "" {
		return nil, nil, nil
	}
	// The headless Service's "grpc" port; its endpoints include this pod,
	// which the router recognises by its identity.
	es, err := watchService(ctx, kube, contract.FlagPeerService, cfg.PeerService)
	if err != nil {
		return nil, nil, err
	}
	return es.Endpoints, es, nil
}

// replicaAssigner follows --replicas-from: the StatefulSet's spec.replicas
// is the replica count, and a region is handed to a new owner only once
// that pod (<statefulset>-<ordinal>) is a ready endpoint of the headless
// Service (--peer-service). Its Store is set once the store is open. The
// serving count (the operator's drain mark) comes from the same watch.
func replicaAssigner(ctx context.Context, cfg Config, kube *kubeConfig, peers *discovery.EndpointSlices, all []server.Span, log *slog.Logger) (*server.Assigner, func() (int, bool), error) {
	ordinal, err := cfg.Ordinal()
	if err != nil {
		return nil, nil, err
	}
	ns, name, err := discovery.ParseService(cfg.ReplicasFrom)
	if err != nil {
		return nil, nil, fmt.Errorf("--%s: %w", contract.FlagReplicasFrom, err)
	}
	kcfg, err := kube.get()
	if err != nil {
		return nil, nil, fmt.Errorf("--%s: no Kubernetes API access: %w", contract.FlagReplicasFrom, err)
	}
	sts, err := discovery.StartStatefulSetReplicas(ctx, kcfg, ns, name)
	if err != nil {
		return nil, nil, fmt.Errorf("--%s: %w", contract.FlagReplicasFrom, err)
	}
	sts.Log = log
	n, ok := sts.Replicas()
	if !ok {
		return nil, nil, fmt.Errorf("--%s: StatefulSet %s/%s not found", contract.FlagReplicasFrom, ns, name)
	}
	a := &server.Assigner{Spans: all, Ordinal: ordinal, Replicas: sts.Replicas,
		Interval: cfg.ReleasePollInterval, ReleaseTimeout: cfg.ReleaseTimeout}
	if peers != nil {
		a.Ready = readyOrdinals(name, peers.ReadyHostnames)
	} else {
		log.Warn("no --peer-service: regions are released to their new owner on a replica change without waiting for it to be ready", "replicas-from", cfg.ReplicasFrom)
	}
	// Until the store is open, Target sees an empty one: no holds.
	a.Store = &server.Store{}
	log.Info("following the replica count", "statefulset", cfg.ReplicasFrom, "ordinal", ordinal, "replicas", n)
	return a, sts.Serving, nil
}

// watchService follows the ready endpoints of a Service's "grpc" port.
func watchService(ctx context.Context, kube *kubeConfig, flag, service string) (*discovery.EndpointSlices, error) {
	ns, name, err := discovery.ParseService(service)
	if err != nil {
		return nil, fmt.Errorf("--%s: %w", flag, err)
	}
	kcfg, err := kube.get()
	if err != nil {
		return nil, fmt.Errorf("--%s: no Kubernetes API access: %w", flag, err)
	}
	es, err := discovery.StartEndpointSlices(ctx, kcfg, ns, name, contract.PortNameGRPC)
	if err != nil {
		return nil, fmt.Errorf("--%s: %w", flag, err)
	}
	return es, nil
}

// kubeConfig loads the Kubernetes client configuration once, when the first
// discovery needs it (the in-cluster ServiceAccount in a pod).
type kubeConfig struct {
	once sync.Once
	cfg  *rest.Config
	err  error
}

func (k *kubeConfig) get() (*rest.Config, error) {
	k.once.Do(func() {
		k.cfg, k.err = clientcmd.NewNonInteractiveDeferredLoadingClientConfig(clientcmd.NewDefaultClientConfigLoadingRules(), nil).ClientConfig()
	})
	return k.cfg, k.err
}

// readyOrdinals says whether the StatefulSet sts's pod with an ordinal is
// among hostnames (the pod names of the ready endpoints).
func readyOrdinals(sts string, hostnames func() []string) func(ordinal int) bool {
	return func(ord int) bool { return slices.Contains(hostnames(), fmt.Sprintf("%s-%d", sts, ord)) }
}

func hostname() string {
	h, _ := os.Hostname()
	return h
}

// localExecutor runs this store's local compactions: in WriteThrough mode
// it caches each output block in the store's block cache as it is written.
func localExecutor(warmup region.WarmupMode, bucket *blob.Bucket, cache *blockcache.Cache) compaction.Executor {
	if warmup == region.WarmupWriteThrough {
		return region.WriteThroughExecutor{Bucket: bucket, Cache: cache}
	}
	return compaction.Local{Bucket: bucket}
}

// startLiveness takes this store's liveness lease (docs/failover.md §3): it
// waits until a previous incarnation's lease has run out, renews once, and
// keeps renewing in the background. When a renewal finds the lease fenced
// (the cluster failed this store over), it ends the run through stop.
func startLiveness(ctx context.Context, stop context.CancelCauseFunc, bucket *blob.Bucket, ordinal int, maxOffset time.Duration, log *slog.Logger) (*server.Liveness, error) {
	store := strconv.Itoa(ordinal)
	var id [8]byte
	if _, err := rand.Read(id[:]); err != nil {
		return nil, err
	}
	incarnation := hex.EncodeToString(id[:])
	prev, err := liveness.AwaitPredecessor(ctx, bucket, store, incarnation, maxOffset, nil)
	if err != nil {
		return nil, fmt.Errorf("waiting for this store's previous liveness lease to run out: %w", err)
	}
	keeper := liveness.NewKeeper(bucket, store, incarnation, 0, 0, maxOffset, nil)
	rec, err := keeper.Renew(ctx)
	if err != nil {
		return nil, fmt.Errorf("taking this store's liveness lease: %w", err)
	}
	log.Info("took the liveness lease", "store", store, "incarnation", incarnation, "record", rec.K, "previous", prev.String())
	go func() {
		_ = keeper.Run(ctx, func(err error) { log.Warn("renewing the liveness lease", "err", err) })
	}()
	go func() {
		select {
		case <-ctx.Done():
		case <-keeper.Fenced():
			log.Error("this store's liveness lease was fenced: the cluster failed its regions over to other stores; stopping, to start again as a new incarnation")
			stop(fmt.Errorf("%w: store %s, incarnation %s", liveness.ErrFenced, store, incarnation))
		}
	}()
	return &server.Liveness{Keeper: keeper, Store: store, Incarnation: incarnation, Bucket: bucket, MaxOffset: maxOffset}, nil
}
