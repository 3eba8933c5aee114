package tlsconfig

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
)

// Tokens: the bearer tokens a store takes beside client certificates
// (docs/security.md, section 3), for clients that cannot hold a
// certificate. A tokens file holds one token per line:
//
//	ROLE SHA256 NAME
//
// ROLE is read, write or admin; SHA256 is the token's SHA-256 in hex (64
// characters); NAME, without spaces, names the token in refusals and logs.
// '#' starts a comment; blank lines are skipped. Only hashes are kept, so a
// leaked file gives no token away; TokenLine writes a line. Tokens should
// be random (NewToken): the hash is not salted.
//
// A client presents a token as the gRPC metadata "authorization: Bearer
// TOKEN", over TLS only, and without a certificate: a call that comes with
// a certificate is authorized by the certificate.

// MinTokenLength is the shortest token TokenLine accepts: a token is a
// random secret, not a password.
const MinTokenLength = 16

// Token is what a tokens file says of one token.
type Token struct {
	Name string
	Role Role
}

// tokenTable maps a token's SHA-256 to its entry.
type tokenTable map[[sha256.Size]byte]Token

// Tokens is a tokens file, reloaded when it changes (checked at most once
// a second, as TLS material is): a Secret's update takes effect without a
// restart. A reload that fails keeps the previous table and is logged.
type Tokens struct {
	path string
	log  *slog.Logger

	mu      sync.Mutex
	checked time.Time
	seen    os.FileInfo // the version of the file last read, parsed or not
	table   tokenTable
	lastErr string // the last failure logged, so it is logged once
}

// LoadTokens reads the tokens file at path; log reports its reloads (nil
// discards). A file that does not parse is an error here, naming each bad
// line.
func LoadTokens(path string, log *slog.Logger) (*Tokens, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	t := &Tokens{path: path, log: log}
	fi, table, err := readTokens(path)
	if err != nil {
		return nil, err
	}
	t.seen, t.table, t.checked = fi, table, time.Now()
	return t, nil
}

// Len is how many tokens the table holds now.
func (t *Tokens) Len() int {
	return len(t.current())
}

// Lookup is the entry of token, reloading the file first if it changed.
func (t *Tokens) Lookup(token string) (Token, bool) {
	e, ok := t.current()[sha256.Sum256([]byte(token))]
	return e, ok
}

// current is the table, reloaded if the file changed since it was read.
func (t *Tokens) current() tokenTable {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := time.Now()
	if now.Sub(t.checked) < reloadEvery {
		return t.table
	}
	t.checked = now
	fi, err := os.Stat(t.path)
	if err != nil {
		t.failed(fmt.Errorf("tokens: %w", err))
		return t.table
	}
	if sameVersion(t.seen, fi) {
		return t.table
	}
	fi, table, err := readTokens(t.path)
	if fi != nil {
		// Parsed or not, this version is not read again: a bad file is
		// logged once, and the next change is read.
		t.seen = fi
	}
	if err != nil {
		t.failed(err)
		return t.table
	}
	t.table, t.lastErr = table, ""
	t.log.Info("tokens file reloaded", "path", t.path, "tokens", len(table))
	return t.table
}

func (t *Tokens) failed(err error) {
	if err.Error() == t.lastErr {
		return
	}
	t.lastErr = err.Error()
	t.log.Error("tokens file not reloaded; the tokens read before stay in force", "path", t.path, "tokens", len(t.table), "err", err)
}

// sameVersion: b is the file a was (same inode, modification time and
// size). A Secret's volume replaces its files; WriteTokens renames.
func sameVersion(a, b os.FileInfo) bool {
	return a != nil && os.SameFile(a, b) && a.ModTime().Equal(b.ModTime()) && a.Size() == b.Size()
}

// readTokens reads and parses the file at path; fi is the version read
// (nil if it could not be opened).
func readTokens(path string) (os.FileInfo, tokenTable, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, fmt.Errorf("tokens: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, nil, fmt.Errorf("tokens: %w", err)
	}
	data, err := io.ReadAll(f)
	if err != nil {
		return fi, nil, fmt.Errorf("tokens: %w", err)
	}
	table, err := ParseTokens(path, data)
	return fi, table, err
}

