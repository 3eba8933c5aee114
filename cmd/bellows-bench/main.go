// Command bellows-bench is the benchmark driver: Figure 7 of the offload
// paper (phases), the engine against Pebble (engine), the YCSB core
// workloads (ycsb), Accordion's memstore policies (memstore), the cost of
// transactions (txn), backups (backup) and a store's loss (failover). It
// is a binary of its own so that the production image (cmd/bellows) links
// no Pebble, plotting or benchmark code. Benchmarks that run store and
// compactor processes start the bellows binary (--bellows).
package main

import (
	"os"

	"github.com/spf13/cobra"
)

func main() {
	root := &cobra.Command{
		Use:          "bellows-bench",
		Short:        "Bellows benchmarks",
		SilenceUsage: true,
	}
	root.AddCommand(newPhasesCommand(), newEngineCommand(), newYCSBCommand(), newMemstoreCommand(), newTxnCommand(), newBackupCommand(), newFailoverCommand(), newTraceWaitsCommand(), newWatchCommand(), newSyncWritesCommand())
	if err := root.Execute(); err != nil {
		os.Exit(1)
	}
}
