package operator

import (
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// The operator's metrics endpoint (controller-runtime's registry) carries
// bellows_build_info like the store's and the compactor's.
func TestOperatorRegistryHasBuildInfo(t *testing.T) {
	mfs, err := metrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "bellows_build_info" && len(mf.GetMetric()) == 1 && mf.GetMetric()[0].GetGauge().GetValue() == 1 {
			return
		}
	}
	t.Errorf("controller-runtime's registry has no bellows_build_info 1")
}
