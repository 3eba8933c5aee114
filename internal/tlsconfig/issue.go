package tlsconfig

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// CA is a certificate authority that issues a cluster's certificates.
type CA struct {
	Cert *x509.Certificate
	Key  *ecdsa.PrivateKey
	PEM  []byte // the certificate, PEM-encoded: a TLS directory's ca.crt
}

// Role says what a certificate is for, and what its holder may do
// (roles.go). A certificate carries it as its subject's organization.
type Role int

const (
	// Node is a store's or compactor's: a server, and a client of its
	// peers, allowed every call.
	Node Role = iota
	// Admin is a client's that may read, write and call the Admin API.
	Admin
	// Writer is a client's that may read and write.
	Writer
	// Reader is a client's that may only read.
	Reader
)

// Client is the default client role: Admin.
const Client = Admin

func serial() (*big.Int, error) {
	return rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
}

func pemOf(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}

// NewCA makes a self-signed CA named name, valid for validity.
func NewCA(name string, validity time.Duration) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	sn, err := serial()
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: sn, Subject: pkix.Name{CommonName: name},
		NotBefore: now.Add(-time.Minute), NotAfter: now.Add(validity),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &CA{Cert: cert, Key: key, PEM: pemOf("CERTIFICATE", der)}, nil
}

// Issue makes a certificate and key for name in role, valid from notBefore
// for validity. A node certificate names ServerName, localhost and the
// loopback addresses besides dnsNames.
func (ca *CA) Issue(name string, role Role, dnsNames []string, notBefore time.Time, validity time.Duration) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	sn, err := serial()
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: sn, Subject: pkix.Name{CommonName: name, Organization: []string{role.String()}},
		NotBefore: notBefore, NotAfter: notBefore.Add(validity),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if role == Node {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageServerAuth)
		tmpl.DNSNames = append([]string{ServerName, "localhost"}, dnsNames...)
		tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.Key)
	if err != nil {
		return nil, nil, err
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pemOf("CERTIFICATE", der), pemOf("EC PRIVATE KEY", kder), nil
}

// WriteDir writes a TLS directory: ca.crt, tls.crt and tls.key (0600).
// Each file is written beside its place and renamed into it, so a process
// reloading the directory never reads half a file.
func WriteDir(dir string, caPEM, certPEM, keyPEM []byte) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	for _, f := range []struct {
		name string
		data []byte
		mode os.FileMode
	}{{CAFile, caPEM, 0o644}, {KeyFile, keyPEM, 0o600}, {CertFile, certPEM, 0o644}} {
		tmp := filepath.Join(dir, "."+f.name+".tmp")
		if err := os.WriteFile(tmp, f.data, f.mode); err != nil {
			return err
		}
		if err := os.Rename(tmp, filepath.Join(dir, f.name)); err != nil {
			return err
		}
	}
	return nil
}

// LoadCA reads a CA written by SaveCA.
func LoadCA(dir string) (*CA, error) {
	certPEM, err := os.ReadFile(filepath.Join(dir, CAFile))
	if err != nil {
		return nil, err
	}
	keyPEM, err := os.ReadFile(filepath.Join(dir, "ca.key"))
	if err != nil {
		return nil, err
	}
	ca, err := ParseCA(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", dir, err)
	}
	return ca, nil
}

// ParseCA reads a CA from its certificate and key (the operator keeps them
// in a Secret).
func ParseCA(certPEM, keyPEM []byte) (*CA, error) {
	cb, _ := pem.Decode(certPEM)
	kb, _ := pem.Decode(keyPEM)
	if cb == nil || kb == nil {
		return nil, errors.New("tls: no PEM CA certificate and key")
	}
	cert, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return nil, err
	}
	key, err := x509.ParseECPrivateKey(kb.Bytes)
	if err != nil {
		return nil, err
	}
	if !cert.IsCA {
		return nil, errors.New("tls: " + CAFile + " is not a CA certificate")
	}
	return &CA{Cert: cert, Key: key, PEM: certPEM}, nil
}

// KeyPEM is the CA's key, PEM-encoded.
func (ca *CA) KeyPEM() ([]byte, error) {
	kder, err := x509.MarshalECPrivateKey(ca.Key)
	if err != nil {
		return nil, err
	}
	return pemOf("EC PRIVATE KEY", kder), nil
}

// SaveCA writes the CA's certificate (ca.crt) and key (ca.key, 0600) to dir.
func (ca *CA) SaveCA(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	keyPEM, err := ca.KeyPEM()
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "ca.key"), keyPEM, 0o600); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, CAFile), ca.PEM, 0o644)
}

// LocalRoot is where bellows local keeps its throwaway CA (LocalRoot/ca)
// and the CLI's certificate (LocalRoot/client): one per user, so every
// local cluster trusts the same client.
func LocalRoot() (string, error) {
	d, err := os.UserConfigDir()
	if err != nil {
		return "", fmt.Errorf("bellows local keeps its CA in the user's configuration directory: %w", err)
	}
	return filepath.Join(d, "bellows", "local-tls"), nil
}
