package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/bellows-kv/bellows/internal/discovery"
	"github.com/bellows-kv/bellows/internal/engineconfig"
	kvpb "github.com/bellows-kv/bellows/proto/bellows/kv/v1"
	"github.com/bellows-kv/bellows/storage-engine/blob"
	"github.com/bellows-kv/bellows/storage-engine/blockcache"
	"github.com/bellows-kv/bellows/storage-engine/compaction"
	"github.com/bellows-kv/bellows/storage-engine/health"
	"github.com/bellows-kv/bellows/storage-engine/offload"
	"github.com/bellows-kv/bellows/storage-engine/region"
	"github.com/bellows-kv/bellows/storage-engine/server"
	"github.com/bellows-kv/bellows/storage-engine/server/route"
	"github.com/bellows-kv/bellows/storage-engine/wal"
)

type storeFlags struct {
	listen, metricsListen, bucket, walDir, config string
	regions                                       int
	splitKeys, regionOwner                        string
	compactors, compactorService, offloadMode     string
	peers, peerService                            string
	forceTakeover                                 bool
	ownershipCheck, releaseTimeout                time.Duration
}

func newStoreCommand() *cobra.Command {
	var o storeFlags
	cmd := &cobra.Command{
		Use:   "store",
		Short: "Run a storage pod: serve regions over gRPC (bellows.kv.v1.KV), offload their compactions",
		Args:  cobra.NoArgs,
		RunE:  func(cmd *cobra.Command, _ []string) error { return runStore(cmd, o) },
	}
	f := cmd.Flags()
	f.StringVar(&o.listen, "listen", ":7400", "gRPC address")
	f.StringVar(&o.metricsListen, "metrics-listen", ":9090", "HTTP address of /metrics, /healthz and /readyz")
	f.StringVar(&o.bucket, "bucket", "", "bucket URL of region files and manifests (file://, s3://, gs://, azblob://)")
	f.StringVar(&o.walDir, "wal-dir", "", "local directory for the regions' WALs")
	f.StringVar(&o.config, "config", "", "engine settings file (engine.yaml); default settings if empty")
	f.IntVar(&o.regions, "regions", 1, "split the key space evenly by first byte into this many regions")
	f.StringVar(&o.splitKeys, "split-keys", "", "split the key space at these keys instead, e.g. g,p")
	f.StringVar(&o.regionOwner, "region-owner", "", "ORDINAL/REPLICAS: serve region i when i mod REPLICAS = ORDINAL (default all)")
	f.StringVar(&o.compactors, "compactors", "", "compaction workers, host:port,...")
	f.StringVar(&o.compactorService, "compactor-service", "", "NAMESPACE/NAME of the workers' Service (the ready endpoints of its EndpointSlices; needs list/watch on endpointslices)")
	f.StringVar(&o.offloadMode, "offload", "", "Required, Preferred or Disabled; overrides engine.yaml")
	f.StringVar(&o.peers, "peers", "", "the stores of the cluster, host:port,... (this one may be listed): requests for their regions are forwarded to them")
	f.StringVar(&o.peerService, "peer-service", "", "NAMESPACE/NAME of the stores' headless Service: the peers are its EndpointSlices' endpoints (needs list/watch on endpointslices)")
	f.BoolVar(&o.forceTakeover, "force-takeover", false,
		"claim assigned regions even if another store owns them and has not released them, forfeiting the writes it acknowledged but did not flush (use only when that store's WAL volume is gone)")
	f.DurationVar(&o.ownershipCheck, "ownership-check-interval", 5*time.Second,
		"how often each region checks the bucket for a newer owner, so a store whose region was forcibly taken over stops acknowledging writes; 0 checks only at its own manifest commits")
	f.DurationVar(&o.releaseTimeout, "release-timeout", 80*time.Second,
		"on SIGTERM, after serving stops (at most 30s), how long to spend flushing and releasing the regions; a region not released in time stays owned by this store's WAL (the operator's grace period is 120s)")
	_ = cmd.MarkFlagRequired("bucket")
	_ = cmd.MarkFlagRequired("wal-dir")
	cmd.MarkFlagsMutuallyExclusive("regions", "split-keys")
	cmd.MarkFlagsMutuallyExclusive("peers", "peer-service")
	return cmd
}

