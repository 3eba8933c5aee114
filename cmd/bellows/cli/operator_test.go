package cli

import (
	"slices"
	"testing"

	"github.com/bellows-kv/bellows/internal/contract"
)

// TestOperatorNetworkPolicyFlags: --monitoring-namespace defaults to
// contract's, takes a comma-separated list or repeats (what the chart
// passes: one flag, joined), and an empty value means none;
// --network-policies defaults to contract's.
func TestOperatorNetworkPolicyFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		want []string
		on   bool
	}{
		{nil, []string{contract.DefaultMonitoringNamespace}, contract.DefaultNetworkPolicies},
		{[]string{"--monitoring-namespace=prometheus,monitoring"}, []string{"prometheus", "monitoring"}, true},
		{[]string{"--monitoring-namespace=a", "--monitoring-namespace=b"}, []string{"a", "b"}, true},
		{[]string{"--monitoring-namespace=", "--network-policies=false"}, []string{}, false},
	} {
		cmd := newOperatorCommand()
		if err := cmd.ParseFlags(c.args); err != nil {
			t.Fatalf("%q: %v", c.args, err)
		}
		got, err := cmd.Flags().GetStringSlice("monitoring-namespace")
		if err != nil || !slices.Equal(got, c.want) {
			t.Errorf("%q: monitoring namespaces %q (%v), want %q", c.args, got, err, c.want)
		}
		if on, err := cmd.Flags().GetBool("network-policies"); err != nil || on != c.on {
			t.Errorf("%q: network policies %v (%v), want %v", c.args, on, err, c.on)
		}
	}
}
