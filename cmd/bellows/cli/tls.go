package cli

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"google.golang.org/grpc"

	"github.com/bellows-kv/bellows/client"
	"github.com/bellows-kv/bellows/internal/clientcreds"
	"github.com/bellows-kv/bellows/internal/contract"
	"github.com/bellows-kv/bellows/internal/tlsconfig"
)

// The credentials of the commands that call a store (kv, backup create):
// --tls-dir, the client's certificate and key and the cluster's CA ("" for
// a plaintext cluster, or tlsAuto); --token-file, a token to present
// instead of a certificate. A flag given wins over its environment
// variable.
var (
	clientTLSDir    flagString
	clientTokenFile flagString
	// tokenSeeds: the seeds the command dialled presenting a token, not
	// a certificate (what a refused connection may mean).
	tokenSeeds []string
)

// tlsAuto: for a store on this machine (a loopback address), bellows
// local's client certificate if the store serves TLS; else plaintext.
const tlsAuto = clientcreds.Auto

// The client's flags and environment variables for its credentials.
const (
	flagTokenFile = clientcreds.FlagTokenFile
	envTLSDir     = clientcreds.EnvTLSDir
	envToken      = clientcreds.EnvToken
	envTokenFile  = clientcreds.EnvTokenFile
)

// flagString is a string flag that knows whether it was given.
type flagString struct {
	value string
	set   bool
}

func (f *flagString) String() string     { return f.value }
func (f *flagString) Set(v string) error { f.value, f.set = v, true; return nil }
func (f *flagString) Type() string       { return "string" }

func addClientTLSFlag(fs *pflag.FlagSet) {
	addContextFlag(fs)
	localClient, _ := clientcreds.LocalClientDir()
	clientTLSDir, clientTokenFile = flagString{value: tlsAuto}, flagString{}
	fs.Var(&clientTLSDir, contract.FlagTLSDir,
		"directory of the client's TLS certificate (tls.crt, tls.key) and the cluster's CA (ca.crt); with a token, only ca.crt is used; \"\" for a plaintext cluster; "+
			"auto: for a store on this machine that serves TLS, bellows local's ("+localClient+"), else plaintext (env "+envTLSDir+")")
	fs.Var(&clientTokenFile, flagTokenFile,
		"file holding a token of the cluster, presented instead of a certificate, over TLS only (--"+contract.FlagTLSDir+" with the cluster's ca.crt); "+
			"env "+envToken+" (the token itself) or "+envTokenFile+"; \"\": none")
}

// clientTLSDirFrom is --tls-dir, else BELLOWS_TLS_DIR, else the context's
// tls-dir, else auto, and which of them it is.
func clientTLSDirFrom() (dir, from string) {
	return clientcreds.TLSDir(clientcreds.Setting{Value: clientTLSDir.value, Set: clientTLSDir.set, From: "--" + contract.FlagTLSDir}, activeContext)
}

// clientToken is the token to present ("" for none) and where it came
// from: --token-file, else BELLOWS_TOKEN or BELLOWS_TOKEN_FILE, else the
// context's token-file.
func clientToken() (token, from string, err error) {
	token, from, err = clientcreds.Token(clientcreds.Setting{Value: clientTokenFile.value, Set: clientTokenFile.set, From: "--" + flagTokenFile}, activeContext)
	return token, from, credsError(err)
}

// clientDial is the dial options of --tls-dir and --token-file for a
// command calling seeds.
func clientDial(seeds ...string) ([]grpc.DialOption, error) {
	dir, dirFrom := clientTLSDirFrom()
	token, tokenFrom, err := clientToken()
	if err != nil {
		return nil, err
	}
	opts, err := clientcreds.Dial(dir, dirFrom, token, tokenFrom, seeds, client.WithToken)
	if err != nil {
		return nil, credsError(err)
	}
	if token != "" {
		tokenSeeds = seeds
	}
	return opts, nil
}

// tokenRefusedHint is what a token client is told when the store demands a
// certificate at the handshake.
var tokenRefusedHint = "the store requires a client certificate: it takes no tokens (it runs without --" + contract.FlagTokensFile +
	"); give --tls-dir with a client certificate of the cluster"

