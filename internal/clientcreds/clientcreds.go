// Package clientcreds finds a client's seeds and credentials the way the
// bellows command line does, for the CLI (bellows kv, backup create) and
// for the Go client (client.Options.FindCredentials) alike:
//
//   - a TLS directory (tls.crt, tls.key, ca.crt) or plaintext: the caller's
//     (--tls-dir), else BELLOWS_TLS_DIR, else the context's tls-dir, else
//     Auto: bellows local's client certificate for seeds on this machine
//     that serve TLS, and plaintext otherwise;
//   - a token presented instead of a certificate: the caller's
//     (--token-file), else BELLOWS_TOKEN or BELLOWS_TOKEN_FILE, else the
//     context's token-file;
//   - the seeds: the caller's (--addr), else the context's addr.
//
// The context is one of the client configuration file's (BELLOWS_CONFIG,
// default $XDG_CONFIG_HOME/bellows/config.yaml), as kubectl's kubeconfig:
// the caller's (--context), else BELLOWS_CONTEXT, else the file's
// current-context.
package clientcreds

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc"
	"sigs.k8s.io/yaml"

	"github.com/bellows-kv/bellows/internal/contract"
	"github.com/bellows-kv/bellows/internal/tlsconfig"
)

// The environment variables, and the names the command line gives the same
// settings (its flags), which messages use.
const (
	EnvConfig    = "BELLOWS_CONFIG"
	EnvContext   = "BELLOWS_CONTEXT"
	EnvTLSDir    = "BELLOWS_TLS_DIR"
	EnvToken     = "BELLOWS_TOKEN"
	EnvTokenFile = "BELLOWS_TOKEN_FILE"

	FlagContext   = "context"
	FlagTokenFile = "token-file"
)

// Auto is the TLS directory that means: for a store on this machine (a
// loopback address), bellows local's client certificate if the store
// serves TLS; else plaintext.
const Auto = "auto"

// Error is a failure as the command line reports it: what went wrong and
// what to do about it.
type Error struct {
	What, Hint string
	Err        error
}

func (e *Error) Error() string {
	if e.Hint == "" {
		return e.What
	}
	return e.What + "\n  hint: " + e.Hint
}

func (e *Error) Unwrap() error { return e.Err }

// DefaultConfigPath is where the client configuration file is when
// BELLOWS_CONFIG does not say.
func DefaultConfigPath() string {
	d, err := os.UserConfigDir()
	if err != nil {
		return "$XDG_CONFIG_HOME/bellows/config.yaml"
	}
	return filepath.Join(d, "bellows", "config.yaml")
}

// configFile is the client configuration file's shape:
//
//	current-context: prod
//	contexts:
//	- name: prod
//	  addr: demo.prod.example:7400
//	  tls-dir: prod-client-write      # relative to the file's directory
//	  token-file: ""                  # or a token instead of a certificate
type configFile struct {
	CurrentContext string    `json:"current-context,omitempty"`
	Contexts       []Context `json:"contexts"`
}

// Context is one cluster's seeds and credentials, its paths absolute.
type Context struct {
	Name      string `json:"name"`
	Addr      string `json:"addr,omitempty"`
	TLSDir    string `json:"tls-dir,omitempty"`
	TokenFile string `json:"token-file,omitempty"`
	// File is where it was read, for messages.
	File string `json:"-"`
}

// Source names where a context's setting came from, for messages.
func (c *Context) Source(key string) string {
	return fmt.Sprintf("%s of context %q (%s)", key, c.Name, c.File)
}

