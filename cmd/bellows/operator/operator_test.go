package operator

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/bellows-kv/bellows/internal/contract"
)

// TestLeaderReleasesTheLeaseOnStop runs the operator against a real API
// server and stops it: the Lease must be handed over at once (no holder),
// so a standby replica takes over within its retry period instead of after
// the lease duration.
func TestLeaderReleasesTheLeaseOnStop(t *testing.T) {
	assets := os.Getenv("KUBEBUILDER_ASSETS")
	if assets == "" {
		assets = filepath.Join("..", "..", "..", "bin", "k8s")
	}
	if _, err := os.Stat(filepath.Join(assets, "kube-apiserver")); err != nil {
		t.Fatalf("no kube-apiserver in %s (make envtest-bins): %v", assets, err)
	}
	env := &envtest.Environment{
		BinaryAssetsDirectory: assets,
		CRDDirectoryPaths:     []string{filepath.Join("..", "..", "..", "config", "crd", "bases")},
		ErrorIfCRDPathMissing: true,
	}
	kube, err := env.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	c, err := client.New(kube, client.Options{})
	if err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cfg := Default()
	cfg.Kube, cfg.LeaderElect, cfg.LeaderElectionNS = kube, true, "default"
	cfg.MetricsAddr, cfg.ProbeAddr = "0", "0"
	done := make(chan error, 1)
	go func() { done <- Run(ctx, cfg) }()

	key := types.NamespacedName{Namespace: "default", Name: contract.LeaderElectionID}
	holder := func() string {
		var l coordinationv1.Lease
		if err := c.Get(context.Background(), key, &l); err != nil || l.Spec.HolderIdentity == nil {
			return ""
		}
		return *l.Spec.HolderIdentity
	}
	// Renewed at least once: the elector has taken in its own acquisition.
	// Stopped between writing the Lease and reading the answer, it would
	// release with the record it had before and lose to a conflict (seen
	// once: "Failed to release lease ... the object has been modified"),
	// which is client-go's race, not what this test is about.
	renewed := func() bool {
		var l coordinationv1.Lease
		if err := c.Get(context.Background(), key, &l); err != nil || l.Spec.HolderIdentity == nil || l.Spec.AcquireTime == nil || l.Spec.RenewTime == nil {
			return false
		}
		return l.Spec.RenewTime.After(l.Spec.AcquireTime.Time)
	}
	if err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 60*time.Second, true,
		func(context.Context) (bool, error) { return renewed(), nil }); err != nil {
		t.Fatalf("the operator never took and renewed the Lease: %v", err)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
	if h := holder(); h != "" {
		t.Fatalf("the stopped leader still holds the Lease (%q): a standby waits for it to expire", h)
	}
}
