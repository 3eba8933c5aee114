// Package compactor is the composition root of `bellows compactor`, a
// compaction worker. The CLI only binds flags to Config.
package compactor

import (
	"context"
	"errors"
	"fmt"
	"google.golang.org/grpc"
	"io"
	"log/slog"
	"net/http"
	"os"
	"time"

	"github.com/bellows-kv/bellows/cmd/bellows/serve"
	"github.com/bellows-kv/bellows/internal/contract"
	"github.com/bellows-kv/bellows/internal/tlsconfig"
	compactionpb "github.com/bellows-kv/bellows/proto/bellows/compaction/v1"
	"github.com/bellows-kv/bellows/storage-engine/compactor"
	"github.com/bellows-kv/bellows/storage-engine/health"
)

// Config is everything a worker runs with.
type Config struct {
	Listen, MetricsListen string
	// TLSDir, when set, serves mutual TLS from it (internal/tlsconfig).
	TLSDir string
	// CacheBytes is m: memory for running jobs and kept output blocks.
	CacheBytes int64
	// TransferRate is w: bytes per second FetchBlocks sends per stream (0: unlimited).
	TransferRate float64
	// LinkLatency is a modelled network latency FetchBlocks waits before
	// each stream's first block (benchmarks; 0: none).
	LinkLatency time.Duration
	// CompactionRateLimit bounds the bytes per second all jobs read from
	// the bucket together (0: unlimited).
	CompactionRateLimit float64
	// DrainTimeout is how long GET /drain waits for in-flight jobs.
	DrainTimeout time.Duration
	// OutputTTL drops a kept output nobody released after this long.
	OutputTTL time.Duration
	// Name is the worker's name in logs and errors; empty is the host name.
	Name string
}

// Default is a worker's configuration before flags.
func Default() Config {
	return Config{
		Listen:        fmt.Sprintf(":%d", contract.CompactorGRPCPort),
		MetricsListen: fmt.Sprintf(":%d", contract.MetricsPort),
		CacheBytes:    contract.DefaultWorkerCacheBytes,
		TransferRate:  float64(contract.DefaultTransferRate),
		DrainTimeout:  contract.DefaultDrainTimeout,
		OutputTTL:     contract.DefaultOutputTTL,
	}
}

// Validate reports every problem, each naming its flag.
func (c Config) Validate() error {
	var errs []error
	flag := func(name, format string, args ...any) {
		errs = append(errs, fmt.Errorf("--%s: "+format, append([]any{name}, args...)...))
	}
	if c.CacheBytes <= 0 {
		flag(contract.FlagCacheBytes, "%d must be positive, e.g. 6GiB", c.CacheBytes)
	}
	if c.TransferRate < 0 {
		flag(contract.FlagTransferRate, "%v is negative", c.TransferRate)
	}
	if c.LinkLatency < 0 {
		flag(contract.FlagLinkLatency, "%v is negative", c.LinkLatency)
	}
	if c.CompactionRateLimit < 0 {
		flag(contract.FlagCompactionRateLimit, "%v is negative", c.CompactionRateLimit)
	}
	if c.DrainTimeout <= 0 {
		flag(contract.FlagDrainTimeout, "%v must be positive", c.DrainTimeout)
	}
	if c.OutputTTL <= 0 {
		flag(contract.FlagOutputTTL, "%v must be positive", c.OutputTTL)
	}
	return errors.Join(errs...)
}

// Run serves the worker until ctx ends or a signal arrives. cfg must have
// passed Validate. The ready line goes to out.
func Run(ctx context.Context, cfg Config, log *slog.Logger, out io.Writer) error {
	if cfg.Name == "" {
		cfg.Name, _ = os.Hostname()
	}
	reg := health.NewRegistry()
	worker := compactor.New(compactor.Options{
		Name: cfg.Name, CacheBytes: cfg.CacheBytes, TransferRate: cfg.TransferRate, LinkLatency: cfg.LinkLatency, CompactionRateLimit: cfg.CompactionRateLimit,
		OutputTTL: cfg.OutputTTL, Logger: log, Registerer: reg,
	})
	defer worker.Close()
	var serverOpts []grpc.ServerOption
	if cfg.TLSDir != "" {
		opt, err := tlsconfig.Server(cfg.TLSDir)
		if err != nil {
			return fmt.Errorf("--%s: %w", contract.FlagTLSDir, err)
		}
		// Only stores (node certificates) may hand a worker jobs or
		// fetch its blocks.
		unary, stream := tlsconfig.Authorize(func(string) tlsconfig.Role { return tlsconfig.Node })
		serverOpts = append(serverOpts, opt, grpc.ChainUnaryInterceptor(unary), grpc.ChainStreamInterceptor(stream))
	}
	srv, err := serve.Listen(cfg.Listen, cfg.MetricsListen, log, serverOpts...)
	if err != nil {
		return err
	}
	if cfg.TLSDir != "" {
		if srv.HTTPTLS, err = tlsconfig.HTTPServer(cfg.TLSDir); err != nil {
			return fmt.Errorf("--%s: %w", contract.FlagTLSDir, err)
		}
	}
	compactionpb.RegisterCompactorServer(srv.GRPC, worker)
	// A drained worker must not be cut off by the shutdown below: the
	// pod's grace period is sized the same way.
	srv.Shutdown = contract.WorkerGracePeriod(cfg.DrainTimeout)
	mux := health.Mux(reg, func() error {
		if worker.Draining() {
			return errors.New("draining")
		}
		return nil
	}, map[string]http.Handler{contract.PathDrain: drainHandler(worker, cfg.DrainTimeout)})
	return srv.Run(ctx, "compactor", mux, out)
}

// drainHandler is the operator's preStop hook: stop accepting jobs, wait for
// the running ones and for the outputs stores still stream (up to the
// timeout), then answer 200 either way so the pod's shutdown proceeds.
func drainHandler(w *compactor.Worker, timeout time.Duration) http.Handler {
	return http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), timeout)
		defer cancel()
		if w.Drain(ctx) {
			fmt.Fprintln(rw, "drained: no jobs running, no outputs kept or streaming")
			return
		}
		fmt.Fprintln(rw, "drain timeout: jobs running or outputs kept or streaming")
	})
}
