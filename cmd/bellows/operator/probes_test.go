package operator

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/bellows-kv/bellows/internal/contract"
)

// freeAddr is a loopback address nothing listens on (for a server that
// takes an address, not a listener).
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// TestHealthProbeBindAddressServesTheProbes: with
// --health-probe-bind-address, the manager's plaintext probe server answers
// 200 at /healthz and /readyz, as the TLS metrics port does; it answered 404
// on both when no check was registered with the manager.
func TestHealthProbeBindAddressServesTheProbes(t *testing.T) {
	_, kube := startAPIServer(t)
	cfg := Default()
	cfg.Kube, cfg.LeaderElect = kube, false
	cfg.ProbeAddr, cfg.MetricsAddr = freeAddr(t), freeAddr(t)
	mgr, _, err := newManager(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("manager: %v", err)
		}
	})
	c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	for _, base := range []string{"http://" + cfg.ProbeAddr, "https://" + cfg.MetricsAddr} {
		for _, path := range []string{contract.PathHealthz, contract.PathReadyz} {
			var status int
			var body []byte
			deadline := time.Now().Add(time.Minute)
			for {
				resp, err := c.Get(base + path)
				if err == nil {
					body, _ = io.ReadAll(resp.Body)
					resp.Body.Close()
					status = resp.StatusCode
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("GET %s%s: %v", base, path, err)
				}
				time.Sleep(50 * time.Millisecond) // polling for the server to listen
			}
			if status != http.StatusOK {
				t.Errorf("GET %s%s: %d %q, want 200", base, path, status, body)
			}
		}
	}
}
