package client

import (
	"os"
	"path/filepath"

	"google.golang.org/grpc"

	"github.com/bellows-kv/bellows/internal/tlsconfig"
)

// WithTLSDir is the dial option for a cluster with TLS, from a directory
// laid out as the operator's client Secrets are (ca.crt, tls.crt, tls.key):
// its certificate is presented, the stores' are checked against its CA and
// the name every node certificate carries, and the files are re-read when
// they change (a mounted Secret renewed). A directory without tls.crt (a
// token Secret's: ca.crt and token) presents no certificate; pair it with
// a token (Options.Token).
func WithTLSDir(dir string) (grpc.DialOption, error) {
	if _, err := os.Stat(filepath.Join(dir, tlsconfig.CertFile)); os.IsNotExist(err) {
		return tlsconfig.DialCA(dir)
	}
	return tlsconfig.Dial(dir)
}
