package cli

import (
	"github.com/spf13/cobra"

	"github.com/bellows-kv/bellows/cmd/bellows/compactor"
	"github.com/bellows-kv/bellows/cmd/bellows/serve"
	"github.com/bellows-kv/bellows/internal/contract"
)

func newCompactorCommand() *cobra.Command {
	cfg := compactor.Default()
	cmd := &cobra.Command{
		Use:   "compactor",
		Short: "Run a compaction worker (gRPC bellows.compaction.v1.Compactor)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := cfg.Validate(); err != nil {
				return err
			}
			log := serve.NewLogger(cmd.ErrOrStderr(), "compactor")
			setMemoryLimit(log)
			return compactor.Run(cmd.Context(), cfg, log, cmd.OutOrStdout())
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.Listen, contract.FlagListen, cfg.Listen, "gRPC address")
	f.StringVar(&cfg.MetricsListen, contract.FlagMetricsListen, cfg.MetricsListen, "HTTP address of /metrics, /healthz, /readyz and /drain")
	f.StringVar(&cfg.TLSDir, contract.FlagTLSDir, "", "directory of ca.crt, tls.crt and tls.key: serve mutual TLS (stores need a certificate of the CA); \"\": plaintext")
	f.Var(sizeFlag{&cfg.CacheBytes}, contract.FlagCacheBytes, "m: memory for running jobs and kept output blocks, e.g. 6GiB")
	f.Var(rateFlag{&cfg.TransferRate}, contract.FlagTransferRate, "w: bytes per second FetchBlocks sends per stream, e.g. 8MB/s (0: unlimited)")
	f.DurationVar(&cfg.LinkLatency, contract.FlagLinkLatency, 0, "benchmarks: a modelled network latency every FetchBlocks stream waits before its first block (0: none)")
	f.Var(rateFlag{&cfg.CompactionRateLimit}, contract.FlagCompactionRateLimit, "bytes per second all jobs read from the bucket together, e.g. 16MB/s (0: unlimited)")
	f.DurationVar(&cfg.DrainTimeout, contract.FlagDrainTimeout, cfg.DrainTimeout, "how long GET /drain waits for in-flight jobs")
	f.DurationVar(&cfg.OutputTTL, contract.FlagOutputTTL, cfg.OutputTTL, "drop a kept output nobody released after this long")
	f.StringVar(&cfg.Name, contract.FlagName, "", "worker name in logs and errors (default: host name)")
	return cmd
}
