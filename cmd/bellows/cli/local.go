package cli

import (
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/bellows-kv/bellows/internal/childproc"
	"github.com/bellows-kv/bellows/internal/contract"
)

func newLocalCommand() *cobra.Command {
	var dataDir, storeListen, offloadMode, cacheBytes, memstorePolicy string
	var compactors, regions int
	cmd := &cobra.Command{
		Use:   "local",
		Short: "Run the embedded default: one store and N compactors as separate processes on 127.0.0.1",
		Long: "Starts N `bellows compactor` processes and one `bellows store` (re-executing this binary) on 127.0.0.1,\n" +
			"with a file:// bucket and the WALs under --data-dir, prints their addresses, and stops them on SIGINT/SIGTERM.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			abs, err := filepath.Abs(dataDir)
			if err != nil {
				return err
			}
			logDir := filepath.Join(abs, "logs")
			if err := os.MkdirAll(logDir, 0o755); err != nil {
				return err
			}
			self, err := os.Executable()
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			var procs []*childproc.Child
			defer func() {
				// Store first: it may be waiting on a compactor.
				for i := len(procs) - 1; i >= 0; i-- {
					procs[i].Stop()
				}
			}()
			var addrs []string
			for i := range compactors {
				name := fmt.Sprintf("compactor-%d", i)
				c, err := childproc.Start(ctx, self, name, logDir, "compactor", "--listen=127.0.0.1:0", "--metrics-listen=127.0.0.1:0",
					"--name="+name, "--cache-bytes="+cacheBytes)
				if err != nil {
					return err
				}
				procs = append(procs, c)
				addrs = append(addrs, c.GRPC)
				fmt.Fprintf(out, "%-12s grpc=%s metrics=http://%s/metrics log=%s\n", name, c.GRPC, c.Metrics, c.Log)
			}
			s, err := childproc.Start(ctx, self, "store", logDir, "store", "--listen="+storeListen, "--metrics-listen=127.0.0.1:0",
				"--bucket=file://"+filepath.Join(abs, "bucket"), "--wal-dir="+filepath.Join(abs, "wal"),
				fmt.Sprintf("--regions=%d", regions), "--compactors="+strings.Join(addrs, ","), "--offload="+offloadMode,
				"--"+contract.FlagMemstorePolicy+"="+memstorePolicy)
			if err != nil {
				return err
			}
			procs = append(procs, s)
			fmt.Fprintf(out, "%-12s grpc=%s metrics=http://%s/metrics log=%s\n", "store", s.GRPC, s.Metrics, s.Log)
			fmt.Fprintf(out, "ready; try: bellows kv put hello world --addr %s; Ctrl-C stops everything\n", s.GRPC)
			select {
			case <-ctx.Done():
				return nil
			case err := <-childproc.FirstExit(procs):
				return err
			}
		},
	}
	f := cmd.Flags()
	f.StringVar(&dataDir, "data-dir", "bellows-data", "directory for the bucket, WALs and logs")
	f.StringVar(&storeListen, "listen", fmt.Sprintf("127.0.0.1:%d", contract.StoreGRPCPort), "the store's gRPC address")
	f.IntVar(&compactors, "compactors", 2, "number of compactor processes")
	f.IntVar(&regions, "regions", 4, "regions of the store")
	f.StringVar(&offloadMode, "offload", string(contract.DefaultOffload), "Required, Preferred or Disabled")
	f.StringVar(&cacheBytes, "cache-bytes", "1GiB", "each compactor's cache")
	f.StringVar(&memstorePolicy, contract.FlagMemstorePolicy, string(contract.DefaultMemstorePolicy), fmt.Sprintf("the store's in-memory compaction policy, one of %v", contract.MemstorePolicies))
	return cmd
}
