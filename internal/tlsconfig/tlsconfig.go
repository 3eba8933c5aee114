// Package tlsconfig is the TLS of every Bellows connection (docs/security.md):
// mutual TLS from a directory laid out as a Kubernetes TLS Secret (and a
// cert-manager Certificate's Secret) mounts it, reloaded when its files
// change, so a rotated certificate takes effect without a restart and
// without failing a request.
//
//	DIR/ca.crt    the CA that signs every certificate of the cluster
//	DIR/tls.crt   this process's certificate (and chain)
//	DIR/tls.key   its key
//
// A node (store, compactor) presents its certificate as a server and as a
// client to its peers; a client presents its own. Every certificate a node
// serves names ServerName, which clients verify whatever address they
// dialled: pods are reached by IP, and their IPs are not known when the
// certificates are issued.
//
// # Invariants
//
//   - A peer is accepted only with a certificate chain to the current
//     ca.crt, valid now, for the use it is put to (server or client).
//   - A reload that fails (a half-written file, a key that does not match)
//     keeps the previous material and is retried at the next handshake.
package tlsconfig

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/bellows-kv/bellows/internal/contract"
)

// ServerName is the name every node certificate carries and every client
// verifies.
const ServerName = contract.TLSServerName

// File names in a TLS directory.
const (
	CAFile   = "ca.crt"
	CertFile = "tls.crt"
	KeyFile  = "tls.key"
)

// reloadEvery bounds how often a handshake looks at the files.
const reloadEvery = time.Second

// material is a directory's certificate and CA, reloaded as they change;
// with caOnly, only its CA (a client that authenticates with a token).
type material struct {
	dir    string
	caOnly bool

	mu      sync.Mutex
	checked time.Time
	mtimes  []time.Time
	cert    *tls.Certificate
	pool    *x509.CertPool
	err     error // the last reload's, when it kept older material
}

func load(dir string) (*material, error) {
	m := &material{dir: dir}
	if err := m.reload(); err != nil {
		return nil, err
	}
	return m, nil
}

// paths are the files m reads: the CA first.
func (m *material) paths() []string {
	if m.caOnly {
		return []string{filepath.Join(m.dir, CAFile)}
	}
	return []string{filepath.Join(m.dir, CAFile), filepath.Join(m.dir, CertFile), filepath.Join(m.dir, KeyFile)}
}

// reload reads the files; called with mu held, or before m is shared.
func (m *material) reload() error {
	p := m.paths()
	mtimes := make([]time.Time, len(p))
	for i, path := range p {
		fi, err := os.Stat(path)
		if err != nil {
			if m.caOnly {
				return fmt.Errorf("tls: %w (a client with a token needs the cluster's CA as %s in its TLS directory)", err, CAFile)
			}
			return fmt.Errorf("tls: %w (a TLS directory holds %s, %s and %s)", err, CAFile, CertFile, KeyFile)
		}
		mtimes[i] = fi.ModTime()
	}
	caPEM, err := os.ReadFile(p[0])
	if err != nil {
		return fmt.Errorf("tls: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return fmt.Errorf("tls: %s holds no PEM certificate", p[0])
	}
	if m.caOnly {
		m.pool, m.mtimes, m.err = pool, mtimes, nil
		return nil
	}
	cert, err := tls.LoadX509KeyPair(p[1], p[2])
	if err != nil {
		return fmt.Errorf("tls: loading %s and %s: %w", p[1], p[2], err)
	}
	if cert.Leaf == nil {
		if cert.Leaf, err = x509.ParseCertificate(cert.Certificate[0]); err != nil {
			return fmt.Errorf("tls: %s: %w", p[1], err)
		}
	}
	// Our own certificate is checked as a peer would check it, so that a
	// wrong file is named here rather than as a peer's terse refusal.
	leaf, now := cert.Leaf, time.Now()
	switch {
	case now.After(leaf.NotAfter):
		return fmt.Errorf("tls: the certificate in %s expired at %s: issue a new one", p[1], leaf.NotAfter.UTC().Format(time.RFC3339))
	case now.Before(leaf.NotBefore):
		return fmt.Errorf("tls: the certificate in %s is not valid before %s", p[1], leaf.NotBefore.UTC().Format(time.RFC3339))
	}
	inter := x509.NewCertPool()
	for _, raw := range cert.Certificate[1:] {
		if c, err := x509.ParseCertificate(raw); err == nil {
			inter.AddCert(c)
		}
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
		return fmt.Errorf("tls: the certificate in %s is not signed by the CA in %s: %w", p[1], p[0], err)
	}
	m.cert, m.pool, m.mtimes, m.err = &cert, pool, mtimes, nil
	return nil
}

// current returns the material, reloading it if a file changed.
func (m *material) current() (*tls.Certificate, *x509.CertPool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.dir == "" {
		return m.cert, m.pool // from memory (FromPEM): nothing to reload
	}
	if now := time.Now(); now.Sub(m.checked) >= reloadEvery {
		m.checked = now
		changed := false
		for i, path := range m.paths() {
			if fi, err := os.Stat(path); err == nil && !fi.ModTime().Equal(m.mtimes[i]) {
				changed = true
			}
		}
		if changed {
			m.err = m.reload()
		}
	}
	return m.cert, m.pool
}

// verify checks a peer's chain against the current CA for usage, and says
// what is wrong with it in words a user can act on.
func (m *material) verify(chain [][]byte, usage x509.ExtKeyUsage, name string) error {
	if len(chain) == 0 {
		return errors.New("tls: the peer presented no certificate (a client needs one signed by the cluster's CA)")
	}
	_, pool := m.current()
	certs := make([]*x509.Certificate, len(chain))
	for i, raw := range chain {
		c, err := x509.ParseCertificate(raw)
		if err != nil {
			return fmt.Errorf("tls: the peer's certificate does not parse: %w", err)
		}
		certs[i] = c
	}
	inter := x509.NewCertPool()
	for _, c := range certs[1:] {
		inter.AddCert(c)
	}
	leaf := certs[0]
	now := time.Now()
	switch {
	case now.After(leaf.NotAfter):
		return fmt.Errorf("tls: the peer's certificate %q expired at %s", leaf.Subject.CommonName, leaf.NotAfter.UTC().Format(time.RFC3339))
	case now.Before(leaf.NotBefore):
		return fmt.Errorf("tls: the peer's certificate %q is not valid before %s", leaf.Subject.CommonName, leaf.NotBefore.UTC().Format(time.RFC3339))
	}
	_, err := leaf.Verify(x509.VerifyOptions{Roots: pool, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{usage}, DNSName: name})
	var unknown x509.UnknownAuthorityError
	var hostname x509.HostnameError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &unknown):
		return fmt.Errorf("tls: the peer's certificate %q is not signed by the CA in %s (a certificate of another cluster, or the wrong ca.crt)", leaf.Subject.CommonName, filepath.Join(m.dir, CAFile))
	case errors.As(err, &hostname):
		return fmt.Errorf("tls: the peer's certificate %q is not a node certificate (it does not name %s)", leaf.Subject.CommonName, ServerName)
	}
	return fmt.Errorf("tls: the peer's certificate %q: %w", leaf.Subject.CommonName, err)
}

