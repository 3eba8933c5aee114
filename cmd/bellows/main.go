// Command bellows is the production binary of Bellows: storage pod,
// compaction worker, operator, embedded local cluster and client. It is
// wiring only (cli binds flags to each role's config; the roles live in
// store/, compactor/ and operator/ beside it). Benchmarks are
// cmd/bellows-bench.
package main

import (
	"os"

	"github.com/bellows-kv/bellows/cmd/bellows/cli"
	// s3://, gs:// and azblob:// buckets; linked here only, so test
	// binaries of the engine stay small.
	_ "github.com/bellows-kv/bellows/storage-engine/blob/clouddrivers"
)

func main() {
	if err := cli.NewRootCommand().Execute(); err != nil {
		os.Exit(1)
	}
}
