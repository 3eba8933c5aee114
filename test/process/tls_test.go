package process

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"

	"github.com/bellows-kv/bellows/client"
	"github.com/bellows-kv/bellows/internal/tlsconfig"
	kvpb "github.com/bellows-kv/bellows/proto/bellows/kv/v1"
)

// tlsDirs is a cluster's CA and TLS directories issued from it.
type tlsDirs struct {
	ca   *tlsconfig.CA
	node string
}

func newTLSCluster(t *testing.T) tlsDirs {
	t.Helper()
	ca, err := tlsconfig.NewCA("test cluster CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return tlsDirs{ca: ca, node: issueDir(t, ca, tlsconfig.Node, time.Now().Add(-time.Minute))}
}

// issueDir writes a TLS directory of role from ca, valid for an hour from
// notBefore.
func issueDir(t *testing.T, ca *tlsconfig.CA, role tlsconfig.Role, notBefore time.Time) string {
	t.Helper()
	cert, key, err := ca.Issue(fmt.Sprintf("test-%d", role), role, nil, notBefore, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := tlsconfig.WriteDir(dir, ca.PEM, cert, key); err != nil {
		t.Fatal(err)
	}
	return dir
}

// bellowsFails runs the bellows command line, which must fail, and returns
// what it printed.
func bellowsFails(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command(binary, args...).CombinedOutput()
	if err == nil {
		t.Fatalf("bellows %s succeeded; want a refusal:\n%s", strings.Join(args, " "), out)
	}
	return string(out)
}

// A store and a compaction worker serving mutual TLS from one CA: a client
// with a certificate of that CA reads and writes, and its compactions run on
// the worker; a plaintext client, a client of another CA and an expired or
// not-yet-valid certificate are refused, each with a message that names the
// problem; a worker with another CA's certificate is given no job.
func TestMutualTLSRefusesEveryoneButTheClustersCertificates(t *testing.T) {
	cluster := newTLSCluster(t)
	other, err := tlsconfig.NewCA("another CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().Add(-time.Minute)
	worker := start(t, "compactor", "compactor", "--name=worker", "--cache-bytes=64MiB", "--tls-dir="+cluster.node)
	stranger := start(t, "stranger", "compactor", "--name=stranger", "--cache-bytes=64MiB", "--tls-dir="+issueDir(t, other, tlsconfig.Node, now))
	bucket := "file://" + t.TempDir()
	s := start(t, "store", append(storeArgs(t, bucket, t.TempDir(), "Required", ""),
		"--compactors="+worker.grpc, "--tls-dir="+cluster.node)...)
	clientDir := issueDir(t, cluster.ca, tlsconfig.Client, now)
	kv := func(args ...string) []byte {
		return bellows(t, append(append([]string{"kv"}, args...), "--addr", s.grpc, "--tls-dir", clientDir)...)
	}
	kv("put", "a", "1")
	kv("flush", "region-000")
	kv("put", "b", "2")
	kv("flush", "region-000")
	if got := strings.TrimSpace(string(kv("get", "a"))); got != "1" {
		t.Fatalf("get a over TLS: %q", got)
	}
	kv("compact", "region-000")
	if n := worker.metric(t, `bellows_compactor_jobs_total{result="success"}`); n < 1 {
		t.Errorf("the worker of the cluster's CA ran %v jobs; want the compaction", n)
	}

	for _, tc := range []struct {
		name string
		args []string
		says string
	}{
		{"plaintext", []string{"--tls-dir", ""}, "speaks TLS and requires a client certificate, which the client did not present"},
		// Its CA does not know the store's certificate either: the client
		// refuses first, naming its CA (the store's refusal of a foreign
		// certificate is tlsconfig's TestAServerRefusesACertificateOfAnotherCA).
		{"another cluster's credentials", []string{"--tls-dir", issueDir(t, other, tlsconfig.Client, now)}, "is not signed by the CA in"},
		{"an expired certificate", []string{"--tls-dir", issueDir(t, cluster.ca, tlsconfig.Client, now.Add(-2*time.Hour))}, "expired at"},
		{"a certificate not yet valid", []string{"--tls-dir", issueDir(t, cluster.ca, tlsconfig.Client, now.Add(time.Hour))}, "is not valid before"},
	} {
		out := bellowsFails(t, append([]string{"kv", "get", "a", "--addr", s.grpc, "--timeout", "3s"}, tc.args...)...)
		if !strings.Contains(out, tc.says) {
			t.Errorf("%s: the refusal does not say %q:\n%s", tc.name, tc.says, out)
		}
	}

	// A store pointed at a worker of another CA does not hand it a job.
	s2 := start(t, "store2", append(storeArgs(t, "file://"+t.TempDir(), t.TempDir(), "Required", ""),
		"--compactors="+stranger.grpc, "--tls-dir="+cluster.node)...)
	kv2 := func(args ...string) string {
		out, _ := exec.Command(binary, append(append([]string{"kv"}, args...), "--addr", s2.grpc, "--tls-dir", clientDir, "--timeout", "5s")...).CombinedOutput()
		return string(out)
	}
	kv2("put", "a", "1")
	kv2("flush", "region-000")
	kv2("put", "b", "2")
	kv2("flush", "region-000")
	kv2("compact", "region-000")
	if n := stranger.metric(t, `bellows_compactor_jobs_total{result="success"}`); n != 0 {
		t.Errorf("a worker of another CA ran %v jobs", n)
	}
}

// The store's certificate rotated (rewritten in place, as a Secret's
// volume is) under a writing client: no operation fails, every write reads
// back, and connections made after serve the new certificate.
func TestRotatingTheStoresCertificateFailsNoRequest(t *testing.T) {
	cluster := newTLSCluster(t)
	s := start(t, "store", append(storeArgs(t, "file://"+t.TempDir(), t.TempDir(), "Disabled", ""), "--tls-dir="+cluster.node)...)
	clientDir := issueDir(t, cluster.ca, tlsconfig.Client, time.Now().Add(-time.Minute))
	dial, err := tlsconfig.Dial(clientDir)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := client.New(ctx, []string{s.grpc}, client.Options{DialOptions: []grpc.DialOption{dial}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var written atomic.Int64
	stop := make(chan struct{})
	errs := make(chan error, 1)
	go func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				errs <- nil
				return
			default:
			}
			if _, err := c.Put(ctx, fmt.Appendf(nil, "k%05d", i), []byte("v")); err != nil {
				errs <- err
				return
			}
			written.Add(1)
		}
	}()
	waitFor(t, "writes before the rotation", func() bool { return written.Load() > 100 })
	cert, key, err := cluster.ca.Issue("rotated", tlsconfig.Node, nil, time.Now().Add(-time.Minute), 2*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if err := tlsconfig.WriteDir(cluster.node, cluster.ca.PEM, cert, key); err != nil {
		t.Fatal(err)
	}
	rotatedAt := written.Load()
	// New connections see the new certificate (reloads are checked once a
	// second); a new client each time, so each is a new handshake.
	waitFor(t, "a new connection to get the rotated certificate", func() bool {
		return strings.Contains(string(bellows(t, "kv", "status", "--addr", s.grpc, "--tls-dir", clientDir)), "healthy") &&
			servedSerial(t, s.grpc, dial) == serialOf(t, cert)
	})
	waitFor(t, "writes after the rotation", func() bool { return written.Load() > rotatedAt+100 })
	close(stop)
	if err := <-errs; err != nil {
		t.Fatalf("a write failed across the rotation: %v", err)
	}
	n := int(written.Load())
	for i := 0; i < n; i += 97 {
		if v, ok, err := c.Get(ctx, fmt.Appendf(nil, "k%05d", i)); err != nil || !ok || string(v) != "v" {
			t.Fatalf("k%05d after the rotation: %q %v %v", i, v, ok, err)
		}
	}
	t.Logf("%d writes, %d of them after the rotation, none failed", n, n-int(rotatedAt))
}

// servedSerial is the serial number of the certificate the store at addr
// serves to a new connection.
func servedSerial(t *testing.T, addr string, dial grpc.DialOption) string {
	t.Helper()
	conn, err := grpc.NewClient(addr, dial)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var p peer.Peer
	if _, err := kvpb.NewKVClient(conn).Regions(ctx, &kvpb.RegionsRequest{}, grpc.Peer(&p)); err != nil {
		t.Fatal(err)
	}
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok || len(info.State.PeerCertificates) == 0 {
		t.Fatalf("the connection to %s is not TLS: %T", addr, p.AuthInfo)
	}
	return info.State.PeerCertificates[0].SerialNumber.String()
}

func serialOf(t *testing.T, certPEM []byte) string {
	t.Helper()
	b, _ := pem.Decode(certPEM)
	c, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c.SerialNumber.String()
}

// What a client may do is its certificate's role: a reader reads but
// cannot write or flush; a writer writes but cannot flush; an admin
// flushes. Each refusal names the role the call needs and the one the
// certificate has, and the CLI says what it means.
func TestAClientsRoleBoundsWhatItMayDo(t *testing.T) {
	cluster := newTLSCluster(t)
	s := start(t, "store", append(storeArgs(t, "file://"+t.TempDir(), t.TempDir(), "Disabled", ""), "--tls-dir="+cluster.node)...)
	now := time.Now().Add(-time.Minute)
	as := func(role tlsconfig.Role) string { return issueDir(t, cluster.ca, role, now) }
	admin, writer, reader := as(tlsconfig.Admin), as(tlsconfig.Writer), as(tlsconfig.Reader)
	kv := func(dir string, args ...string) []string {
		return append(append([]string{"kv"}, args...), "--addr", s.grpc, "--tls-dir", dir, "--timeout", "5s")
	}
	bellows(t, kv(writer, "put", "k", "v")...)
	if got := strings.TrimSpace(string(bellows(t, kv(reader, "get", "k")...))); got != "v" {
		t.Fatalf("a reader's get: %q", got)
	}
	for _, tc := range []struct {
		who  string
		args []string
		says string
	}{
		{"a reader's put", kv(reader, "put", "k", "x"), "needs the write role; the client certificate \"test-3\" has read"},
		{"a reader's flush", kv(reader, "flush", "region-000"), "needs the admin role"},
		{"a writer's flush", kv(writer, "flush", "region-000"), "needs the admin role; the client certificate \"test-2\" has write"},
	} {
		if out := bellowsFails(t, tc.args...); !strings.Contains(out, tc.says) || !strings.Contains(out, "does not allow this call") {
			t.Errorf("%s: the refusal does not say %q:\n%s", tc.who, tc.says, out)
		}
	}
	bellows(t, kv(admin, "flush", "region-000")...)
	if got := strings.TrimSpace(string(bellows(t, kv(reader, "get", "k")...))); got != "v" {
		t.Fatalf("after the refused writes, k is %q", got)
	}
}

// TestTheMetricsPortServesTLSAndMetricsOnlyToTheCluster: with --tls-dir, a
// store's and a worker's HTTP port speaks TLS only; the health paths answer
// without a certificate (the kubelet's probes have none), /metrics only to
// a client certificate of the cluster's CA, not to one of another CA.
func TestTheMetricsPortServesTLSAndMetricsOnlyToTheCluster(t *testing.T) {
	cluster := newTLSCluster(t)
	other, err := tlsconfig.NewCA("another cluster", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().Add(-time.Minute)
	worker := start(t, "compactor", "compactor", "--name=worker", "--cache-bytes=64MiB", "--tls-dir="+cluster.node)
	s := start(t, "store", append(storeArgs(t, "file://"+t.TempDir(), t.TempDir(), "Disabled", ""), "--tls-dir="+cluster.node)...)
	clientWith := func(cfg *tls.Config) *http.Client {
		return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg}}
	}
	// The server is checked (CA, bellows-node); no client certificate.
	noCert, err := tlsconfig.ClientConfig(issueDir(t, cluster.ca, tlsconfig.Reader, now))
	if err != nil {
		t.Fatal(err)
	}
	noCert.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &tls.Certificate{}, nil }
	reader, err := tlsconfig.ClientConfig(issueDir(t, cluster.ca, tlsconfig.Reader, now))
	if err != nil {
		t.Fatal(err)
	}
	stranger, err := tlsconfig.ClientConfig(issueDir(t, other, tlsconfig.Reader, now))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []*proc{s, worker} {
		t.Run(p.name, func(t *testing.T) {
			if resp, err := http.Get("http://" + p.metrics + "/healthz"); err == nil {
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					t.Errorf("plaintext /healthz answered %s %q; want the TLS port to refuse it", resp.Status, body)
				}
			}
			resp, err := clientWith(noCert).Get("https://" + p.metrics + "/healthz")
			if err != nil {
				t.Fatalf("/healthz over TLS without a certificate: %v", err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Errorf("/healthz without a certificate: %s, want 200 (the kubelet's probes have none)", resp.Status)
			}
			resp, err = clientWith(noCert).Get("https://" + p.metrics + "/metrics")
			if err != nil {
				t.Fatalf("/metrics without a certificate: %v", err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(string(body), "client certificate") {
				t.Errorf("/metrics without a certificate: %s %q, want 401 naming the certificate", resp.Status, body)
			}
			resp, err = clientWith(reader).Get("https://" + p.metrics + "/metrics")
			if err != nil {
				t.Fatalf("/metrics with a read certificate: %v", err)
			}
			body, _ = io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "bellows_build_info") {
				t.Errorf("/metrics with the cluster's certificate: %s, want 200 with the metrics", resp.Status)
			}
			if _, err := clientWith(stranger).Get("https://" + p.metrics + "/metrics"); err == nil {
				t.Errorf("/metrics with another cluster's certificate succeeded; want the handshake refused")
			}
		})
	}
}

// TestAClientConfigurationFileGivesTheClusterAndItsCredentials: with only
// BELLOWS_CONFIG set, `bellows kv` finds the cluster and its client
// certificate in the file's current context, as kubectl finds a cluster in
// a kubeconfig; --context picks another, whose read-only certificate the
// store then refuses a write.
func TestAClientConfigurationFileGivesTheClusterAndItsCredentials(t *testing.T) {
	cluster := newTLSCluster(t)
	now := time.Now().Add(-time.Minute)
	s := start(t, "store", append(storeArgs(t, "file://"+t.TempDir(), t.TempDir(), "Disabled", ""), "--tls-dir="+cluster.node)...)
	dir := t.TempDir()
	config := filepath.Join(dir, "config.yaml")
	content := fmt.Sprintf("current-context: admin\ncontexts:\n- {name: admin, addr: %q, tls-dir: %q}\n- {name: reader, addr: %q, tls-dir: %q}\n",
		s.grpc, issueDir(t, cluster.ca, tlsconfig.Admin, now), s.grpc, issueDir(t, cluster.ca, tlsconfig.Reader, now))
	if err := os.WriteFile(config, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	kv := func(args ...string) (string, error) {
		cmd := exec.Command(binary, append([]string{"kv"}, args...)...)
		cmd.Env = append(os.Environ(), "BELLOWS_CONFIG="+config, "BELLOWS_TLS_DIR=", "BELLOWS_CONTEXT=")
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	if out, err := kv("put", "configured", "yes"); err != nil {
		t.Fatalf("put with the current context: %v\n%s", err, out)
	}
	if out, err := kv("get", "configured", "--context", "reader"); err != nil || !strings.Contains(out, "yes") {
		t.Fatalf("get with the reader context: %v\n%s", err, out)
	}
	out, err := kv("put", "configured", "no", "--context", "reader", "--timeout", "5s")
	if err == nil || !strings.Contains(out, "needs the write role") {
		t.Fatalf("put with the reader context: %v\n%s; want the write role refused", err, out)
	}
}
