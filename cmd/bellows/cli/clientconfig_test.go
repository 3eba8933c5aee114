package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// A context of the client configuration file fills in --addr, --tls-dir
// and --token-file when neither a flag nor the environment gives them (its
// paths relative to the file), --context and BELLOWS_CONTEXT choose it over
// current-context, and a context or file that does not exist is named.
func TestAContextFillsInWhatFlagsAndEnvironmentLeaveOut(t *testing.T) {
	for _, env := range []string{envTLSDir, envToken, envTokenFile, envContext} {
		t.Setenv(env, "")
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(path, []byte(`current-context: prod
contexts:
- name: prod
  addr: prod.example:7400
  tls-dir: prod-client
- name: ci
  addr: ci.example:7400
  tls-dir: /abs/ci-ca
  token-file: ci-token
`), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "ci-token"), []byte("ci-secret-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv(envConfig, path)
	// run parses args as a kv command's flags and applies the context.
	run := func(args ...string) (addr string, err error) {
		cmd := &cobra.Command{Use: "x"}
		addr = defaultStoreAddr
		cmd.Flags().StringVar(&addr, "addr", addr, "")
		addClientTLSFlag(cmd.Flags())
		if err := cmd.Flags().Parse(args); err != nil {
			t.Fatal(err)
		}
		err = useContext(cmd, &addr)
		return addr, err
	}

	addr, err := run()
	if err != nil || addr != "prod.example:7400" {
		t.Fatalf("current-context: addr %q, %v", addr, err)
	}
	if d, from := clientTLSDirFrom(); d != filepath.Join(dir, "prod-client") || !strings.Contains(from, `context "prod"`) {
		t.Errorf("current-context: tls-dir %q from %s; want prod-client beside the file", d, from)
	}
	// Flags and the environment win over the context.
	t.Setenv(envTLSDir, "/from/env")
	if addr, _ = run("--addr", "flag.example:1"); addr != "flag.example:1" {
		t.Errorf("--addr given: %q", addr)
	}
	if d, _ := clientTLSDirFrom(); d != "/from/env" {
		t.Errorf("%s given: tls-dir %q", envTLSDir, d)
	}
	t.Setenv(envTLSDir, "")

	if addr, err = run("--context", "ci"); err != nil || addr != "ci.example:7400" {
		t.Fatalf("--context ci: addr %q, %v", addr, err)
	}
	if tok, from, err := clientToken(); tok != "ci-secret-token" || !strings.Contains(from, "token-file") || err != nil {
		t.Errorf("--context ci: token %q from %s, %v", tok, from, err)
	}
	t.Setenv(envContext, "ci")
	if addr, _ = run(); addr != "ci.example:7400" {
		t.Errorf("%s=ci: addr %q", envContext, addr)
	}
	t.Setenv(envContext, "")

	_, err = run("--context", "staging")
	if err == nil || !strings.Contains(err.Error(), `--context names the context "staging"`) || !strings.Contains(err.Error(), `["prod" "ci"]`) {
		t.Errorf("an unknown context: %v; want it named with the file's contexts", err)
	}
	t.Setenv(envConfig, filepath.Join(dir, "missing.yaml"))
	if _, err = run(); err == nil || !strings.Contains(err.Error(), "missing.yaml") {
		t.Errorf("%s naming a missing file: %v; want the file named", envConfig, err)
	}
	if err := os.WriteFile(path, []byte("contexts: [{name: x, adress: y}]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv(envConfig, path)
	if _, err = run(); err == nil || !strings.Contains(err.Error(), "adress") {
		t.Errorf("a misspelt key: %v; want it named", err)
	}
	// No file at the default place and nothing asked: nothing applies.
	t.Setenv(envConfig, "")
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	t.Setenv("HOME", t.TempDir())
	if addr, err = run(); err != nil || addr != defaultStoreAddr || activeContext != nil {
		t.Errorf("no file: addr %q, context %v, %v", addr, activeContext, err)
	}
}
