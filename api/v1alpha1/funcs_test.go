package v1alpha1

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/bellows-kv/bellows/internal/contract"
)

// TestChildNames pins every child name: they are the names of live objects,
// so a change here orphans the old ones on upgrade.
func TestChildNames(t *testing.T) {
	c := &KVCluster{ObjectMeta: metav1.ObjectMeta{Name: "kv"}}
	p := &CompactionPool{ObjectMeta: metav1.ObjectMeta{Name: "pool"}}
	for _, n := range []struct{ got, want string }{
		{c.StatefulSetName(), "kv"},
		{c.PodName(2), "kv-2"},
		{c.EngineConfigMapName(), "kv-engine"},
		{c.HeadlessServiceName(), "kv-headless"},
		{c.ClientServiceName(), "kv"},
		{c.PodDisruptionBudgetName(), "kv"},
		{c.StoreIdentityName(), "kv-store"},
		{c.ServiceMonitorName(), "kv-store"},
		{p.ServiceName(), "pool-compactor"},
		{p.DeploymentName(), "pool-compactor"},
		{p.PodDisruptionBudgetName(), "pool-compactor"},
		{p.ServiceMonitorName(), "pool-compactor"},
	} {
		if n.got != n.want {
			t.Errorf("got %q, want %q", n.got, n.want)
		}
	}
	if name, ok := c.CompactorServiceName(); ok || name != "" {
		t.Errorf("no compactionPoolRef: got %q, %v", name, ok)
	}
	c.Spec.CompactionPoolRef = &CompactionPoolReference{Name: "pool"}
	if name, ok := c.CompactorServiceName(); !ok || name != p.ServiceName() {
		t.Errorf("compactionPoolRef pool: got %q, %v, want %q", name, ok, p.ServiceName())
	}
}

func TestIsPaused(t *testing.T) {
	for ann, want := range map[string]bool{"true": true, "false": false, "": false, "True": false} {
		c := &KVCluster{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{contract.PausedAnnotation: ann}}}
		p := &CompactionPool{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{contract.PausedAnnotation: ann}}}
		if c.IsPaused() != want || p.IsPaused() != want {
			t.Errorf("annotation %q: cluster %v, pool %v, want %v", ann, c.IsPaused(), p.IsPaused(), want)
		}
	}
	if (&KVCluster{}).IsPaused() {
		t.Error("no annotations: not paused")
	}
}