func loadEngineConfig(path string) (engineconfig.Config, error) {
	if path == "" {
		return engineconfig.Config{}, nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return engineconfig.Config{}, fmt.Errorf("--config: %w", err)
	}
	return engineconfig.Unmarshal(data)
}

func runStore(cmd *cobra.Command, o storeFlags) error {
	ctx := cmd.Context()
	log := newLogger(cmd.ErrOrStderr(), "store")
	cfg, err := loadEngineConfig(o.config)
	if err != nil {
		return err
	}
	var spans []server.Span
	if o.splitKeys != "" {
		spans, err = server.SplitAt(strings.Split(o.splitKeys, ","))
	} else {
		spans, err = server.SplitEvenly(o.regions)
	}
	if err != nil {
		return err
	}
	owner, err := server.ParseOwner(o.regionOwner)
	if err != nil {
		return err
	}
	allSpans := spans
	spans = owner.Owned(spans)
	peers, err := peerList(ctx, o)
	if err != nil {
		return err
	}

	mode := cfg.Offload
	if o.offloadMode != "" {
		mode = o.offloadMode
	}
	offMode, err := offload.ParseMode(mode)
	if err != nil {
		return err
	}
	var workers offload.Discovery = offload.ParseStatic(o.compactors)
	if o.compactorService != "" && len(offload.ParseStatic(o.compactors)) == 0 {
		// In Kubernetes (the operator passes --compactor-service) workers
		// are the ready endpoints of the pool's Service.
		ns, name, err := discovery.ParseService(o.compactorService)
		if err != nil {
			return fmt.Errorf("--compactor-service: %w", err)
		}
		kcfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(clientcmd.NewDefaultClientConfigLoadingRules(), nil).ClientConfig()
		if err != nil {
			return fmt.Errorf("--compactor-service: no Kubernetes API access: %w", err)
		}
		es, err := discovery.StartEndpointSlices(ctx, kcfg, ns, name, "grpc")
		if err != nil {
			return fmt.Errorf("--compactor-service: %w", err)
		}
		workers = es
		log.Info("discovering compactors from EndpointSlices", "service", o.compactorService, "now", es.Compactors())
	} else if len(offload.ParseStatic(o.compactors)) == 0 && offMode != offload.Disabled {
		if offMode == offload.Required {
			return errors.New("offload mode Required needs workers: pass --compactors")
		}
		offMode = offload.Disabled
	}
	if p := cfg.Memstore.Policy; p != "" && p != "None" {
		// Accepted so that KVClusters written for it stay valid; say so
		// rather than pretend.
		log.Warn("engine.yaml memstore.policy: the Accordion compacting memstore is not built yet; this store runs the plain skiplist memstore (None)", "policy", p)
	}
	warmup := region.WarmupNone
	if cfg.Warmup.Mode != "" {
		if warmup, err = region.ParseWarmupMode(cfg.Warmup.Mode); err != nil {
			return fmt.Errorf("engine.yaml warmup.mode: %w", err)
		}
	}
	if warmup == region.WarmupThrottledIncremental && cfg.Warmup.RateBytesPerSecond <= 0 {
		return errors.New("engine.yaml warmup: mode ThrottledIncremental needs a positive rateBytesPerSecond")
	}
	// Modes past Offload read the worker's copy of the output.
	keepOutput := warmup > region.WarmupOffload && offMode != offload.Disabled

	walMode, err := wal.ParseMode(cfg.SyncMode)
	if err != nil {
		return fmt.Errorf("engine.yaml syncMode: %w", err)
	}
	bucket, err := blob.Open(ctx, o.bucket)
	if err != nil {
		return err
	}
	defer bucket.Close()
	cacheBytes := cfg.BlockCacheBytes
	if cacheBytes <= 0 {
		cacheBytes = 256 << 20
	}
	cache := blockcache.New(cacheBytes)
	reg := health.NewRegistry()

	var store *server.Store
	exec, err := offload.New(offload.Options{
		Mode: offMode, Workers: workers, BucketURL: o.bucket, KeepOutput: keepOutput,
		Local: compaction.Local{Bucket: bucket}, Logger: log, Registerer: reg,
		InputBytes: func(j compaction.Job) int64 { return jobInputBytes(store, j) },
	})
	if err != nil {
		return err
	}
	defer exec.Close()
	base := region.Options{
		Bucket: bucket, WALMode: walMode, MemstoreBytes: cfg.Memstore.Bytes, BlockCache: cache,
		Executor: exec, Owner: fmt.Sprintf("%s pid %d", hostname(), os.Getpid()), Logger: log,
		Warmup: warmup, WarmupRateBytes: cfg.Warmup.RateBytesPerSecond,
		ForceTakeover: o.forceTakeover, OwnershipCheckInterval: o.ownershipCheck,
	}
	if cfg.Compaction != (engineconfig.Compaction{}) {
		base.Compaction = compaction.Policy{MinFiles: cfg.Compaction.MinFiles, MaxFiles: cfg.Compaction.MaxFiles,
			Ratio: cfg.Compaction.Ratio, MaxBytes: cfg.Compaction.MaxBytes}
	}
	m := server.NewMetrics(reg)
	srv, err := listen(o.listen, o.metricsListen, log,
		grpc.ChainUnaryInterceptor(m.UnaryInterceptor), grpc.ChainStreamInterceptor(m.StreamInterceptor))
	if err != nil {
		return err
	}
	store, err = server.OpenStore(ctx, spans, server.StoreOptions{WALRoot: o.walDir, Region: base})
	if err != nil {
		return err
	}
	defer func() {
		// Serving has stopped: hand the regions over, so a store that is
		// assigned them next (a rollout, a scale change) claims them with
		// every acknowledged write.
		rctx, cancel := context.WithTimeout(context.Background(), o.releaseTimeout)
		defer cancel()
		if err := store.Release(rctx); err != nil {
			log.Error("releasing regions; they stay owned by this store's WAL", "err", err)
			return
		}
		log.Info("released regions")
	}()
	log.Info("serving", "regions", len(spans), "offload", offMode, "workers", workers.Compactors(), "bucket", o.bucket)
	server.RegisterStoreGauges(reg, store, cache)
	var fwd *server.Forwarding
	if peers != nil {
		router := route.New(route.Options{Peers: peers, Logger: log})
		defer router.Close()
		go router.Run(ctx)
		fwd = &server.Forwarding{Spans: allSpans, Router: router}
		log.Info("forwarding requests for other stores' regions", "peers", peers())
	}
	kv := server.NewKV(store, fwd, m)
	kvpb.RegisterKVServer(srv.grpc, kv)
	kvpb.RegisterAdminServer(srv.grpc, kv)
	mux := health.Mux(reg, func() error { return nil }, nil)
	return srv.run(ctx, "store", mux, cmd.OutOrStdout())
}

