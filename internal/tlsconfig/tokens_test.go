package tlsconfig

import (
	"bytes"
	"context"
	"crypto/tls"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

func tokenLine(t *testing.T, role Role, token, name string) string {
	t.Helper()
	l, err := TokenLine(role, token, name)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// A tokens file's lines give each token's role and name; comments and
// blank lines are skipped; a token not in it is unknown.
func TestATokensFileGivesEachTokenItsRole(t *testing.T) {
	r, w, a := NewToken(), NewToken(), NewToken()
	data := strings.Join([]string{
		"# tokens of the cluster",
		"",
		tokenLine(t, Reader, r, "ci-reader"),
		"   " + tokenLine(t, Writer, w, "app") + "   # the application",
		"admin " + strings.ToUpper(HashToken(a)) + " ops", // hex in either case
	}, "\n")
	table, err := ParseTokens("tokens", []byte(data))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	tokens, err := LoadTokens(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(table) != 3 || tokens.Len() != 3 {
		t.Fatalf("parsed %d tokens, loaded %d; want 3", len(table), tokens.Len())
	}
	for token, want := range map[string]Token{r: {"ci-reader", Reader}, w: {"app", Writer}, a: {"ops", Admin}} {
		if got, ok := tokens.Lookup(token); !ok || got != want {
			t.Errorf("token of %s: %+v %v; want %+v", want.Name, got, ok, want)
		}
	}
	if got, ok := tokens.Lookup(NewToken()); ok {
		t.Errorf("an unknown token was found: %+v", got)
	}
	if _, ok := tokens.Lookup(HashToken(r)); ok {
		t.Error("a token's hash was accepted as the token")
	}
}

// Each bad line is named by the file, its number and the problem; a raw
// token pasted where its hash belongs is not repeated in the error.
func TestABadTokensFileNamesEachBadLine(t *testing.T) {
	pasted := NewToken()
	h := HashToken(NewToken())
	data := strings.Join([]string{
		"# ok",
		"read " + HashToken(NewToken()) + " fine",
		"write " + h,
		"root " + HashToken(NewToken()) + " x",
		"node " + HashToken(NewToken()) + " x",
		"read " + pasted + " oops",
		"admin " + h + " first",
		"write " + h + " again",
	}, "\n")
	_, err := ParseTokens("/etc/bellows/tokens", []byte(data))
	if err == nil {
		t.Fatal("a bad file parsed")
	}
	for _, want := range []string{
		"/etc/bellows/tokens:3: 2 fields; want ROLE SHA256 NAME",
		`/etc/bellows/tokens:4: unknown role "root" (want read, write or admin)`,
		"/etc/bellows/tokens:5: the role node is for the certificates of stores and workers",
		"/etc/bellows/tokens:6: the second field (52 characters) is not a SHA-256 in hex",
		`/etc/bellows/tokens:8: the token of "again" is the token of line 7`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error lacks %q:\n%v", want, err)
		}
	}
	if strings.Contains(err.Error(), pasted) {
		t.Errorf("the error repeats the pasted token:\n%v", err)
	}
	if strings.Contains(err.Error(), ":2:") {
		t.Errorf("a good line was refused:\n%v", err)
	}
}

// TokenLine refuses what a tokens file could not hold or should not.
func TestTokenLineRefusesWhatAFileCannotHold(t *testing.T) {
	for _, tc := range []struct {
		role        Role
		token, name string
		says        string
	}{
		{Node, NewToken(), "n", "read, write or admin, not node"},
		{Reader, "short", "n", "too short"},
		{Reader, "a token with spaces in it", "n", "without spaces"},
		{Reader, NewToken(), "two words", "without spaces"},
		{Reader, NewToken(), "", "non-empty"},
	} {
		if _, err := TokenLine(tc.role, tc.token, tc.name); err == nil || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("TokenLine(%v, %q, %q): %v; want an error saying %q", tc.role, tc.token, tc.name, err, tc.says)
		}
	}
}

// syncLog is a logger's output, safe to read while the logger writes.
type syncLog struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *syncLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *syncLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// A rewritten tokens file is read at the next check (at most once a
// second): a replaced token is refused and its replacement accepted; a
// file that does not parse keeps the tokens in force and is logged once,
// naming the line.
func TestARewrittenTokensFileIsReloaded(t *testing.T) {
	old, replacement := NewToken(), NewToken()
	path := filepath.Join(t.TempDir(), "tokens")
	if err := WriteTokens(path, []string{tokenLine(t, Writer, old, "app")}); err != nil {
		t.Fatal(err)
	}
	var logged syncLog
	tokens, err := LoadTokens(path, slog.New(slog.NewTextHandler(&logged, nil)))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := tokens.Lookup(old); !ok {
		t.Fatal("the first token is unknown")
	}
	nextCheck := func() {
		tokens.mu.Lock()
		tokens.checked = time.Time{} // as if a second passed
		tokens.mu.Unlock()
	}

	tokens.mu.Lock()
	tokens.checked = time.Now().Add(time.Hour) // a check just made, however long the write below takes
	tokens.mu.Unlock()
	if err := WriteTokens(path, []string{tokenLine(t, Writer, replacement, "app")}); err != nil {
		t.Fatal(err)
	}
	if _, ok := tokens.Lookup(replacement); ok {
		t.Error("the file was read again within a second of the last check")
	}
	nextCheck()
	if _, ok := tokens.Lookup(replacement); !ok {
		t.Error("the replacement is unknown after the file was rewritten")
	}
	if _, ok := tokens.Lookup(old); ok {
		t.Error("the replaced token is still accepted")
	}
	if !strings.Contains(logged.String(), "tokens file reloaded") {
		t.Errorf("the reload was not logged:\n%s", logged.String())
	}

	// A bad file: the tokens in force stay, and the error is logged once.
	if err := WriteTokens(path, []string{tokenLine(t, Reader, NewToken(), "r"), "admin nothex ops"}); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		nextCheck()
		if got, ok := tokens.Lookup(replacement); !ok || got.Role != Writer {
			t.Fatalf("after a bad rewrite, the token in force is %+v %v", got, ok)
		}
	}
	if n := strings.Count(logged.String(), "not reloaded"); n != 1 || !strings.Contains(logged.String(), path+":2: the second field") {
		t.Errorf("the bad file was logged %d times (want once, naming line 2):\n%s", n, logged.String())
	}

	// Fixed: read again.
	if err := WriteTokens(path, []string{tokenLine(t, Admin, old, "ops")}); err != nil {
		t.Fatal(err)
	}
	nextCheck()
	if got, ok := tokens.Lookup(old); !ok || got != (Token{"ops", Admin}) {
		t.Errorf("after the file was fixed: %+v %v", got, ok)
	}

	// A file that is gone keeps the tokens in force too.
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	nextCheck()
	if _, ok := tokens.Lookup(old); !ok {
		t.Error("a removed file dropped the tokens in force")
	}
}

