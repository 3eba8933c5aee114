// Command bellows is the production binary of Bellows: storage pod,
// compaction worker, operator, embedded local cluster and client. It is
// wiring only (cli binds flags to each role's config; the roles live in
// store/, compactor/ and operator/ beside it). Benchmarks are
// cmd/bellows-bench.
package main

import (
	"os"
	"path/filepath"
	"strings"

	"github.com/bellows-kv/bellows/cmd/bellows/cli"
	// s3://, gs:// and azblob:// buckets; linked here only, so test
	// binaries of the engine stay small.
	_ "github.com/bellows-kv/bellows/storage-engine/blob/clouddrivers"
)

func main() {
	root := cli.NewRootCommand()
	// kubectl runs plugins as kubectl-NAME: the same binary, linked or
	// copied under that name, is the plugin (one build, one version).
	if strings.TrimSuffix(filepath.Base(os.Args[0]), ".exe") == cli.KubectlPluginName {
		root = cli.NewKubectlCommand(cli.KubectlPluginName)
	}
	if err := root.Execute(); err != nil {
		os.Exit(1)
	}
}
