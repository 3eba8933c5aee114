package client

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/bellows-kv/bellows/internal/tlsconfig"
	kvpb "github.com/bellows-kv/bellows/proto/bellows/kv/v1"
)

// listingStore is a fake store that lists four regions, all its own.
type listingStore struct{ kvpb.UnimplementedKVServer }

func (listingStore) Regions(context.Context, *kvpb.RegionsRequest) (*kvpb.RegionsResponse, error) {
	return &kvpb.RegionsResponse{Regions: regions("r0", "r1", "r2", "r3")}, nil
}

// testPKI is a CA's node and client certificate directories.
type testPKI struct{ node, client string }

func newPKI(t *testing.T, clientDir string) testPKI {
	t.Helper()
	ca, err := tlsconfig.NewCA("test", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	p := testPKI{node: t.TempDir(), client: clientDir}
	for _, d := range []struct {
		dir  string
		role tlsconfig.Role
	}{{p.node, tlsconfig.Node}, {p.client, tlsconfig.Client}} {
		cert, key, err := ca.Issue(d.role.String(), d.role, nil, time.Now().Add(-time.Minute), time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		if err := tlsconfig.WriteDir(d.dir, ca.PEM, cert, key); err != nil {
			t.Fatal(err)
		}
	}
	return p
}

// serve runs a gRPC server (a store when kv is set) until the test ends.
func serve(t *testing.T, kv kvpb.KVServer, opts ...grpc.ServerOption) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(opts...)
	if kv != nil {
		kvpb.RegisterKVServer(srv, kv)
	}
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return lis.Addr().String()
}

// newFails runs New against seed with a long deadline and wants it to
// fail, quickly, with an error of kind that says want.
func newFails(t *testing.T, name, seed string, opts Options, kind error, want string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := time.Now()
	c, err := New(ctx, []string{seed}, opts)
	took := time.Since(start)
	if err == nil {
		_ = c.Close()
		t.Errorf("%s: New succeeded", name)
		return
	}
	if !errors.Is(err, kind) || !strings.Contains(err.Error(), seed+" "+want) {
		t.Errorf("%s: New: %v\nwant %v saying %q", name, err, kind, seed+" "+want)
	}
	if took > 10*time.Second {
		t.Errorf("%s: New took %v to fail; retrying does not mend it, so it should fail at once", name, took.Round(time.Millisecond))
	}
}

// TestNewFailsFastOnATLSMismatch: a client dialling a TLS store in
// plaintext, or a plaintext store with TLS, is told so at once, not after
// its deadline with gRPC's text.
func TestNewFailsFastOnATLSMismatch(t *testing.T) {
	pki := newPKI(t, t.TempDir())
	creds, err := tlsconfig.Server(pki.node)
	if err != nil {
		t.Fatal(err)
	}
	tlsStore := serve(t, listingStore{}, creds)
	plainStore := serve(t, listingStore{})
	dial, err := WithTLSDir(pki.client)
	if err != nil {
		t.Fatal(err)
	}
	newFails(t, "plaintext to TLS", tlsStore, Options{}, ErrTLSMismatch, "speaks TLS and requires a client certificate, which the client did not present")
	newFails(t, "TLS to plaintext", plainStore, Options{DialOptions: []grpc.DialOption{dial}}, ErrTLSMismatch, "does not speak TLS, and the client dials it with TLS")
	// The matching credentials work.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for seed, opts := range map[string]Options{tlsStore: {DialOptions: []grpc.DialOption{dial}}, plainStore: {}} {
		c, err := New(ctx, []string{seed}, opts)
		if err != nil {
			t.Fatalf("New with matching credentials: %v", err)
		}
		_ = c.Close()
	}
}

// TestNewFailsFastOnAServerThatIsNoStore: a compaction worker's port (gRPC
// without the KV service) and metrics ports (HTTP, HTTPS) are named for
// what they are.
func TestNewFailsFastOnAServerThatIsNoStore(t *testing.T) {
	pki := newPKI(t, t.TempDir())
	creds, err := tlsconfig.Server(pki.node)
	if err != nil {
		t.Fatal(err)
	}
	dial, err := WithTLSDir(pki.client)
	if err != nil {
		t.Fatal(err)
	}
	withTLS := Options{DialOptions: []grpc.DialOption{dial}}
	newFails(t, "a plaintext compactor", serve(t, nil), Options{}, ErrNotAStore, "speaks gRPC but not the Bellows store API")
	newFails(t, "a TLS compactor", serve(t, nil, creds), withTLS, ErrNotAStore, "speaks gRPC but not the Bellows store API")
	metrics := httptest.NewServer(http.NotFoundHandler())
	defer metrics.Close()
	host := strings.TrimPrefix(metrics.URL, "http://")
	newFails(t, "an HTTP port, plaintext", host, Options{}, ErrNotAStore, "is an HTTP server (a metrics port?)")
	newFails(t, "an HTTP port, TLS", host, withTLS, ErrNotAStore, "is a plaintext HTTP server (a metrics port?)")
	secure := httptest.NewTLSServer(http.NotFoundHandler())
	defer secure.Close()
	newFails(t, "an HTTPS port, TLS", strings.TrimPrefix(secure.URL, "https://"), withTLS, ErrNotAStore, "speaks TLS but not gRPC")
}