// LoadContext is the context named name (from says where the name came
// from, for messages; "" for none given), else BELLOWS_CONTEXT's, else the
// file's current-context. No file and no context named: nil, no error.
func LoadContext(name, from string) (*Context, error) {
	path, explicit := os.Getenv(EnvConfig), true
	if path == "" {
		path, explicit = DefaultConfigPath(), false
	}
	if name == "" {
		name, from = os.Getenv(EnvContext), EnvContext
	}
	data, err := os.ReadFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist) && !explicit && name == "":
		return nil, nil
	case err != nil:
		return nil, &Error{What: "the client configuration " + path + ": " + err.Error(),
			Hint: "set " + EnvConfig + " to a file of contexts (docs/security.md), or unset it and " + EnvContext + " and --" + FlagContext, Err: err}
	}
	var f configFile
	if err := yaml.UnmarshalStrict(data, &f); err != nil {
		return nil, &Error{What: "the client configuration " + path + ": " + err.Error(),
			Hint: "it holds current-context and contexts, each with name, addr, tls-dir and token-file", Err: err}
	}
	if name == "" {
		name, from = f.CurrentContext, "current-context in "+path
	}
	if name == "" {
		return nil, nil
	}
	i := slices.IndexFunc(f.Contexts, func(c Context) bool { return c.Name == name })
	if i < 0 {
		var names []string
		for _, c := range f.Contexts {
			names = append(names, c.Name)
		}
		return nil, &Error{What: fmt.Sprintf("%s names the context %q, which %s does not hold", from, name, path),
			Hint: fmt.Sprintf("its contexts are %q", names)}
	}
	c := f.Contexts[i]
	c.File = path
	dir := filepath.Dir(path)
	for _, p := range []*string{&c.TLSDir, &c.TokenFile} {
		if *p != "" && !filepath.IsAbs(*p) {
			*p = filepath.Join(dir, *p)
		}
	}
	return &c, nil
}

// ParseSeeds splits a comma-separated list of seed addresses (what names
// it in errors: "--addr") and gives an address without a port the store's
// port: gRPC would otherwise dial 443, the https default, and wait there.
func ParseSeeds(what, addr string) ([]string, error) {
	var seeds []string
	for _, a := range strings.Split(addr, ",") {
		a = strings.TrimSpace(a)
		if a == "" {
			continue
		}
		host, port, err := net.SplitHostPort(a)
		switch {
		case err == nil && host == "":
			return nil, fmt.Errorf("%s %q: no host before the port (write 127.0.0.1%s, say)", what, a, a)
		case err == nil:
			if _, err := strconv.ParseUint(port, 10, 16); err != nil {
				return nil, fmt.Errorf("%s %q: port %q is not a number from 0 to 65535", what, a, port)
			}
		case strings.Contains(err.Error(), "missing port") || net.ParseIP(strings.Trim(a, "[]")) != nil:
			// A bare IPv6 address has colons but no brackets.
			a = net.JoinHostPort(strings.Trim(a, "[]"), strconv.Itoa(contract.StoreGRPCPort))
		default:
			return nil, fmt.Errorf("%s %q: want HOST or HOST:PORT: %v", what, a, err)
		}
		seeds = append(seeds, a)
	}
	return seeds, nil
}

// Setting is a value the caller gave (a flag), and whether it gave it.
type Setting struct {
	Value string
	Set   bool
	// From names it in messages: "--tls-dir".
	From string
}

// TLSDir is the TLS directory: given, else BELLOWS_TLS_DIR, else the
// context's tls-dir (ctx may be nil), else Auto; and where it came from.
func TLSDir(given Setting, ctx *Context) (dir, from string) {
	if given.Set {
		return given.Value, given.From
	}
	if v := os.Getenv(EnvTLSDir); v != "" {
		return v, EnvTLSDir
	}
	if ctx != nil && ctx.TLSDir != "" {
		return ctx.TLSDir, ctx.Source("tls-dir")
	}
	return Auto, given.From
}

