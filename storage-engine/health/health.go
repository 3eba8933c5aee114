// Package health is the HTTP side of every engine role: /metrics for
// Prometheus, /healthz (the process serves) and /readyz (it should get
// traffic), plus role-specific endpoints such as the compactor's /drain.
package health

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/bellows-kv/bellows/internal/version"
)

// NewRegistry returns a registry with the Go runtime and process collectors
// and bellows_build_info.
func NewRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		version.NewBuildInfo())
	return reg
}

// Mux serves /metrics from reg, /healthz, and /readyz by calling ready (nil
// error: ready). extra adds role-specific handlers.
func Mux(reg *prometheus.Registry, ready func() error, extra map[string]http.Handler) *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if err := ready(); err != nil {
			http.Error(w, "not ready: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok\n"))
	})
	for path, h := range extra {
		mux.Handle(path, h)
	}
	return mux
}
