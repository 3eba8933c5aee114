package cli

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/bellows-kv/bellows/autoscaler"
	"github.com/bellows-kv/bellows/internal/contract"
)

func newAutoscalerCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "autoscaler", Short: "The compaction pool's capacity model"}
	cmd.AddCommand(newAutoscalerModelCommand())
	return cmd
}

func newAutoscalerModelCommand() *cobra.Command {
	var compactRate, transferRate, cache, size, perRegion, interval, warmup, debt string
	var regions, backlog float64
	var maxWait time.Duration
	cmd := &cobra.Command{
		Use:   "model",
		Short: "Evaluate the capacity model (Ahmad & Kemme §6.3) and print it as JSON",
		Example: "  bellows autoscaler model --compact-rate 20MB/s --transfer-rate 8MB/s --cache 6GB \\\n" +
			"    --compaction-size 4GB --compactions-per-region 1/h --interval 1h --regions 10",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			in, err := modelInputs(compactRate, transferRate, cache, size, perRegion, interval, warmup, regions, backlog)
			if err != nil {
				return err
			}
			if debt != "" {
				if in.DebtBytes, err = autoscaler.ParseBytes(debt); err != nil {
					return fmt.Errorf("--debt: %w", err)
				}
			}
			if maxWait <= 0 {
				return fmt.Errorf("--max-wait: %s is not a positive duration such as 1m", maxWait)
			}
			in.MaxWait = maxWait
			res, err := autoscaler.Compute(in)
			if err != nil {
				return err
			}
			enc := json.NewEncoder(cmd.OutOrStdout())
			enc.SetIndent("", "  ")
			return enc.Encode(res)
		},
	}
	f := cmd.Flags()
	f.StringVar(&compactRate, "compact-rate", "", "c: bytes per second a worker compacts, e.g. 20MB/s")
	f.StringVar(&transferRate, "transfer-rate", "", "w: bytes per second a worker streams back, e.g. 8MB/s (needed when --warmup-mode transfers)")
	f.StringVar(&cache, "cache", "", "m: a worker's cache, e.g. 6GB")
	f.StringVar(&size, "compaction-size", "", "b: average compaction size, e.g. 4GB")
	f.StringVar(&perRegion, "compactions-per-region", "", "T: compactions per region, e.g. 1/h")
	f.StringVar(&interval, "interval", "1h", "t: the model's interval")
	f.Float64Var(&regions, "regions", 0, "R: number of regions")
	f.Float64Var(&backlog, "backlog", 0, "queued compactions to drain within one interval (the operator passes the stores' queued, not running, compactions when the queue grew)")
	f.StringVar(&debt, "debt", "", "compaction debt to pay within --max-wait, e.g. 12GB (the operator charges the stores' bellows_compaction_debt_bytes while compactions wait longer than maxCompactionWait)")
	f.DurationVar(&maxWait, "max-wait", contract.DefaultMaxCompactionWait, "the bound within which the debt is paid (CompactionPool spec.autoscaling.maxCompactionWait)")
	f.StringVar(&warmup, "warmup-mode", string(contract.DefaultWarmupMode), fmt.Sprintf(
		"the stores' warmup mode, one of %v: only modes that stream output back (RemoteCache, PreSwitch, Incremental, ThrottledIncremental) are charged b/w", contract.WarmupModes))
	for _, name := range []string{"compact-rate", "cache", "compaction-size", "compactions-per-region", "regions"} {
		_ = cmd.MarkFlagRequired(name)
	}
	return cmd
}

// modelInputs parses the flags; every error names its flag.
func modelInputs(compactRate, transferRate, cache, size, perRegion, interval, warmup string, regions, backlog float64) (autoscaler.Inputs, error) {
	var in autoscaler.Inputs
	var err error
	flagErr := func(flag string, err error) error { return fmt.Errorf("--%s: %w", flag, err) }
	if in.CompactionRate, err = autoscaler.ParseByteRate(compactRate); err != nil {
		return in, flagErr("compact-rate", err)
	}
	mode, ok := contract.WarmupMode(""), false
	for _, m := range contract.WarmupModes {
		if strings.EqualFold(string(m), warmup) {
			mode, ok = m, true
		}
	}
	if !ok {
		return in, flagErr("warmup-mode", fmt.Errorf("%q is not one of %v", warmup, contract.WarmupModes))
	}
	in.NoTransfer = !mode.TransfersOutput()
	if !in.NoTransfer || transferRate != "" {
		if in.TransferRate, err = autoscaler.ParseByteRate(transferRate); err != nil {
			return in, flagErr("transfer-rate", err)
		}
	}
	if in.CacheBytes, err = autoscaler.ParseBytes(cache); err != nil {
		return in, flagErr("cache", err)
	}
	if in.CompactionSize, err = autoscaler.ParseBytes(size); err != nil {
		return in, flagErr("compaction-size", err)
	}
	if in.Interval, err = time.ParseDuration(interval); err != nil || in.Interval <= 0 {
		return in, flagErr("interval", fmt.Errorf("%q is not a positive duration such as 1h", interval))
	}
	rate, err := autoscaler.ParseFrequency(perRegion)
	if err != nil {
		return in, flagErr("compactions-per-region", err)
	}
	in.CompactionsPerRegion = rate * in.Interval.Seconds()
	if regions < 0 || regions != float64(int64(regions)) {
		return in, flagErr("regions", fmt.Errorf("%g is not a whole number of regions", regions))
	}
	in.Regions = int64(regions)
	if backlog < 0 {
		return in, flagErr("backlog", fmt.Errorf("%g is negative", backlog))
	}
	in.Backlog = backlog
	return in, nil
}
