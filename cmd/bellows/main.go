// Command bellows is the single binary of Bellows: storage pod, compaction
// worker, operator, embedded local cluster, client and benchmark driver.
package main

import (
	"os"

	"github.com/bellows-kv/bellows/cmd/bellows/cli"
)

func main() {
	if err := cli.NewRootCommand().Execute(); err != nil {
		os.Exit(1)
	}
}
