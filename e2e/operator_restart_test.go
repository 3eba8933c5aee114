//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/bellows-kv/bellows/internal/contract"
)

// restartOperator restarts the whole operator (every replica's pod is
// deleted, so no warm standby carries over state) and waits until a new
// pod holds the leader Lease and the Deployment is Available again. The
// operator keeps no state outside the API server, so whatever it was
// doing (a compaction's pool being scaled, a scale-down draining) must
// carry on from what the objects say.
func (e *env) restartOperator(t *testing.T, ctx context.Context, during string) {
	t.Helper()
	sel := client.MatchingLabels{"app.kubernetes.io/instance": release, "app.kubernetes.io/component": "operator"}
	var before corev1.PodList
	if err := e.c.List(ctx, &before, client.InNamespace(operatorNS), sel); err != nil {
		t.Fatal(err)
	}
	old := map[types.UID]bool{}
	for i := range before.Items {
		p := &before.Items[i]
		old[p.UID] = true
		if err := e.c.Delete(ctx, p); client.IgnoreNotFound(err) != nil {
			t.Fatal(err)
		}
	}
	t.Logf("restarted the operator (%d pods) %s", len(before.Items), during)
	start := time.Now()
	eventually(t, 2*time.Minute, "a new operator pod to lead and the operator to be Available", func(ctx context.Context) (bool, string, error) {
		var pods corev1.PodList
		if err := e.c.List(ctx, &pods, client.InNamespace(operatorNS), sel); err != nil {
			return false, "", err
		}
		fresh := map[string]bool{}
		for _, p := range pods.Items {
			if old[p.UID] {
				return false, "old pod " + p.Name + " still there", nil
			}
			fresh[p.Name] = true
		}
		var lease coordinationv1.Lease
		if err := e.c.Get(ctx, client.ObjectKey{Namespace: operatorNS, Name: contract.LeaderElectionID}, &lease); err != nil {
			return false, "", err
		}
		holder := ptr.Deref(lease.Spec.HolderIdentity, "")
		// controller-runtime's identity is <hostname>_<uuid>; the hostname is the pod's name.
		leads := fresh[strings.SplitN(holder, "_", 2)[0]]
		var d appsv1.Deployment
		if err := e.c.Get(ctx, client.ObjectKey{Namespace: operatorNS, Name: release + "-operator"}, &d); err != nil {
			return false, "", err
		}
		want := ptr.Deref(d.Spec.Replicas, 1)
		s := fmt.Sprintf("holder %q, new pods %d, ready %d/%d", holder, len(fresh), d.Status.ReadyReplicas, want)
		return leads && d.Status.ReadyReplicas == want && d.Status.AvailableReplicas == want, s, nil
	})
	t.Logf("the operator leads again after %s", time.Since(start).Round(100*time.Millisecond))
}
