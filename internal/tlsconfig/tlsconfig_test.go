package tlsconfig

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// issue writes a TLS directory of role under the test's temp dir.
func issue(t *testing.T, ca *CA, role Role, notBefore time.Time, validity time.Duration) string {
	t.Helper()
	cert, key, err := ca.Issue("test-"+map[Role]string{Node: "node", Client: "client"}[role], role, nil, notBefore, validity)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := WriteDir(dir, ca.PEM, cert, key); err != nil {
		t.Fatal(err)
	}
	return dir
}

func newCA(t *testing.T) *CA {
	t.Helper()
	ca, err := NewCA("test-ca", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

// serve starts a gRPC health server with mutual TLS from dir.
func serve(t *testing.T, dir string) string {
	t.Helper()
	opt, err := Server(dir)
	if err != nil {
		t.Fatal(err)
	}
	return serveHealth(t, opt)
}

// serveHealth starts a gRPC health server with opts and returns its address.
func serveHealth(t *testing.T, opts ...grpc.ServerOption) string {
	t.Helper()
	s := grpc.NewServer(opts...)
	healthpb.RegisterHealthServer(s, health.NewServer())
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = s.Serve(l) }()
	t.Cleanup(s.Stop)
	return l.Addr().String()
}

// call makes one health call with opt and returns the server certificate's
// serial number it saw.
func call(t *testing.T, addr string, opt grpc.DialOption) (string, error) {
	t.Helper()
	conn, err := grpc.NewClient(addr, opt)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var p peer.Peer
	_, err = healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Peer(&p), grpc.WaitForReady(false))
	if err != nil {
		return "", err
	}
	return p.AuthInfo.(interface{ AuthType() string }).AuthType(), nil
}

func dial(t *testing.T, dir string) grpc.DialOption {
	t.Helper()
	opt, err := Dial(dir)
	if err != nil {
		t.Fatal(err)
	}
	return opt
}

// Mutual TLS from the cluster's CA connects; a plaintext client, a client
// without a certificate of that CA, and a client dialling a server of
// another CA are refused, the last naming the CA it does not trust.
func TestMutualTLSAcceptsTheClustersCertificatesOnly(t *testing.T) {
	ca, other := newCA(t), newCA(t)
	now := time.Now().Add(-time.Minute)
	addr := serve(t, issue(t, ca, Node, now, time.Hour))
	if auth, err := call(t, addr, dial(t, issue(t, ca, Client, now, time.Hour))); err != nil || auth != "tls" {
		t.Fatalf("a client of the cluster's CA: %v (auth %q)", err, auth)
	}
	if _, err := call(t, addr, grpc.WithTransportCredentials(insecure.NewCredentials())); err == nil {
		t.Fatal("a plaintext client was served")
	}
	if _, err := call(t, addr, dial(t, issue(t, other, Client, now, time.Hour))); err == nil {
		t.Fatal("a client of another CA was served")
	}
	otherAddr := serve(t, issue(t, other, Node, now, time.Hour))
	_, err := call(t, otherAddr, dial(t, issue(t, ca, Client, now, time.Hour)))
	if err == nil || !strings.Contains(err.Error(), "is not signed by the CA in") {
		t.Fatalf("dialling a server of another CA: %v; want the error to say its certificate is not signed by our CA", err)
	}
}

// Each bad credential is named before any connection: a missing directory
// or file, an expired certificate, one not yet valid, one of another CA.
func TestABadCredentialIsNamed(t *testing.T) {
	ca, other := newCA(t), newCA(t)
	now := time.Now()
	mixed := t.TempDir()
	cert, key, err := other.Issue("x", Client, nil, now.Add(-time.Minute), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if err := WriteDir(mixed, ca.PEM, cert, key); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, dir, says string
	}{
		{"missing", filepath.Join(t.TempDir(), "nope"), "no such file"},
		{"expired", issue(t, ca, Client, now.Add(-2*time.Hour), time.Hour), "expired at"},
		{"not yet valid", issue(t, ca, Client, now.Add(time.Hour), time.Hour), "is not valid before"},
		{"another CA's", mixed, "is not signed by the CA in"},
	} {
		if _, err := Dial(tc.dir); err == nil || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%s: %v; want an error saying %q", tc.name, err, tc.says)
		}
	}
}