// Token is the token to present ("" for none) and where it came from: the
// file given, else BELLOWS_TOKEN or BELLOWS_TOKEN_FILE, else the context's
// token-file (ctx may be nil).
func Token(given Setting, ctx *Context) (token, from string, err error) {
	var file string
	switch env, envFile := os.Getenv(EnvToken), os.Getenv(EnvTokenFile); {
	case given.Set:
		file, from = given.Value, given.From
		if file == "" {
			return "", "", nil
		}
	case env != "" && envFile != "":
		return "", "", &Error{What: EnvToken + " and " + EnvTokenFile + " are both set", Hint: "set one: the token, or the file that holds it (--" + FlagTokenFile + " wins over both)"}
	case env != "":
		return strings.TrimSpace(env), EnvToken, nil
	case envFile != "":
		file, from = envFile, EnvTokenFile
	case ctx != nil && ctx.TokenFile != "":
		file, from = ctx.TokenFile, ctx.Source("token-file")
	default:
		return "", "", nil
	}
	data, err := os.ReadFile(file)
	if err != nil {
		return "", "", &Error{What: from + ": " + err.Error(), Hint: "give the file that holds a token of the cluster (a Secret's key mounted as a file)", Err: err}
	}
	token = strings.TrimSpace(string(data))
	switch {
	case token == "":
		return "", "", &Error{What: from + " " + file + " is empty", Hint: "the file holds the token alone"}
	case strings.ContainsAny(token, " \t\r\n"):
		return "", "", &Error{What: from + " " + file + " holds more than one word", Hint: "the file holds the token alone (not a tokens file of the store's: ROLE SHA256 NAME lines)"}
	}
	return token, from, nil
}

// Dial is the dial options for seeds of the TLS directory dir (Auto:
// AutoTLSDir's; "": plaintext) and the token ("": none, a certificate or
// plaintext); dirFrom and tokenFrom name them in messages. A token goes
// with the option that sends it (tokenOption), over TLS only.
func Dial(dir, dirFrom, token, tokenFrom string, seeds []string, tokenOption func(string) grpc.DialOption) ([]grpc.DialOption, error) {
	if dir == Auto {
		dir = AutoTLSDir(seeds)
	}
	if token == "" {
		opt, err := tlsconfig.Dial(dir)
		if err != nil {
			hint := "give the directory of a client certificate of the cluster, or --tls-dir \"\" for a plaintext cluster"
			if CAOnly(dir) {
				hint = "the directory holds the cluster's CA but no client certificate: give a token too (--" + FlagTokenFile + ", " +
					EnvToken + " or " + EnvTokenFile + "), or the directory of a client certificate"
			}
			return nil, &Error{What: dirFrom + " " + dir + ": " + err.Error(), Hint: hint, Err: err}
		}
		return []grpc.DialOption{opt}, nil
	}
	if dir == "" {
		return nil, &Error{What: "a token (" + tokenFrom + ") is sent over TLS only, and no TLS directory is given",
			Hint: "give --" + contract.FlagTLSDir + " (or " + EnvTLSDir + ") with the cluster's CA as ca.crt"}
	}
	opt, err := tlsconfig.DialCA(dir)
	if err != nil {
		return nil, &Error{What: dirFrom + " " + dir + ": " + err.Error(),
			Hint: "with a token, the directory needs only the cluster's CA (ca.crt)", Err: err}
	}
	return []grpc.DialOption{opt, tokenOption(token)}, nil
}

// CAOnly: dir holds a CA but no certificate (a token client's directory).
func CAOnly(dir string) bool {
	_, caErr := os.Stat(filepath.Join(dir, tlsconfig.CAFile))
	_, certErr := os.Stat(filepath.Join(dir, tlsconfig.CertFile))
	return caErr == nil && errors.Is(certErr, fs.ErrNotExist)
}

// LocalClientDir is where bellows local keeps the CLI's client
// certificate (under the user's configuration directory).
func LocalClientDir() (string, error) {
	root, err := tlsconfig.LocalRoot()
	if err != nil {
		return "", err
	}
	return filepath.Join(root, "client"), nil
}

// AutoTLSDir is bellows local's client directory when every seed is on this
// machine, the directory exists and the first seed serves TLS; else ""
// (plaintext). Asking the store is safe only on the loopback interface,
// where nothing can stand between the two and answer in its place.
func AutoTLSDir(seeds []string) string {
	dir, err := LocalClientDir()
	if err != nil || len(seeds) == 0 {
		return ""
	}
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