// A store that takes tokens: a client without a certificate is authorized
// by its token's role; an unknown token, a malformed authorization and no
// credential at all are UNAUTHENTICATED; a certificate, when presented,
// decides (and is verified as before: another CA's is refused).
func TestAuthorizeWithTokens(t *testing.T) {
	ca, other := newCA(t), newCA(t)
	now := time.Now().Add(-time.Minute)
	r, w := NewToken(), NewToken()
	path := filepath.Join(t.TempDir(), "tokens")
	if err := WriteTokens(path, []string{tokenLine(t, Reader, r, "ci-reader"), tokenLine(t, Writer, w, "app")}); err != nil {
		t.Fatal(err)
	}
	tokens, err := LoadTokens(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	opt, err := ServerWithTokens(issue(t, ca, Node, now, time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	unary, stream := AuthorizeWithTokens(func(string) Role { return Writer }, tokens)
	addr := serveHealth(t, opt, grpc.ChainUnaryInterceptor(unary), grpc.ChainStreamInterceptor(stream))

	caOnly := t.TempDir()
	if err := os.WriteFile(filepath.Join(caOnly, CAFile), ca.PEM, 0o644); err != nil {
		t.Fatal(err)
	}
	noCert, err := DialCA(caOnly)
	if err != nil {
		t.Fatal(err)
	}
	// DialCA presents no certificate even from a full directory.
	readerDir := issue(t, ca, Reader, now, time.Hour)
	noCertFromFull, err := DialCA(readerDir)
	if err != nil {
		t.Fatal(err)
	}
	check := func(opt grpc.DialOption, authorization ...string) error {
		conn, err := grpc.NewClient(addr, opt)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		for _, a := range authorization {
			ctx = metadata.AppendToOutgoingContext(ctx, "authorization", a)
		}
		_, err = healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
		return err
	}
	unknown := NewToken()
	for _, tc := range []struct {
		name          string
		opt           grpc.DialOption
		authorization []string
		code          codes.Code
		says          string
	}{
		{"a write token", noCert, []string{"Bearer " + w}, codes.OK, ""},
		{"a write token, scheme in lower case", noCertFromFull, []string{"bearer " + w}, codes.OK, ""},
		{"a read token", noCert, []string{"Bearer " + r}, codes.PermissionDenied, `/grpc.health.v1.Health/Check needs the write role; the token "ci-reader" has read`},
		{"a read token from a certificate's directory", noCertFromFull, []string{"Bearer " + r}, codes.PermissionDenied, `the token "ci-reader" has read`},
		{"an unknown token", noCert, []string{"Bearer " + unknown}, codes.Unauthenticated, UnknownTokenMessage},
		{"no credential", noCert, nil, codes.Unauthenticated, "neither a client certificate nor a token: present a client certificate of the cluster (--tls-dir with tls.crt and tls.key) or a token (--token-file, BELLOWS_TOKEN"},
		{"not a bearer token", noCert, []string{"Basic " + w}, codes.Unauthenticated, `the authorization metadata is not "Bearer TOKEN"`},
		{"two tokens", noCert, []string{"Bearer " + w, "Bearer " + r}, codes.Unauthenticated, "more than one authorization value"},
		{"a reader's certificate with a write token", dial(t, readerDir), []string{"Bearer " + w}, codes.PermissionDenied, `the client certificate "test-" has read`},
		{"a writer's certificate", dial(t, issue(t, ca, Writer, now, time.Hour)), nil, codes.OK, ""},
	} {
		err := check(tc.opt, tc.authorization...)
		if status.Code(err) != tc.code || (tc.says != "" && !strings.Contains(err.Error(), tc.says)) {
			t.Errorf("%s: %v; want %v saying %q", tc.name, err, tc.code, tc.says)
		}
		if err != nil && strings.Contains(err.Error(), unknown) {
			t.Errorf("%s: the refusal repeats the token: %v", tc.name, err)
		}
	}
	// Another CA's certificate is still refused at the handshake: a
	// certificate, when given, is verified.
	foreignDir := issue(t, other, Writer, now, time.Hour)
	foreign, err := tls.LoadX509KeyPair(filepath.Join(foreignDir, CertFile), filepath.Join(foreignDir, KeyFile))
	if err != nil {
		t.Fatal(err)
	}
	conn, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true, Certificates: []tls.Certificate{foreign}, NextProtos: []string{"h2"}})
	if err == nil {
		_, err = conn.Read(make([]byte, 1)) // TLS 1.3 refuses on the first read
		conn.Close()
	}
	if err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("another CA's certificate: %v; want the handshake refused over the certificate", err)
	}
}

// DialCA needs only ca.crt, and names it when it is missing.
func TestDialCANamesTheMissingCA(t *testing.T) {
	dir := t.TempDir()
	if _, err := DialCA(dir); err == nil || !strings.Contains(err.Error(), filepath.Join(dir, CAFile)) || !strings.Contains(err.Error(), "a client with a token needs the cluster's CA") {
		t.Errorf("DialCA of an empty directory: %v; want an error naming %s", err, CAFile)
	}
	if _, err := DialCA(""); err == nil || !strings.Contains(err.Error(), "never sent without TLS") {
		t.Errorf("DialCA(\"\"): %v", err)
	}
	if _, err := Dial(dir); err == nil || !strings.Contains(err.Error(), "a TLS directory holds ca.crt, tls.crt and tls.key") {
		t.Errorf("Dial of an empty directory: %v", err)
	}
}
