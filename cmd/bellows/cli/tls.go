package cli

import (
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

	"github.com/bellows-kv/bellows/internal/contract"
	"github.com/bellows-kv/bellows/internal/tlsconfig"
)

// clientTLSDir is --tls-dir of the commands that call a store (kv, backup
// create): the client's certificate and key and the cluster's CA, "" for a
// plaintext cluster, or tlsAuto.
var clientTLSDir string

// tlsAuto: for a store on this machine (a loopback address), bellows
// local's client certificate if the store serves TLS; else plaintext.
const tlsAuto = "auto"

func addClientTLSFlag(fs *pflag.FlagSet) {
	root, _ := tlsconfig.LocalRoot()
	fs.StringVar(&clientTLSDir, contract.FlagTLSDir, tlsAuto,
		"directory of the client's TLS certificate (tls.crt, tls.key) and the cluster's CA (ca.crt); \"\" for a plaintext cluster; "+
			"auto: for a store on this machine that serves TLS, bellows local's ("+filepath.Join(root, "client")+"), else plaintext")
}

// clientDial is the dial option of --tls-dir for a command calling seeds.
func clientDial(seeds ...string) (grpc.DialOption, error) {
	dir := clientTLSDir
	if dir == tlsAuto {
		dir = autoTLSDir(seeds)
	}
	opt, err := tlsconfig.Dial(dir)
	if err != nil {
		return nil, &userError{what: "--" + contract.FlagTLSDir + " " + dir + ": " + err.Error(),
			hint: "give the directory of a client certificate of the cluster, or --tls-dir \"\" for a plaintext cluster"}
	}
	return opt, nil
}

// autoTLSDir is bellows local's client directory when every seed is on this
// machine, the directory exists and the first seed serves TLS; else ""
// (plaintext). Asking the store is safe only on the loopback interface,
// where nothing can stand between the two and answer in its place.
func autoTLSDir(seeds []string) string {
	root, err := tlsconfig.LocalRoot()
	if err != nil || len(seeds) == 0 {
		return ""
	}
	dir := filepath.Join(root, "client")
	if _, err := os.Stat(filepath.Join(dir, tlsconfig.CertFile)); err != nil {
		return ""
	}
	for _, s := range seeds {
		host, _, err := net.SplitHostPort(s)
		if err != nil {
			return ""
		}
		if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
			return ""
		}
	}
	if !tlsconfig.SpeaksTLS(seeds[0], 2*time.Second) {
		return ""
	}
	return dir
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