// peerList is where the other stores are (--peers, --peer-service), nil
// when neither is set (no forwarding).
func peerList(ctx context.Context, o storeFlags) (func() []string, error) {
	if o.peers != "" {
		static := strings.FieldsFunc(o.peers, func(r rune) bool { return r == ',' || r == ' ' })
		return func() []string { return static }, nil
	}
	if o.peerService == "" {
		return nil, nil
	}
	ns, name, err := discovery.ParseService(o.peerService)
	if err != nil {
		return nil, fmt.Errorf("--peer-service: %w", err)
	}
	kcfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(clientcmd.NewDefaultClientConfigLoadingRules(), nil).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("--peer-service: no Kubernetes API access: %w", err)
	}
	// The headless Service's "grpc" port; its endpoints include this pod,
	// which the router recognises by its identity.
	es, err := discovery.StartEndpointSlices(ctx, kcfg, ns, name, "grpc")
	if err != nil {
		return nil, fmt.Errorf("--peer-service: %w", err)
	}
	return es.Endpoints, nil
}

// jobInputBytes sizes a job from its region's manifest, without bucket calls.
func jobInputBytes(store *server.Store, j compaction.Job) int64 {
	if store == nil {
		return 0
	}
	r := store.ByName(j.Region)
	if r == nil {
		return 0
	}
	e, err := r.Engine()
	if err != nil {
		return 0
	}
	sizes := map[string]int64{}
	for _, f := range e.Manifest().Files {
		sizes["regions/"+j.Region+"/"+f.Key] = f.Size
	}
	var n int64
	for _, in := range j.Inputs {
		n += sizes[in]
	}
	return n
}

func hostname() string {
	h, _ := os.Hostname()
	return h
}
