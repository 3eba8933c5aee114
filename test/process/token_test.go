package process

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/bellows-kv/bellows/client"
	"github.com/bellows-kv/bellows/internal/tlsconfig"
	kvpb "github.com/bellows-kv/bellows/proto/bellows/kv/v1"
)

// tokenStore is a store serving TLS from a cluster's CA that also takes the
// tokens of a file.
type tokenStore struct {
	cluster tlsDirs
	s       *proc
	tokens  string // the tokens file
	caDir   string // a directory holding the cluster's ca.crt alone
}

// startTokenStore starts a one-region store with --tls-dir and
// --tokens-file holding lines (tlsconfig.TokenLine's).
func startTokenStore(t *testing.T, lines ...string) tokenStore {
	t.Helper()
	ts := tokenStore{cluster: newTLSCluster(t), tokens: filepath.Join(t.TempDir(), "tokens"), caDir: t.TempDir()}
	if err := tlsconfig.WriteTokens(ts.tokens, lines); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ts.caDir, tlsconfig.CAFile), ts.cluster.ca.PEM, 0o644); err != nil {
		t.Fatal(err)
	}
	ts.s = start(t, "store", append(storeArgs(t, "file://"+t.TempDir(), t.TempDir(), "Disabled", ""),
		"--tls-dir="+ts.cluster.node, "--tokens-file="+ts.tokens)...)
	return ts
}

