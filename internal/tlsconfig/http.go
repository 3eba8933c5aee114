package tlsconfig

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
)

// HTTP: a node's metrics and health port. It serves the node certificate,
// asks for a client certificate and verifies one if given, but does not
// require one at the handshake: the kubelet's probes (and a worker's
// preStop drain) speak HTTPS without a certificate. RequireClientCert
// guards the handlers that need one (/metrics).

// HTTPServer returns the TLS configuration of a node's HTTP port from dir.
func HTTPServer(dir string) (*tls.Config, error) {
	m, err := load(dir)
	if err != nil {
		return nil, err
	}
	// Probes come without a certificate; RequireClientCert decides per
	// handler.
	return m.serverConfig(false), nil
}

// RequireClientCert answers 401 to a request that came without a verified
// client certificate (HTTPServer verified any that was given), and serves
// the rest with next.
func RequireClientCert(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.TLS == nil || len(r.TLS.PeerCertificates) == 0 {
			http.Error(w, "a client certificate signed by the cluster's CA is required (any role)", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// ClientConfig returns the TLS configuration of a client from dir: its
// certificate presented, the server verified against dir's CA and
// ServerName, whatever address was dialled. For HTTP clients; Dial is the
// gRPC one.
func ClientConfig(dir string) (*tls.Config, error) {
	m, err := load(dir)
	if err != nil {
		return nil, err
	}
	return m.clientConfig(), nil
}

// ClientFromPEM is ClientConfig from certificates in memory (the operator's,
// which it issues itself and never writes down). They are not reloaded.
func ClientFromPEM(caPEM, certPEM, keyPEM []byte) (*tls.Config, error) {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, errors.New("tls: the CA holds no PEM certificate")
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("tls: the client certificate and key: %w", err)
	}
	m := &material{cert: &cert, pool: pool}
	return m.clientConfig(), nil
}

// clientConfig presents m's certificate (none with caOnly) and verifies
// the server against m's CA and ServerName, whatever address was dialled.
func (m *material) clientConfig() *tls.Config {
	cfg := &tls.Config{
		MinVersion: tls.VersionTLS12,
		ServerName: ServerName,
		// The server's chain is verified below, against the current CA.
		InsecureSkipVerify: true,
		VerifyPeerCertificate: func(chain [][]byte, _ [][]*x509.Certificate) error {
			return m.verify(chain, x509.ExtKeyUsageServerAuth, ServerName)
		},
	}
	if !m.caOnly {
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			c, _ := m.current()
			return c, nil
		}
	}
	return cfg
}

// ClientFromSecret is ClientFromPEM from the data of a TLS Secret (the
// operator's or cert-manager's): its keys are the file names of a TLS
// directory.
func ClientFromSecret(data map[string][]byte) (*tls.Config, error) {
	return ClientFromPEM(data[CAFile], data[CertFile], data[KeyFile])
}