// TestNewGivesUpOnARefusedSeed: with nothing listening at the seed and no
// deadline on ctx, New gives up after DialTimeout (default 5s) instead of
// retrying for ever, naming the seed and the refusal.
func TestNewGivesUpOnARefusedSeed(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	seed := l.Addr().String()
	_ = l.Close()
	for _, tc := range []struct {
		timeout, want time.Duration
	}{{300 * time.Millisecond, 300 * time.Millisecond}, {0, defaultDialTimeout}} {
		start := time.Now()
		done := make(chan error, 1)
		go func() {
			c, err := New(context.Background(), []string{seed}, Options{DialTimeout: tc.timeout})
			if err == nil {
				_ = c.Close()
			}
			done <- err
		}()
		select {
		case err := <-done:
			took := time.Since(start)
			if err == nil || !strings.Contains(err.Error(), seed+": connection refused") || !errors.Is(err, context.DeadlineExceeded) ||
				!strings.Contains(err.Error(), "(Options.DialTimeout)") {
				t.Errorf("DialTimeout %v: %v; want the seed, the refusal and the bound named", tc.timeout, err)
			}
			if took < tc.want || took > tc.want+5*time.Second {
				t.Errorf("DialTimeout %v: gave up after %v, want about %v", tc.timeout, took.Round(time.Millisecond), tc.want)
			}
		case <-time.After(tc.want + 20*time.Second):
			t.Fatalf("DialTimeout %v: New still retries after %v", tc.timeout, tc.want+20*time.Second)
		}
	}
}

// TestFindCredentials: with FindCredentials, New finds what the command
// line finds: bellows local's client certificate for a TLS store on this
// machine, and the client configuration's context (its addr, its tls-dir)
// when seeds are not given.
func TestFindCredentials(t *testing.T) {
	for _, env := range []string{"BELLOWS_TLS_DIR", "BELLOWS_TOKEN", "BELLOWS_TOKEN_FILE", "BELLOWS_CONTEXT", "BELLOWS_CONFIG"} {
		t.Setenv(env, "")
	}
	home := t.TempDir()
	t.Setenv("HOME", home)
	t.Setenv("XDG_CONFIG_HOME", filepath.Join(home, ".config"))
	root, err := tlsconfig.LocalRoot()
	if err != nil {
		t.Fatal(err)
	}
	local := newPKI(t, filepath.Join(root, "client"))
	creds, err := tlsconfig.Server(local.node)
	if err != nil {
		t.Fatal(err)
	}
	localStore := serve(t, listingStore{}, creds)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := New(ctx, []string{localStore}, Options{FindCredentials: true})
	if err != nil {
		t.Fatalf("FindCredentials with bellows local's certificate: %v", err)
	}
	_ = c.Close()
	newFails(t, "without FindCredentials", localStore, Options{}, ErrTLSMismatch, "speaks TLS")

	// A context names another cluster's seeds and certificate.
	other := newPKI(t, filepath.Join(home, "prod-client"))
	creds, err = tlsconfig.Server(other.node)
	if err != nil {
		t.Fatal(err)
	}
	prod := serve(t, listingStore{}, creds)
	config := filepath.Join(home, "config.yaml")
	if err := os.WriteFile(config, []byte("current-context: prod\ncontexts:\n- name: prod\n  addr: "+prod+"\n  tls-dir: prod-client\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("BELLOWS_CONFIG", config)
	c, err = New(ctx, nil, Options{FindCredentials: true})
	if err != nil {
		t.Fatalf("FindCredentials with a context: %v", err)
	}
	if got := c.seeds; len(got) != 1 || got[0] != prod {
		t.Errorf("seeds %q, want the context's addr %s", got, prod)
	}
	_ = c.Close()
	t.Setenv("BELLOWS_CONTEXT", "staging")
	if _, err := New(ctx, nil, Options{FindCredentials: true}); err == nil || !strings.Contains(err.Error(), `names the context "staging"`) {
		t.Errorf("an unknown context: %v", err)
	}
}