// ParseTokens parses a tokens file's content; name (its path) is in every
// error, with the line number and the problem. A field that is not a hash
// is never repeated in an error: it may be a token pasted by mistake.
func ParseTokens(name string, data []byte) (map[[sha256.Size]byte]Token, error) {
	table := tokenTable{}
	firstLine := map[[sha256.Size]byte]int{}
	var errs []error
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line, _, _ := strings.Cut(sc.Text(), "#")
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		bad := func(format string, args ...any) {
			errs = append(errs, fmt.Errorf("tokens: %s:%d: "+format, append([]any{name, n}, args...)...))
		}
		if len(f) != 3 {
			bad("%d fields; want ROLE SHA256 NAME (the role, the token's SHA-256 in hex, a name without spaces)", len(f))
			continue
		}
		role, err := ParseRole(f[0])
		switch {
		case err != nil:
			bad("unknown role %q (want read, write or admin)", f[0])
			continue
		case role == Node:
			bad("the role node is for the certificates of stores and workers; a token's role is read, write or admin")
			continue
		}
		b, err := hex.DecodeString(f[1])
		if err != nil || len(b) != sha256.Size {
			bad("the second field (%d characters) is not a SHA-256 in hex (64 characters): write the token's hash, not the token (tlsconfig.TokenLine, or `printf %%s TOKEN | sha256sum`)", len(f[1]))
			continue
		}
		sum := [sha256.Size]byte(b)
		if prev, dup := firstLine[sum]; dup {
			bad("the token of %q is the token of line %d: each token has one role", f[2], prev)
			continue
		}
		firstLine[sum] = n
		table[sum] = Token{Name: f[2], Role: role}
	}
	if err := sc.Err(); err != nil {
		errs = append(errs, fmt.Errorf("tokens: %s: %w", name, err))
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return table, nil
}

// HashToken is the SHA-256 of token in hex, as a tokens file holds it.
func HashToken(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}

// TokenLine is the tokens-file line (without its newline) that gives token
// role under name: "ROLE SHA256 NAME". The role is Reader, Writer or
// Admin; the token is at least MinTokenLength printable ASCII characters
// without spaces (it travels as gRPC metadata); the name has no spaces.
func TokenLine(role Role, token, name string) (string, error) {
	if role != Reader && role != Writer && role != Admin {
		return "", fmt.Errorf("tokens: a token's role is read, write or admin, not %s", roleName(role))
	}
	if len(token) < MinTokenLength {
		return "", fmt.Errorf("tokens: a token of %d characters is too short: use at least %d random ones (NewToken)", len(token), MinTokenLength)
	}
	for _, c := range token {
		if c <= ' ' || c > '~' {
			return "", errors.New("tokens: a token is printable ASCII without spaces (it is sent as gRPC metadata)")
		}
	}
	if name == "" || strings.ContainsAny(name, " \t\r\n#") {
		return "", fmt.Errorf("tokens: the name %q must be non-empty, without spaces or '#'", name)
	}
	return role.String() + " " + HashToken(token) + " " + name, nil
}

func roleName(r Role) string {
	if s := r.String(); s != "" {
		return s
	}
	return fmt.Sprintf("Role(%d)", int(r))
}

// NewToken is a random token: at least 256 bits, in base32 (52 characters).
func NewToken() string {
	return rand.Text() + rand.Text()
}

// WriteTokens writes a tokens file of lines (TokenLine's) beside path and
// renames it into place, so a store reloading it never reads half a file.
func WriteTokens(path string, lines []string) error {
	tmp := path + ".tmp"
	data := strings.Join(lines, "\n") + "\n"
	if err := os.WriteFile(tmp, []byte(data), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// ServerWithTokens is Server for a store that also takes tokens
// (AuthorizeWithTokens): a client may connect without a certificate, and
// every call it makes must then carry a token. A certificate, when one is
// presented, is verified as Server verifies it.
func ServerWithTokens(dir string) (grpc.ServerOption, error) {
	m, err := load(dir)
	if err != nil {
		return nil, err
	}
	// A client without a certificate authenticates per call, by token.
	return grpc.Creds(credentials.NewTLS(m.serverConfig(false))), nil
}

// DialCA returns the gRPC option that dials TLS trusting dir's ca.crt and
// presenting no certificate, even if dir holds one: for a client that
// authenticates with a token. dir needs only ca.crt, reloaded as it
// changes.
func DialCA(dir string) (grpc.DialOption, error) {
	if dir == "" {
		return nil, errors.New("tls: no TLS directory: a client with a token needs the cluster's CA (ca.crt); a token is never sent without TLS")
	}
	m := &material{dir: dir, caOnly: true}
	if err := m.reload(); err != nil {
		return nil, err
	}
	return grpc.WithTransportCredentials(credentials.NewTLS(m.clientConfig())), nil
}