// Server returns the gRPC option that serves mutual TLS from dir: clients
// must present a certificate signed by dir's CA.
func Server(dir string) (grpc.ServerOption, error) {
	m, err := load(dir)
	if err != nil {
		return nil, err
	}
	return grpc.Creds(credentials.NewTLS(m.serverConfig(true))), nil
}

// serverConfig serves m's certificate. A client certificate is verified
// against the CA as it is now, not as it was at start, so a rotated CA is
// trusted without a restart; requireCert says whether a client without
// one is refused at the handshake (otherwise the caller decides later,
// per call or per request).
func (m *material) serverConfig(requireCert bool) *tls.Config {
	auth := tls.RequestClientCert
	if requireCert {
		auth = tls.RequireAnyClientCert
	}
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			c, _ := m.current()
			return c, nil
		},
		ClientAuth: auth,
		VerifyPeerCertificate: func(chain [][]byte, _ [][]*x509.Certificate) error {
			if len(chain) == 0 && !requireCert {
				return nil
			}
			return m.verify(chain, x509.ExtKeyUsageClientAuth, "")
		},
	}
}

// Dial returns the gRPC option that dials with mutual TLS from dir, or
// without TLS when dir is "".
func Dial(dir string) (grpc.DialOption, error) {
	if dir == "" {
		return grpc.WithTransportCredentials(insecure.NewCredentials()), nil
	}
	cfg, err := ClientConfig(dir)
	if err != nil {
		return nil, err
	}
	return grpc.WithTransportCredentials(credentials.NewTLS(cfg)), nil
}

// SpeaksTLS says whether the server at addr answers a TLS handshake: false
// when it answers with something else or hangs up (a plaintext gRPC
// server). A handshake that fails over certificates is TLS all the same.
// Only for a choice a user cannot be misled by, such as a client on the
// same machine choosing between a local cluster's TLS and plaintext.
func SpeaksTLS(addr string, timeout time.Duration) bool {
	d := &net.Dialer{Timeout: timeout}
	conn, err := tls.DialWithDialer(d, "tcp", addr, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"h2"}})
	if err == nil {
		conn.Close()
		return true
	}
	var rec tls.RecordHeaderError
	var netErr net.Error
	switch {
	case errors.As(err, &rec), errors.Is(err, io.EOF), errors.Is(err, syscall.ECONNRESET), errors.As(err, &netErr) && netErr.Timeout():
		return false
	}
	// An alert from the server (it wants a client certificate, say): TLS.
	return true
}