// tokenLine is a tokens-file line giving token role under name.
func tokenLine(t *testing.T, role tlsconfig.Role, token, name string) string {
	t.Helper()
	l, err := tlsconfig.TokenLine(role, token, name)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// tempFile writes content to a new file and returns its path.
func tempFile(t *testing.T, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// bellowsEnv runs the bellows command line with env added to a
// environment cleared of the client's credential variables, and returns
// what it printed and how it exited.
func bellowsEnv(env []string, args ...string) (string, error) {
	cmd := exec.Command(binary, args...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "BELLOWS_TOKEN") && !strings.HasPrefix(kv, "BELLOWS_TLS_DIR=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, env...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// tokenConn is a connection that presents no certificate, trusting the
// cluster's CA, and sends token ("" for none) with every call.
func tokenConn(t *testing.T, ts tokenStore, token string) kvpb.KVClient {
	t.Helper()
	dial, err := tlsconfig.DialCA(ts.caDir)
	if err != nil {
		t.Fatal(err)
	}
	opts := []grpc.DialOption{dial}
	if token != "" {
		opts = append(opts, client.WithToken(token))
	}
	conn, err := grpc.NewClient(ts.s.grpc, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return kvpb.NewKVClient(conn)
}

func putWith(kv kvpb.KVClient, key string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := kv.Put(ctx, &kvpb.PutRequest{Key: []byte(key), Value: []byte("v")})
	return err
}

// What a client with a token may do is its token's role, beside clients
// with certificates: a read token reads but cannot write, a write token
// writes but cannot flush, an admin token flushes and takes backups; an
// unknown token and no credential at all are UNAUTHENTICATED, each with a
// message that says so (and never the token). The CLI takes the token from
// --token-file, BELLOWS_TOKEN or BELLOWS_TOKEN_FILE, and --tls-dir from
// BELLOWS_TLS_DIR.
func TestTokensBoundWhatAClientMayDo(t *testing.T) {
	read, write, admin := tlsconfig.NewToken(), tlsconfig.NewToken(), tlsconfig.NewToken()
	ts := startTokenStore(t, "# the cluster's tokens",
		tokenLine(t, tlsconfig.Reader, read, "ci-reader"), tokenLine(t, tlsconfig.Writer, write, "app"), tokenLine(t, tlsconfig.Admin, admin, "ops"))
	// A refusal is answered at once; the bound only has to outlast a CLI
	// process starting on a machine busy with the other packages' tests
	// (CI once took over 5 s to learn the regions).
	addr := []string{"--addr", ts.s.grpc, "--timeout", "30s"}
	kv := func(args ...string) []string { return append(append([]string{"kv"}, args...), addr...) }
	ok := func(env []string, args ...string) string {
		t.Helper()
		out, err := bellowsEnv(env, args...)
		if err != nil {
			t.Fatalf("bellows %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return out
	}
	fails := func(env []string, args ...string) string {
		t.Helper()
		out, err := bellowsEnv(env, args...)
		if err == nil {
			t.Fatalf("bellows %s succeeded; want a refusal:\n%s", strings.Join(args, " "), out)
		}
		return out
	}
	asReader := []string{"BELLOWS_TLS_DIR=" + ts.caDir, "BELLOWS_TOKEN=" + read}
	writeTokenFile := tempFile(t, write+"\n")
	asWriter := []string{"BELLOWS_TLS_DIR=" + ts.caDir, "BELLOWS_TOKEN_FILE=" + writeTokenFile}
	asAdmin := []string{"BELLOWS_TLS_DIR=" + ts.caDir, "BELLOWS_TOKEN=" + admin}

	ok(nil, kv("put", "k", "v", "--tls-dir", ts.caDir, "--token-file", writeTokenFile)...)
	if got := strings.TrimSpace(ok(asReader, kv("get", "k")...)); got != "v" {
		t.Fatalf("a read token's get: %q", got)
	}
	for _, tc := range []struct {
		who  string
		env  []string
		args []string
		says []string
	}{
		{"a read token's put", asReader, kv("put", "k", "x"),
			[]string{`/bellows.kv.v1.KV/Put needs the write role; the token "ci-reader" has read`, "the role of the token does not allow this call"}},
		{"a write token's flush", asWriter, kv("flush", "region-000"),
			[]string{`/bellows.kv.v1.Admin/Flush needs the admin role; the token "app" has write`, "the role of the token does not allow this call"}},
		{"a write token's backup", asWriter, append([]string{"backup", "create"}, addr...),
			[]string{`/bellows.kv.v1.Admin/Backup needs the admin role; the token "app" has write`}},
	} {
		out := fails(tc.env, tc.args...)
		for _, s := range tc.says {
			if !strings.Contains(out, s) {
				t.Errorf("%s: the refusal does not say %q:\n%s", tc.who, s, out)
			}
		}
	}
	if out := ok(asAdmin, kv("flush", "region-000")...); !strings.Contains(out, "OK flushed region-000") {
		t.Errorf("an admin token's flush: %s", out)
	}
	if out := ok(asAdmin, append([]string{"backup", "create"}, addr...)...); !strings.Contains(out, "OK backup") {
		t.Errorf("an admin token's backup: %s", out)
	}
	if got := strings.TrimSpace(ok(asReader, kv("get", "k")...)); got != "v" {
		t.Fatalf("after the refused writes, k is %q", got)
	}

	// An unknown token, from a flag that wins over the environment's. The
	// refusal is the answer: the client does not ask again until its
	// --timeout (30s) ends. It did, and a deadline that ended during a
	// question hid the refusal behind "context deadline exceeded".
	unknown := tlsconfig.NewToken()
	began := time.Now()
	out := fails(asAdmin, kv("get", "k", "--token-file", tempFile(t, unknown))...)
	if took := time.Since(began); took > 20*time.Second {
		t.Errorf("an unknown token was refused after %s: the client asked again until its timeout", took.Round(time.Second))
	}
	if !strings.Contains(out, "the token is not known to this cluster") || !strings.Contains(out, "revoked or was rotated") {
		t.Errorf("an unknown token: the refusal does not say the token is unknown, with a hint:\n%s", out)
	}
	if strings.Contains(out, unknown) {
		t.Errorf("the refusal repeats the token:\n%s", out)
	}
	// No credential: the CLI, with a directory that holds only the CA,
	// says so before it dials; a client that dials anyway is refused by
	// the store.
	if out := fails(nil, kv("get", "k", "--tls-dir", ts.caDir)...); !strings.Contains(out, "holds the cluster's CA but no client certificate: give a token too") {
		t.Errorf("the CLI with a CA and no token:\n%s", out)
	}
	for name, kvc := range map[string]kvpb.KVClient{"no credential": tokenConn(t, ts, ""), "an unknown token": tokenConn(t, ts, unknown)} {
		err := putWith(kvc, "k")
		want := map[string]string{"no credential": tlsconfig.NoCredentialMessage, "an unknown token": tlsconfig.UnknownTokenMessage}[name]
		if status.Code(err) != codes.Unauthenticated || status.Convert(err).Message() != want {
			t.Errorf("%s: %v; want UNAUTHENTICATED %q", name, err, want)
		}
	}

	// Certificates work beside tokens, with their own roles.
	now := time.Now().Add(-time.Minute)
	reader, writer := issueDir(t, ts.cluster.ca, tlsconfig.Reader, now), issueDir(t, ts.cluster.ca, tlsconfig.Writer, now)
	ok(asReader, kv("put", "c", "cert", "--tls-dir", writer, "--token-file", "")...)
	if got := strings.TrimSpace(ok(nil, kv("get", "c", "--tls-dir", reader)...)); got != "cert" {
		t.Errorf("a reader's certificate's get: %q", got)
	}
	if out := fails(nil, kv("put", "c", "x", "--tls-dir", reader)...); !strings.Contains(out, `needs the write role; the client certificate "test-3" has read`) {
		t.Errorf("a reader's certificate's put:\n%s", out)
	}

	// The Go client with a token.
	dial, err := tlsconfig.DialCA(ts.caDir)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := client.New(ctx, []string{ts.s.grpc}, client.Options{DialOptions: []grpc.DialOption{dial}, Token: write})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Put(ctx, []byte("go"), []byte("client")); err != nil {
		t.Fatalf("the Go client's put with a write token: %v", err)
	}
	rc, err := client.New(ctx, []string{ts.s.grpc}, client.Options{DialOptions: []grpc.DialOption{dial}, Token: read})
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	if v, found, err := rc.Get(ctx, []byte("go")); err != nil || !found || string(v) != "client" {
		t.Fatalf("the Go client's get with a read token: %q %v %v", v, found, err)
	}
	if _, err := rc.Put(ctx, []byte("go"), []byte("x")); status.Code(err) != codes.PermissionDenied {
		t.Errorf("the Go client's put with a read token: %v; want PERMISSION_DENIED", err)
	}
}

// A token is accepted over TLS only: a store given --tokens-file without
// --tls-dir does not start, and one with --tls-dir alone takes no token,
// which the CLI explains.
func TestTokensNeedTLSAndATokensFile(t *testing.T) {
	token := tlsconfig.NewToken()
	tokens := tempFile(t, tokenLine(t, tlsconfig.Admin, token, "ops")+"\n")
	out, err := exec.Command(binary, append(storeArgs(t, "file://"+t.TempDir(), t.TempDir(), "Disabled", ""),
		"--tokens-file="+tokens, "--listen=127.0.0.1:0", "--metrics-listen=127.0.0.1:0")...).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "--tokens-file: tokens are accepted over TLS only: give --tls-dir too") {
		t.Errorf("a store with --tokens-file and no --tls-dir: %v\n%s", err, out)
	}

	cluster := newTLSCluster(t)
	s := start(t, "store", append(storeArgs(t, "file://"+t.TempDir(), t.TempDir(), "Disabled", ""), "--tls-dir="+cluster.node)...)
	caDir := t.TempDir()
	if err := os.WriteFile(filepath.Join(caDir, tlsconfig.CAFile), cluster.ca.PEM, 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := bellowsEnv([]string{"BELLOWS_TOKEN=" + token}, "kv", "get", "k", "--addr", s.grpc, "--tls-dir", caDir, "--timeout", "3s")
	if err == nil || !strings.Contains(got, "it takes no tokens (it runs without --tokens-file)") {
		t.Errorf("a token to a store without --tokens-file: %v\n%s", err, got)
	}
	got, err = bellowsEnv([]string{"BELLOWS_TOKEN=" + token}, "kv", "get", "k", "--addr", s.grpc, "--tls-dir", "", "--timeout", "3s")
	if err == nil || !strings.Contains(got, "a token (BELLOWS_TOKEN) is sent over TLS only") {
		t.Errorf("a token without TLS: %v\n%s", err, got)
	}
}

// The tokens file replaced under a running store (as a Secret's update
// replaces it): the new token is accepted and the one it replaced refused,
// without a restart; a file that does not parse keeps the tokens in force,
// and the store logs the line at fault.
func TestRotatingTheTokensFileTakesEffectWithoutARestart(t *testing.T) {
	old, replacement := tlsconfig.NewToken(), tlsconfig.NewToken()
	ts := startTokenStore(t, tokenLine(t, tlsconfig.Writer, old, "app"))
	oldKV, newKV := tokenConn(t, ts, old), tokenConn(t, ts, replacement)
	if err := putWith(oldKV, "before"); err != nil {
		t.Fatalf("the first token: %v", err)
	}
	if err := putWith(newKV, "before"); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("the replacement before the rotation: %v; want UNAUTHENTICATED", err)
	}

	if err := tlsconfig.WriteTokens(ts.tokens, []string{tokenLine(t, tlsconfig.Writer, replacement, "app")}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the replacement token to be accepted", func() bool {
		err := putWith(newKV, "after")
		if err != nil && status.Code(err) != codes.Unauthenticated {
			t.Fatalf("the replacement token: %v", err)
		}
		return err == nil
	})
	if err := putWith(oldKV, "after"); status.Code(err) != codes.Unauthenticated || !strings.Contains(err.Error(), tlsconfig.UnknownTokenMessage) {
		t.Errorf("the replaced token after the rotation: %v; want UNAUTHENTICATED, not known", err)
	}

	// A bad file: logged with its line, and the tokens in force stay.
	if err := tlsconfig.WriteTokens(ts.tokens, []string{"# half an edit", "write " + old}); err != nil {
		t.Fatal(err)
	}
	// The file is looked at when a call comes (at most once a second).
	waitFor(t, "the store to log the bad tokens file", func() bool {
		if err := putWith(newKV, "still"); err != nil {
			t.Fatalf("the token in force after a bad rewrite: %v", err)
		}
		return strings.Contains(ts.s.stderr.String(), ts.tokens+":2: 2 fields")
	})
	if err := putWith(oldKV, "still"); status.Code(err) != codes.Unauthenticated {
		t.Errorf("the replaced token after a bad rewrite: %v; want UNAUTHENTICATED", err)
	}
	if strings.Contains(ts.s.stderr.String(), old) {
		t.Error("the store's log repeats a token")
	}
	select {
	case <-ts.s.exited:
		t.Fatal("the store exited")
	default:
	}
}
