package cli

import (
	"time"

	"github.com/spf13/cobra"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/bellows-kv/bellows/internal/operator"
)

func newOperatorCommand() *cobra.Command {
	var o operator.Options
	cmd := &cobra.Command{
		Use:   "operator",
		Short: "Run the Kubernetes operator (KVCluster, CompactionPool, autoscaler)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return operator.Run(ctrl.SetupSignalHandler(), o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.MetricsAddr, "metrics-bind-address", ":8080", "address of the operator's /metrics")
	f.StringVar(&o.ProbeAddr, "health-probe-bind-address", ":8081", "address of /healthz and /readyz")
	f.BoolVar(&o.LeaderElect, "leader-elect", true, "elect a leader among operator replicas (Lease "+operator.LeaderElectionID+")")
	f.StringVar(&o.LeaderElectionNS, "leader-election-namespace", "", "namespace of the Lease (the pod's namespace when empty)")
	f.DurationVar(&o.ScrapeTimeout, "scrape-timeout", 5*time.Second, "timeout of one scrape of a pod's /metrics")
	f.BoolVar(&o.Development, "dev-log", false, "human-readable logs")
	return cmd
}
