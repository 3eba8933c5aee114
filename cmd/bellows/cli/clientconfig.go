package cli

import (
	"errors"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/bellows-kv/bellows/internal/clientcreds"
)

// The client's configuration file, as kubectl's kubeconfig: named contexts,
// each a cluster's seeds and credentials, and the current one. A context
// fills in what neither a flag nor an environment variable gave. The file
// and its lookup are internal/clientcreds', which the Go client shares
// (client.Options.FindCredentials).
const (
	envConfig   = clientcreds.EnvConfig
	envContext  = clientcreds.EnvContext
	flagContext = clientcreds.FlagContext
)

// activeContext is the context the running command uses (nil: none).
var activeContext *clientcreds.Context

// contextFlag is --context.
var contextFlag string

func addContextFlag(fs *pflag.FlagSet) {
	contextFlag = ""
	fs.StringVar(&contextFlag, flagContext, "",
		"the context of the client configuration file ("+envConfig+", default "+clientcreds.DefaultConfigPath()+") whose addr, tls-dir and token-file fill in what flags and the environment do not give (env "+envContext+"; default: its current-context)")
}

// useContext loads the context the command names (--context, else
// BELLOWS_CONTEXT, else the file's current-context) into activeContext,
// and gives *addr its addr when --addr was not given. No file and no
// context named: nothing to do.
func useContext(cmd *cobra.Command, addr *string) error {
	activeContext = nil
	c, err := clientcreds.LoadContext(contextFlag, "--"+flagContext)
	if err != nil {
		return credsError(err)
	}
	activeContext = c
	if c != nil && c.Addr != "" && !cmd.Flags().Changed("addr") {
		*addr = c.Addr
	}
	return nil
}

// credsError is an error of clientcreds as the command line reports it.
func credsError(err error) error {
	var e *clientcreds.Error
	if errors.As(err, &e) {
		return &userError{what: e.What, hint: e.Hint, cause: e.Err}
	}
	return err
}