// demandsCertificate says whether the TLS server at addr refuses a client
// that presents no certificate, as a store without --tokens-file does: a
// handshake and one read, nothing sent. gRPC's own error for that refusal
// depends on a race (the alert, or the broken pipe of its first write).
func demandsCertificate(addr string) bool {
	refused := func(err error) bool {
		return err != nil && (strings.Contains(err.Error(), "certificate required") || strings.Contains(err.Error(), "bad certificate"))
	}
	d := &net.Dialer{Timeout: 2 * time.Second}
	conn, err := tls.DialWithDialer(d, "tcp", addr, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"h2"}})
	if err != nil {
		return refused(err)
	}
	defer conn.Close()
	// TLS 1.3 says it on the first read; a server that takes tokens sends
	// its HTTP/2 settings instead.
	_ = conn.SetReadDeadline(time.Now().Add(2 * time.Second))
	_, err = conn.Read(make([]byte, 1))
	return refused(err)
}

// tlsHint says what a failed connection's TLS error means, or "".
func tlsHint(text string) string {
	switch {
	case strings.Contains(text, "first record does not look like a TLS handshake"):
		return "the store does not serve TLS: give --tls-dir \"\" for a plaintext cluster"
	case strings.Contains(text, "error reading server preface"), strings.Contains(text, "connection closed before server preface received"):
		return "the store may require TLS: give --tls-dir with a client certificate of the cluster"
	case strings.Contains(text, "is not signed by the CA in"):
		return "the store's certificate is of another cluster: give --tls-dir of this cluster's client certificate"
	case strings.Contains(text, "bad certificate"), strings.Contains(text, "certificate required"), strings.Contains(text, "unknown certificate authority"):
		return "the store refused this client's certificate: it is not signed by the cluster's CA, or has expired"
	}
	return ""
}

// localTLS makes, once, bellows local's CA and the CLI's certificate under
// the user's configuration directory, and a node certificate for the
// processes of dataDir; it returns the node's TLS directory. A certificate
// that no longer loads (expired, of a replaced CA) is issued again.
func localTLS(dataDir string) (nodeDir, clientDir string, err error) {
	root, err := tlsconfig.LocalRoot()
	if err != nil {
		return "", "", err
	}
	caDir := filepath.Join(root, "ca")
	ca, err := tlsconfig.LoadCA(caDir)
	if errors.Is(err, fs.ErrNotExist) {
		if ca, err = newLocalCA(root, caDir); err != nil {
			return "", "", err
		}
	} else if err != nil {
		return "", "", fmt.Errorf("bellows local's CA in %s: %w (delete the directory to make a new one)", caDir, err)
	}
	clientDir = filepath.Join(root, "client")
	nodeDir = filepath.Join(dataDir, "tls")
	for _, d := range []struct {
		dir  string
		role tlsconfig.Role
		name string
	}{{clientDir, tlsconfig.Client, "bellows-local-client"}, {nodeDir, tlsconfig.Node, "bellows-local-node"}} {
		if _, err := tlsconfig.Dial(d.dir); err == nil && tlsconfig.DirRole(d.dir) == d.role.String() {
			continue
		}
		cert, key, err := ca.Issue(d.name, d.role, nil, time.Now().Add(-time.Minute), 365*24*time.Hour)
		if err != nil {
			return "", "", err
		}
		if err := tlsconfig.WriteDir(d.dir, ca.PEM, cert, key); err != nil {
			return "", "", err
		}
	}
	return nodeDir, clientDir, nil
}

// newLocalCA makes the CA in a directory of its own and renames it into
// caDir, so two bellows local starting at once agree on one CA.
func newLocalCA(root, caDir string) (*tlsconfig.CA, error) {
	if err := os.MkdirAll(root, 0o700); err != nil {
		return nil, err
	}
	tmp, err := os.MkdirTemp(root, ".ca-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	ca, err := tlsconfig.NewCA("bellows local CA", 10*365*24*time.Hour)
	if err != nil {
		return nil, err
	}
	if err := ca.SaveCA(tmp); err != nil {
		return nil, err
	}
	if err := os.Rename(tmp, caDir); err != nil {
		// Another bellows local made it first.
		return tlsconfig.LoadCA(caDir)
	}
	return ca, nil
}
