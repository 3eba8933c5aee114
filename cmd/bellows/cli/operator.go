package cli

import (
	"log/slog"

	"github.com/spf13/cobra"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/bellows-kv/bellows/cmd/bellows/operator"
	"github.com/bellows-kv/bellows/internal/contract"
)

func newOperatorCommand() *cobra.Command {
	cfg := operator.Default()
	cfg.Namespace = operator.OwnNamespace()
	cmd := &cobra.Command{
		Use:   "operator",
		Short: "Run the Kubernetes operator (KVCluster, CompactionPool, autoscaler)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := cfg.Validate(); err != nil {
				return err
			}
			setMemoryLimit(slog.New(slog.NewJSONHandler(cmd.ErrOrStderr(), nil)))
			return operator.Run(ctrl.SetupSignalHandler(), cfg)
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.MetricsAddr, "metrics-bind-address", cfg.MetricsAddr, "address of the operator's /metrics")
	f.StringVar(&cfg.ProbeAddr, "health-probe-bind-address", cfg.ProbeAddr, "a plaintext address of /healthz and /readyz besides the metrics port's (TLS), which serves them too; 0: none")
	f.BoolVar(&cfg.LeaderElect, "leader-elect", cfg.LeaderElect, "elect a leader among operator replicas (Lease "+contract.LeaderElectionID+")")
	f.StringVar(&cfg.LeaderElectionNS, "leader-election-namespace", "", "namespace of the Lease (the pod's namespace when empty)")
	f.DurationVar(&cfg.ScrapeTimeout, "scrape-timeout", cfg.ScrapeTimeout, "timeout of one scrape of a pod's /metrics")
	f.StringVar(&cfg.DefaultImage, "default-image", cfg.DefaultImage, "image of the pods of a KVCluster or CompactionPool without spec.image (the chart passes the operator's own image)")
	f.BoolVar(&cfg.NetworkPolicies, "network-policies", cfg.NetworkPolicies,
		"make a NetworkPolicy for each KVCluster's storage pods (<cluster>-store) and each CompactionPool's workers (<pool>-compactor); false deletes those the operator made")
	f.StringSliceVar(&cfg.MonitoringNamespaces, "monitoring-namespace", cfg.MonitoringNamespaces,
		"namespace whose pods (Prometheus) the NetworkPolicies let reach the metrics ports, repeated or comma-separated; \"\" for none (the operator's own pods, in $"+
			contract.PodNamespaceEnv+", always may)")
	f.BoolVar(&cfg.Development, "dev-log", false, "human-readable logs")
	return cmd
}
