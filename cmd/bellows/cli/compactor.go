package cli

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"time"

	"github.com/spf13/cobra"

	compactionpb "github.com/bellows-kv/bellows/proto/bellows/compaction/v1"
	"github.com/bellows-kv/bellows/storage-engine/compactor"
	"github.com/bellows-kv/bellows/storage-engine/health"
)

func newCompactorCommand() *cobra.Command {
	var listenAddr, metricsAddr, cacheBytes, transferRate, compactionRate, name string
	var drainTimeout, outputTTL time.Duration
	cmd := &cobra.Command{
		Use:   "compactor",
		Short: "Run a compaction worker (gRPC bellows.compaction.v1.Compactor)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cache, err := parseSize("cache-bytes", cacheBytes)
			if err != nil {
				return err
			}
			if cache <= 0 {
				return fmt.Errorf("--cache-bytes must be positive, e.g. 6GiB")
			}
			w, err := parseRate("transfer-rate", transferRate)
			if err != nil {
				return err
			}
			c, err := parseRate("compaction-rate-limit", compactionRate)
			if err != nil {
				return err
			}
			if name == "" {
				name, _ = os.Hostname()
			}
			log := newLogger(cmd.ErrOrStderr(), "compactor")
			reg := health.NewRegistry()
			worker := compactor.New(compactor.Options{
				Name: name, CacheBytes: cache, TransferRate: w, CompactionRateLimit: c,
				OutputTTL: outputTTL, Logger: log, Registerer: reg,
			})
			defer worker.Close()
			srv, err := listen(listenAddr, metricsAddr, log)
			if err != nil {
				return err
			}
			compactionpb.RegisterCompactorServer(srv.grpc, worker)
			// A drained worker must not be cut off by the shutdown below.
			srv.shutdown = drainTimeout + 30*time.Second
			mux := health.Mux(reg, func() error {
				if worker.Draining() {
					return fmt.Errorf("draining")
				}
				return nil
			}, map[string]http.Handler{"/drain": drainHandler(worker, drainTimeout)})
			return srv.run(cmd.Context(), "compactor", mux, cmd.OutOrStdout())
		},
	}
	f := cmd.Flags()
	f.StringVar(&listenAddr, "listen", ":7500", "gRPC address")
	f.StringVar(&metricsAddr, "metrics-listen", ":9090", "HTTP address of /metrics, /healthz, /readyz and /drain")
	f.StringVar(&cacheBytes, "cache-bytes", "6GiB", "m: memory for running jobs and kept output blocks")
	f.StringVar(&transferRate, "transfer-rate", "8MB/s", "w: bytes per second FetchBlocks sends per stream (0: unlimited)")
	f.StringVar(&compactionRate, "compaction-rate-limit", "0", "bytes per second all jobs read from the bucket together, e.g. 16MB/s (0: unlimited)")
	f.DurationVar(&drainTimeout, "drain-timeout", 10*time.Minute, "how long GET /drain waits for in-flight jobs")
	f.DurationVar(&outputTTL, "output-ttl", 10*time.Minute, "drop a kept output nobody released after this long")
	f.StringVar(&name, "name", "", "worker name in logs and errors (default: host name)")
	return cmd
}

// drainHandler is the operator's preStop hook: stop accepting jobs, wait for
// the running ones (up to the timeout), then answer 200 either way so the
// pod's shutdown proceeds.
func drainHandler(w *compactor.Worker, timeout time.Duration) http.Handler {
	return http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), timeout)
		defer cancel()
		if w.Drain(ctx) {
			fmt.Fprintln(rw, "drained: no jobs running")
			return
		}
		fmt.Fprintln(rw, "drain timeout: jobs still running")
	})
}
