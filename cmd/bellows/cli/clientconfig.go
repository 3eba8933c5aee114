package cli

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"sigs.k8s.io/yaml"
)

// The client's configuration file, as kubectl's kubeconfig: named contexts,
// each a cluster's seeds and credentials, and the current one. A context
// fills in what neither a flag nor an environment variable gave.
//
//	current-context: prod
//	contexts:
//	- name: prod
//	  addr: demo.prod.example:7400
//	  tls-dir: prod-client-write      # relative to the file's directory
//	  token-file: ""                  # or a token instead of a certificate
const (
	envConfig   = "BELLOWS_CONFIG"
	envContext  = "BELLOWS_CONTEXT"
	flagContext = "context"
)

// clientConfigFile is the file's shape.
type clientConfigFile struct {
	CurrentContext string          `json:"current-context,omitempty"`
	Contexts       []clientContext `json:"contexts"`
}

// clientContext is one cluster's seeds and credentials.
type clientContext struct {
	Name      string `json:"name"`
	Addr      string `json:"addr,omitempty"`
	TLSDir    string `json:"tls-dir,omitempty"`
	TokenFile string `json:"token-file,omitempty"`
	// file is where it was read, for messages and relative paths.
	file string
}

// activeContext is the context the running command uses (nil: none).
var activeContext *clientContext

// contextFlag is --context.
var contextFlag string

func addContextFlag(fs *pflag.FlagSet) {
	contextFlag = ""
	fs.StringVar(&contextFlag, flagContext, "",
		"the context of the client configuration file ("+envConfig+", default "+defaultConfigPath()+") whose addr, tls-dir and token-file fill in what flags and the environment do not give (env "+envContext+"; default: its current-context)")
}

func defaultConfigPath() string {
	d, err := os.UserConfigDir()
	if err != nil {
		return "$XDG_CONFIG_HOME/bellows/config.yaml"
	}
	return filepath.Join(d, "bellows", "config.yaml")
}

// useContext loads the context the command names (--context, else
// BELLOWS_CONTEXT, else the file's current-context) into activeContext,
// and gives *addr its addr when --addr was not given. No file and no
// context named: nothing to do.
func useContext(cmd *cobra.Command, addr *string) error {
	activeContext = nil
	path, explicit := os.Getenv(envConfig), true
	if path == "" {
		path, explicit = defaultConfigPath(), false
	}
	name, from := contextFlag, "--"+flagContext
	if name == "" {
		name, from = os.Getenv(envContext), envContext
	}
	data, err := os.ReadFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist) && !explicit && name == "":
		return nil
	case err != nil:
		return &userError{what: "the client configuration " + path + ": " + err.Error(),
			hint: "set " + envConfig + " to a file of contexts (docs/security.md), or unset it and " + envContext + " and --" + flagContext, cause: err}
	}
	var f clientConfigFile
	if err := yaml.UnmarshalStrict(data, &f); err != nil {
		return &userError{what: "the client configuration " + path + ": " + err.Error(),
			hint: "it holds current-context and contexts, each with name, addr, tls-dir and token-file", cause: err}
	}
	if name == "" {
		name, from = f.CurrentContext, "current-context in "+path
	}
	if name == "" {
		return nil
	}
	i := slices.IndexFunc(f.Contexts, func(c clientContext) bool { return c.Name == name })
	if i < 0 {
		var names []string
		for _, c := range f.Contexts {
			names = append(names, c.Name)
		}
		return &userError{what: fmt.Sprintf("%s names the context %q, which %s does not hold", from, name, path),
			hint: fmt.Sprintf("its contexts are %q", names)}
	}
	c := f.Contexts[i]
	c.file = path
	dir := filepath.Dir(path)
	for _, p := range []*string{&c.TLSDir, &c.TokenFile} {
		if *p != "" && !filepath.IsAbs(*p) {
			*p = filepath.Join(dir, *p)
		}
	}
	activeContext = &c
	if c.Addr != "" && !cmd.Flags().Changed("addr") {
		*addr = c.Addr
	}
	return nil
}

// contextSource names where a context's setting came from, for messages.
func (c *clientContext) source(key string) string {
	return fmt.Sprintf("%s of context %q (%s)", key, c.Name, c.file)
}
