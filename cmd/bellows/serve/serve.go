// Package serve runs a role's gRPC and HTTP listeners until a signal: the
// part of `bellows store` and `bellows compactor` that is the same.
package serve

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"

	"github.com/bellows-kv/bellows/internal/contract"
	"github.com/bellows-kv/bellows/internal/grpcmem"
	"github.com/bellows-kv/bellows/internal/tlsconfig"
)

// Servers is one role's gRPC and HTTP listeners, served until a signal.
type Servers struct {
	// GRPC is where the role registers its services before Run.
	GRPC    *grpc.Server
	grpcLis net.Listener
	http    *http.Server
	httpLis net.Listener
	log     *slog.Logger
	// BeforeStop, if set, runs when Run stops (a signal, ctx, a listener
	// failing) while gRPC still serves, before the graceful stop: what it
	// takes out of service answers requests promptly (a store's regions:
	// UNAVAILABLE) instead of waiting behind the requests still running.
	BeforeStop func()
	// Shutdown bounds the graceful gRPC stop; then running calls are cut.
	Shutdown time.Duration
	// HTTPTLS, if set, serves the HTTP port with TLS (tlsconfig.HTTPServer),
	// and /metrics only to clients with a certificate of the cluster; the
	// health paths stay open to the kubelet's probes.
	HTTPTLS *tls.Config
}

// Listen binds both addresses first, so a busy port fails the command
// before anything starts. Port 0 picks a free port; the ready line says which.
func Listen(grpcAddr, httpAddr string, log *slog.Logger, opts ...grpc.ServerOption) (*Servers, error) {
	gl, err := net.Listen("tcp", grpcAddr)
	if err != nil {
		return nil, fmt.Errorf("--listen %s: %w", grpcAddr, err)
	}
	hl, err := net.Listen("tcp", httpAddr)
	if err != nil {
		_ = gl.Close()
		return nil, fmt.Errorf("--metrics-listen %s: %w", httpAddr, err)
	}
	opts = append([]grpc.ServerOption{
		// Let clients' keepalive pings through: they are how a store notices
		// a partitioned worker and a worker a partitioned store.
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 5 * time.Second, PermitWithoutStream: true}),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: 10 * time.Second, Timeout: 5 * time.Second}),
		// A request within the key, value and batch limits must reach the
		// engine, which names the limit it breaks; gRPC's 4 MiB default
		// would refuse a largest value first with a message about frames.
		grpc.MaxRecvMsgSize(contract.MaxMessageBytes),
	}, append(grpcmem.ServerOptions(), opts...)...)
	return &Servers{GRPC: grpc.NewServer(opts...), grpcLis: gl, httpLis: hl, log: log, Shutdown: contract.GracefulStopTimeout}, nil
}

// Run serves until SIGINT/SIGTERM or ctx ends, then runs BeforeStop and
// stops gracefully: new calls are refused and running ones get Shutdown to
// finish. It prints one ready line to out once both listeners serve;
// bellows local and the process tests read the addresses from it.
func (s *Servers) Run(ctx context.Context, role string, mux http.Handler, out io.Writer) error {
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	httpLis := s.httpLis
	if s.HTTPTLS != nil {
		mux = guardMetrics(mux)
		httpLis = tls.NewListener(httpLis, s.HTTPTLS)
	}
	s.http = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 2)
	go func() { errc <- s.GRPC.Serve(s.grpcLis) }()
	go func() {
		if err := s.http.Serve(httpLis); !errors.Is(err, http.ErrServerClosed) {
			errc <- err
		}
	}()
	fmt.Fprintf(out, "bellows %s ready grpc=%s metrics=%s\n", role, s.grpcLis.Addr(), s.httpLis.Addr())
	var err error
	select {
	case <-ctx.Done():
		s.log.Info("stopping")
	case err = <-errc:
	}
	if s.BeforeStop != nil {
		s.BeforeStop()
	}
	done := make(chan struct{})
	go func() { s.GRPC.GracefulStop(); close(done) }()
	select {
	case <-done:
	case <-time.After(s.Shutdown):
		s.GRPC.Stop()
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = s.http.Shutdown(sctx)
	return err
}

// guardMetrics requires a client certificate for /metrics: what a store
// exports names its regions and keys' ranges.
func guardMetrics(next http.Handler) http.Handler {
	guarded := tlsconfig.RequireClientCert(next)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == contract.PathMetrics {
			guarded.ServeHTTP(w, r)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// NewLogger is a role's text logger.
func NewLogger(w io.Writer, role string) *slog.Logger {
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelInfo})).With("role", role)
}
