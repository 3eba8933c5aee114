package cli

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/bellows-kv/bellows/internal/tlsconfig"
)

// parseCredentialFlags binds the client's credential flags to a fresh flag
// set and parses args.
func parseCredentialFlags(t *testing.T, args ...string) {
	t.Helper()
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	addClientTLSFlag(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
}

// --tls-dir and --token-file win over BELLOWS_TLS_DIR, BELLOWS_TOKEN and
// BELLOWS_TOKEN_FILE; without them the environment gives the defaults; a
// token file holds the token alone.
func TestClientCredentialsFlagsWinOverTheEnvironment(t *testing.T) {
	for _, env := range []string{envTLSDir, envToken, envTokenFile} {
		t.Setenv(env, "")
	}
	dir := t.TempDir()
	file := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	fromFlag, fromEnvFile := file("flag", "flag-token\n"), file("env", "  env-file-token\n")

	parseCredentialFlags(t)
	if d, from := clientTLSDirFrom(); d != tlsAuto || from != "--tls-dir" {
		t.Errorf("no flag, no env: --tls-dir %q from %s; want auto", d, from)
	}
	if tok, _, err := clientToken(); tok != "" || err != nil {
		t.Errorf("no flag, no env: token %q, %v; want none", tok, err)
	}

	t.Setenv(envTLSDir, "/from/env")
	t.Setenv(envToken, "env-token")
	parseCredentialFlags(t)
	if d, from := clientTLSDirFrom(); d != "/from/env" || from != envTLSDir {
		t.Errorf("env only: --tls-dir %q from %s", d, from)
	}
	if tok, from, err := clientToken(); tok != "env-token" || from != envToken || err != nil {
		t.Errorf("env only: token %q from %s, %v", tok, from, err)
	}
	parseCredentialFlags(t, "--tls-dir", "", "--token-file", fromFlag)
	if d, _ := clientTLSDirFrom(); d != "" {
		t.Errorf("--tls-dir \"\" with %s set: %q; want plaintext", envTLSDir, d)
	}
	if tok, from, err := clientToken(); tok != "flag-token" || from != "--token-file" || err != nil {
		t.Errorf("--token-file with %s set: token %q from %s, %v", envToken, tok, from, err)
	}
	parseCredentialFlags(t, "--token-file", "")
	if tok, _, err := clientToken(); tok != "" || err != nil {
		t.Errorf("--token-file \"\" with %s set: token %q, %v; want none", envToken, tok, err)
	}

	t.Setenv(envTokenFile, fromEnvFile)
	parseCredentialFlags(t)
	if _, _, err := clientToken(); err == nil || !strings.Contains(err.Error(), "BELLOWS_TOKEN and BELLOWS_TOKEN_FILE are both set") {
		t.Errorf("both token variables: %v; want a refusal", err)
	}
	t.Setenv(envToken, "")
	if tok, from, err := clientToken(); tok != "env-file-token" || from != envTokenFile || err != nil {
		t.Errorf("%s: token %q from %s, %v", envTokenFile, tok, from, err)
	}

	for name, content := range map[string]string{"empty": "\n", "two words": "read 0123 app\n"} {
		parseCredentialFlags(t, "--token-file", file(name, content))
		if _, _, err := clientToken(); err == nil || !strings.Contains(err.Error(), "the file holds the token alone") {
			t.Errorf("a token file that is %s: %v", name, err)
		}
	}
	parseCredentialFlags(t, "--token-file", filepath.Join(dir, "missing"))
	if _, _, err := clientToken(); err == nil || !strings.Contains(err.Error(), "--token-file: open "+filepath.Join(dir, "missing")) {
		t.Errorf("a missing token file: %v", err)
	}
}

// A token is never dialled without TLS; with it, the TLS directory needs
// only the CA.
func TestATokenNeedsTLS(t *testing.T) {
	t.Setenv(envTLSDir, "")
	t.Setenv(envToken, "")
	t.Setenv(envTokenFile, "")
	token := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(token, []byte(tlsconfig.NewToken()), 0o600); err != nil {
		t.Fatal(err)
	}
	parseCredentialFlags(t, "--tls-dir", "", "--token-file", token)
	if _, err := clientDial("10.0.0.1:7400"); err == nil || !strings.Contains(err.Error(), "a token (--token-file) is sent over TLS only") {
		t.Errorf("a token without TLS: %v", err)
	}
	empty := t.TempDir()
	parseCredentialFlags(t, "--tls-dir", empty, "--token-file", token)
	if _, err := clientDial("10.0.0.1:7400"); err == nil || !strings.Contains(err.Error(), filepath.Join(empty, "ca.crt")) {
		t.Errorf("a token with a directory without ca.crt: %v; want the file named", err)
	}
	ca, err := tlsconfig.NewCA("test", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(empty, "ca.crt"), ca.PEM, 0o644); err != nil {
		t.Fatal(err)
	}
	if opts, err := clientDial("10.0.0.1:7400"); err != nil || len(opts) != 2 {
		t.Errorf("a token with a CA-only directory: %d options, %v", len(opts), err)
	}
}

// The refusals of a store that takes tokens get hints that say what to do.
func TestExplainSaysWhatToDoAboutATokensRefusal(t *testing.T) {
	for _, tc := range []struct {
		err        error
		what, hint string
	}{
		{status.Error(codes.Unauthenticated, tlsconfig.UnknownTokenMessage), tlsconfig.UnknownTokenMessage, "mistyped, revoked or was rotated"},
		{status.Error(codes.Unauthenticated, tlsconfig.NoCredentialMessage), "neither a client certificate nor a token", "give a token of the cluster (--token-file FILE, BELLOWS_TOKEN or BELLOWS_TOKEN_FILE)"},
		{status.Error(codes.PermissionDenied, `/bellows.kv.v1.KV/Put needs the write role; the token "ci" has read`), `the token "ci" has read`, "the role of the token does not allow this call"},
		{status.Error(codes.PermissionDenied, `/bellows.kv.v1.KV/Put needs the write role; the client certificate "ci" has read`), "certificate", "the role of the certificate in --tls-dir does not allow this call"},
	} {
		got := explain(tc.err, 10*time.Second).Error()
		if strings.Contains(got, "rpc error") || !strings.Contains(got, tc.what) || !strings.Contains(got, "hint: ") || !strings.Contains(got, tc.hint) {
			t.Errorf("explain(%v) = %q, want %q and a hint with %q", tc.err, got, tc.what, tc.hint)
		}
	}
	// A token client refused at the handshake by a store that takes no
	// tokens is told so; a store that takes tokens is not mistaken for one.
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
	for _, tc := range []struct {
		name   string
		server func(string) (grpc.ServerOption, error)
		want   bool
	}{{"a store without tokens", tlsconfig.Server, true}, {"a store with tokens", tlsconfig.ServerWithTokens, false}} {
		opt, err := tc.server(node)
		if err != nil {
			t.Fatal(err)
		}
		s := grpc.NewServer(opt)
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		go func() { _ = s.Serve(l) }()
		tokenSeeds = []string{l.Addr().String()}
		got := explain(status.Error(codes.Unavailable, "connection error: write: broken pipe"), time.Second).Error()
		if strings.Contains(got, "it takes no tokens") != tc.want {
			t.Errorf("%s: %q; want the hint that it takes no tokens: %v", tc.name, got, tc.want)
		}
		s.Stop()
	}
	tokenSeeds = nil
}
