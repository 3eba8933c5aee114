package v1alpha1

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"

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

// TestNameLimits: a name of the maximum length gives every child a valid
// name and label; one character more breaks one of them. The revision label
// is what the StatefulSet controller writes: <StatefulSet>-<hash of up to
// 10 characters>.
func TestNameLimits(t *testing.T) {
	problems := func(errs ...[]string) []string {
		var all []string
		for _, e := range errs {
			all = append(all, e...)
		}
		return all
	}
	kv := func(n int) []string {
		c := &KVCluster{ObjectMeta: metav1.ObjectMeta{Name: "k" + strings.Repeat("v", n-1)}}
		return problems(
			validation.IsDNS1035Label(c.HeadlessServiceName()),
			validation.IsDNS1035Label(c.ClientServiceName()),
			validation.IsDNS1123Label(c.PodName(99)),
			validation.IsValidLabelValue(c.PodName(99)),
			validation.IsValidLabelValue(c.StatefulSetName()+"-"+strings.Repeat("x", statefulSetRevisionHashLength)),
			validation.IsValidLabelValue(c.Name),
			validation.IsDNS1123Subdomain(c.EngineConfigMapName()),
			validation.IsDNS1123Subdomain(c.StoreIdentityName()),
			validation.IsDNS1123Subdomain(c.ServiceMonitorName()),
			validation.IsDNS1123Subdomain(c.PodDisruptionBudgetName()),
		)
	}
	pool := func(n int) []string {
		p := &CompactionPool{ObjectMeta: metav1.ObjectMeta{Name: "p" + strings.Repeat("o", n-1)}}
		return problems(
			validation.IsDNS1035Label(p.ServiceName()),
			validation.IsValidLabelValue(p.Name),
			validation.IsDNS1123Subdomain(p.DeploymentName()),
			validation.IsDNS1123Subdomain(p.PodDisruptionBudgetName()),
			validation.IsDNS1123Subdomain(p.ServiceMonitorName()),
		)
	}
	for _, tc := range []struct {
		kind  string
		max   int
		names func(int) []string
	}{{"KVCluster", MaxKVClusterNameLength, kv}, {"CompactionPool", MaxCompactionPoolNameLength, pool}} {
		if errs := tc.names(tc.max); len(errs) > 0 {
			t.Errorf("%s name of %d characters: %v", tc.kind, tc.max, errs)
		}
		if errs := tc.names(tc.max + 1); len(errs) == 0 {
			t.Errorf("%s name of %d characters: every child name is valid, so the limit %d is too low", tc.kind, tc.max+1, tc.max)
		}
	}
}
