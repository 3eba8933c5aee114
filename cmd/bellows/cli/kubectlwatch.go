package cli

import (
	"context"
	"strings"

	"github.com/spf13/cobra"

	"github.com/bellows-kv/bellows/client"
	"github.com/bellows-kv/bellows/cmd/bellows/kubectl"
)

// newKubectlWatchCommand is `bellows kv watch` for a KVCluster reached
// through the Kubernetes API: the client routes each region's watch to its
// owner as inside the cluster, each owner dialled through a port-forward to
// its pod (kubectl.StoreDialer).
func newKubectlWatchCommand(kf *kubectlFlags) *cobra.Command {
	f := &kvFlags{}
	cmd := newKVWatchCommand(f)
	watch := cmd.RunE
	cmd.Use = "watch CLUSTER [START [END]]"
	cmd.Long += `

The plugin reaches the cluster's storage pods through port-forwards by the
API server, with the cluster's admin client certificate when it serves TLS
(the Secret <cluster>-client-admin, which your Kubernetes credentials must be
allowed to read), so no route to the pods is needed.`
	cmd.Args = cobra.RangeArgs(1, 3)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		f.timeout = kf.timeout
		f.reach = func(ctx context.Context) ([]string, client.Options, func(), error) {
			k, err := kubectl.Connect(kf.config)
			if err != nil {
				return nil, client.Options{}, nil, &userError{what: err.Error(), hint: "give --kubeconfig FILE, or set KUBECONFIG, as for kubectl", cause: err}
			}
			c, err := k.Cluster(ctx, args[0])
			if err != nil {
				return nil, client.Options{}, nil, kf.kubeError(err)
			}
			d, err := k.StoreDialer(ctx, c)
			if err != nil {
				return nil, client.Options{}, nil, kf.kubeError(err)
			}
			return d.Seeds(), client.Options{DialOptions: d.DialOptions(), Dialer: d.Dial}, d.Close, nil
		}
		return watch(cmd, args[1:])
	}
	cmd.Flags().BoolVar(&f.hex, "hex", false, "keys and values are hexadecimal, in the arguments and the output")
	cmd.Flags().BoolVar(&f.raw, "raw", false, "text output: keys and values as their bytes are, not quoted when they are not plain text")
	cmd.Flags().StringVarP(&f.output, "output", "o", "text", "output format: "+strings.Join(outputFormats, ", "))
	return cmd
}
