package cli

import (
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/bellows-kv/bellows/internal/tlsconfig"
)

// grpcServer serves gRPC with no service (as a compaction worker serves
// none of the store's) until the test ends.
func grpcServer(t *testing.T, opts ...grpc.ServerOption) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer(opts...)
	go func() { _ = s.Serve(l) }()
	t.Cleanup(s.Stop)
	return l.Addr().String()
}

// TestKVSaysWhatIsAtTheOtherEnd: kv pointed at a compaction worker's port,
// a metrics port or a TLS port without TLS fails at once (not after
// --timeout) saying what answered, with a hint that fits.
func TestKVSaysWhatIsAtTheOtherEnd(t *testing.T) {
	t.Setenv(envTLSDir, "")
	t.Setenv(envToken, "")
	t.Setenv(envTokenFile, "")
	t.Setenv(envConfig, "")
	t.Setenv(envContext, "")
	ca, err := tlsconfig.NewCA("test", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	cert, key, err := ca.Issue("node", tlsconfig.Node, nil, time.Now().Add(-time.Minute), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	node := t.TempDir()
	if err := tlsconfig.WriteDir(node, ca.PEM, cert, key); err != nil {
		t.Fatal(err)
	}
	creds, err := tlsconfig.Server(node)
	if err != nil {
		t.Fatal(err)
	}
	metrics := httptest.NewServer(http.NotFoundHandler())
	defer metrics.Close()
	for _, tc := range []struct {
		name, addr string
		want, hint string
	}{
		{"a compaction worker", grpcServer(t), "speaks gRPC but not the Bellows store API", "give --addr HOST:PORT of a store's gRPC port"},
		{"a metrics port", strings.TrimPrefix(metrics.URL, "http://"), "is an HTTP server (a metrics port?)", "give --addr HOST:PORT of a store's gRPC port"},
		{"a TLS port, in plaintext", grpcServer(t, creds), "speaks TLS and requires a client certificate, which the client did not present", "the store serves TLS: give --tls-dir with a client certificate"},
	} {
		start := time.Now()
		_, _, err := kvRun{}.run(t, tc.addr, "get", "k", "--tls-dir", "", "--timeout", "20s")
		took := time.Since(start)
		if err == nil || !strings.Contains(err.Error(), tc.addr+" "+tc.want) || !strings.Contains(err.Error(), "hint: "+tc.hint) {
			t.Errorf("%s: %v\nwant %q and the hint %q", tc.name, err, tc.addr+" "+tc.want, tc.hint)
		}
		if strings.Contains(err.Error(), "ALPN") || strings.Contains(err.Error(), "rpc error") {
			t.Errorf("%s: gRPC's text: %v", tc.name, err)
		}
		if took > 5*time.Second {
			t.Errorf("%s: failed after %v; retrying does not mend it, so it should fail at once", tc.name, took.Round(time.Millisecond))
		}
	}
}
