//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"regexp"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kvapi "github.com/bellows-kv/bellows/api/v1alpha1"
)

// restoredName is the KVCluster the scenario restores demo's backup into.
const restoredName = "restored"

// 7. A Backup object of demo is taken by one of its storage pods into the
// in-cluster S3 server; a new KVCluster with bootstrap.recovery naming it
// starts only after its restore Job copied the backup into its own bucket,
// becomes Ready, and serves every write the ledger holds (no write happened
// after the backup's timestamp). The restored cluster is deleted after.
func (e *env) backupAndRestore(t *testing.T, l *ledger) {
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	e.run(t, "kubectl", "apply", "-n", ns, "-f", "config/samples/kv_v1alpha1_backup.yaml")
	var bk kvapi.Backup
	eventually(t, 3*time.Minute, "the Backup demo-first to complete", func(ctx context.Context) (bool, string, error) {
		if err := e.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "demo-first"}, &bk); err != nil {
			return false, "", err
		}
		st := fmt.Sprintf("phase %q: %s", bk.Status.Phase, bk.Status.Message)
		if bk.Status.Phase == kvapi.BackupFailed {
			t.Fatalf("the Backup failed: %s", st)
		}
		return bk.Status.Phase == kvapi.BackupCompleted, st, nil
	})
	if bk.Status.Files == 0 || bk.Status.TS == 0 || bk.Status.Regions == 0 {
		t.Errorf("the Backup's status: %+v; want regions, files, a timestamp", bk.Status)
	}
	out := e.run(t, "kubectl", "get", "backups", "-n", ns)
	if !regexp.MustCompile(`(?m)^demo-first\s+demo\s+Completed\s`).MatchString(out) {
		t.Errorf("kubectl get backups:\n%s", out)
	}

	// A new cluster from it: demo's settings, one store, no pool, its own
	// bucket on the same S3 server.
	var demo kvapi.KVCluster
	if err := e.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: clusterName}, &demo); err != nil {
		t.Fatal(err)
	}
	restored := &kvapi.KVCluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: restoredName}, Spec: *demo.Spec.DeepCopy()}
	restored.Spec.Replicas = 1
	restored.Spec.CompactionPoolRef = nil
	restored.Spec.Engine.Offload = "Disabled"
	restored.Spec.Bucket.URL = otherBucket(t, demo.Spec.Bucket.URL, "bellows-e2e-restored")
	restored.Spec.Bootstrap = &kvapi.BootstrapSpec{Recovery: &kvapi.RecoverySpec{Backup: "demo-first", SourceBucketURL: demo.Spec.Bucket.URL}}
	if err := e.c.Create(ctx, restored); err != nil {
		t.Fatal(err)
	}
	defer e.deleteCluster(t, restoredName)
	e.waitClusterReady(t, restoredName, 5*time.Minute)
	rkv := newKVClient(e.c, ns, restoredName)
	defer rkv.Close()
	verifyLedger(t, ctx, rkv, l)
}