// A certificate rewritten in place (a rotation) is served from the next
// handshake on, without a restart.
func TestARotatedCertificateIsServedWithoutARestart(t *testing.T) {
	ca := newCA(t)
	now := time.Now().Add(-time.Minute)
	dir := issue(t, ca, Node, now, time.Hour)
	addr := serve(t, dir)
	client := dial(t, issue(t, ca, Client, now, time.Hour))
	first := serverSerial(t, addr, client)
	cert, key, err := ca.Issue("rotated", Node, nil, now, 2*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if err := WriteDir(dir, ca.PEM, cert, key); err != nil {
		t.Fatal(err)
	}
	want := parseSerial(t, cert)
	deadline := time.Now().Add(10 * time.Second)
	for serverSerial(t, addr, client) != want {
		if time.Now().After(deadline) {
			t.Fatalf("the server still presents serial %s after its certificate was rotated", first)
		}
		time.Sleep(100 * time.Millisecond) // reloads are checked once a second
	}
}

func parseSerial(t *testing.T, certPEM []byte) string {
	t.Helper()
	b, _ := pem.Decode(certPEM)
	c, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c.SerialNumber.String()
}

func serverSerial(t *testing.T, addr string, opt grpc.DialOption) string {
	t.Helper()
	conn, err := grpc.NewClient(addr, opt)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var p peer.Peer
	if _, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Peer(&p)); err != nil {
		t.Fatal(err)
	}
	info, ok := p.AuthInfo.(interface{ AuthType() string })
	if !ok || info.AuthType() != "tls" {
		t.Fatalf("the connection is not TLS: %T", p.AuthInfo)
	}
	return tlsInfoSerial(p.AuthInfo)
}

// A client that presents a certificate of another CA (and does not check
// the server's) is refused by the server's handshake; one that presents
// none is too.
func TestAServerRefusesACertificateOfAnotherCA(t *testing.T) {
	ca, other := newCA(t), newCA(t)
	now := time.Now().Add(-time.Minute)
	addr := serve(t, issue(t, ca, Node, now, time.Hour))
	foreignDir := issue(t, other, Client, now, time.Hour)
	foreign, err := tls.LoadX509KeyPair(filepath.Join(foreignDir, CertFile), filepath.Join(foreignDir, KeyFile))
	if err != nil {
		t.Fatal(err)
	}
	for name, certs := range map[string][]tls.Certificate{"another CA's certificate": {foreign}, "no certificate": nil} {
		conn, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true, Certificates: certs, NextProtos: []string{"h2"}})
		if err == nil {
			// TLS 1.3 reports the client certificate's refusal on the
			// first read.
			_, err = conn.Read(make([]byte, 1))
			conn.Close()
		}
		if err == nil || !strings.Contains(err.Error(), "certificate") {
			t.Errorf("%s: %v; want the handshake refused over the certificate", name, err)
		}
	}
}

// A call is allowed by the role the client's certificate carries: a reader
// is refused a call that needs write, naming both roles; a writer and an
// admin are allowed it, and a node everything; a call without TLS is not
// checked.
func TestAuthorizeByTheCertificatesRole(t *testing.T) {
	ca := newCA(t)
	now := time.Now().Add(-time.Minute)
	opt, err := Server(issue(t, ca, Node, now, time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	unary, stream := Authorize(func(string) Role { return Writer })
	addr := serveHealth(t, opt, grpc.ChainUnaryInterceptor(unary), grpc.ChainStreamInterceptor(stream))
	for _, tc := range []struct {
		role Role
		ok   bool
	}{{Reader, false}, {Writer, true}, {Admin, true}, {Node, true}} {
		_, err := call(t, addr, dial(t, issue(t, ca, tc.role, now, time.Hour)))
		switch {
		case tc.ok && err != nil:
			t.Errorf("role %s: %v; want allowed", tc.role, err)
		case !tc.ok && (err == nil || status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "needs the write role") || !strings.Contains(err.Error(), "has read")):
			t.Errorf("role %s: %v; want PERMISSION_DENIED naming both roles", tc.role, err)
		}
	}
}
