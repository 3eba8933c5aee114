//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kvapi "github.com/bellows-kv/bellows/api/v1alpha1"
	bellowsclient "github.com/bellows-kv/bellows/client"
	"github.com/bellows-kv/bellows/internal/bank"
	"github.com/bellows-kv/bellows/internal/contract"
)

const (
	ledgerName = "ledger" // the bank's cluster, whose volume is lost
	pitrName   = "pitr"   // the cluster restored to a time
)

// ledgerAccount is account i's key: the bank's regions are the ledger
// cluster's split keys b, c and d, and account i is in region i % 4.
func ledgerAccount(i int) []byte { return fmt.Appendf(nil, "%c/acct-%02d", 'a'+i%4, i) }

// 8. Point-in-time restore after a lost volume. A two-store cluster with its
// own bucket runs the bank (transfers between accounts of different
// regions, some abandoned mid-commit) through the Go client; a
// ScheduledBackup takes a backup under that load; the test reads the whole
// key space at a time T between two transfers; once the WAL archive reaches
// T (bellows backup window, in a storage pod), one store's pod is
// force-deleted and its PVC with it, so its volume and whatever of its WAL
// the archive did not have yet are gone. A new KVCluster restored to T
// (spec.bootstrap.recovery.targetTime) serves exactly what the read at T
// returned: the bank's total is exact, every write acknowledged at or below
// T is there and none after.
func (e *env) pointInTimeRestore(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()
	var demo kvapi.KVCluster
	if err := e.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: clusterName}, &demo); err != nil {
		t.Fatal(err)
	}
	ledger := &kvapi.KVCluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: ledgerName}, Spec: *demo.Spec.DeepCopy()}
	ledger.Spec.Replicas = 2
	ledger.Spec.CompactionPoolRef = nil
	ledger.Spec.Engine.Offload = "Disabled"
	ledger.Spec.Regions = kvapi.RegionsSpec{SplitKeys: []string{"b", "c", "d"}, SplitBytes: ptr.To(resource.MustParse("0")), SplitQPS: ptr.To(int32(0))}
	ledger.Spec.WALArchive.Interval = "1s"
	ledger.Spec.Bucket.URL = otherBucket(t, demo.Spec.Bucket.URL, "bellows-e2e-ledger")
	if err := e.c.Create(ctx, ledger); err != nil {
		t.Fatal(err)
	}
	defer e.deleteCluster(t, ledgerName)
	e.waitClusterReady(t, ledgerName, 5*time.Minute)
	addrs := e.storeAddrs(t, ledgerName)
	c, err := bellowsclient.New(ctx, addrs, e.clientOptions(t, ledgerName, "admin"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	cfg := bank.Config{Regions: 4, AccountsPerRegion: 4, Key: ledgerAccount, StartBalance: 100, Transferers: 3, Summers: 1, AbandonEvery: 10}
	bk, err := bank.Open(ctx, c, cfg)
	if err != nil {
		t.Fatal(err)
	}
	bk.Start(ctx)
	stopped := false
	defer func() {
		if !stopped {
			bk.Stop()
		}
	}()
	if err := bk.AwaitTransfers(ctx, 30, 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	sb := &kvapi.ScheduledBackup{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "ledger-nightly"}, Spec: kvapi.ScheduledBackupSpec{
		Cluster: kvapi.BackupClusterRef{Name: ledgerName}, Schedule: "0 3 * * *", Immediate: true, KeepLast: 3,
	}}
	if err := e.c.Create(ctx, sb); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = e.c.Delete(context.Background(), sb) }()
	eventually(t, 3*time.Minute, "the ScheduledBackup's first Backup to complete under the bank", func(ctx context.Context) (bool, string, error) {
		if err := e.c.Get(ctx, client.ObjectKeyFromObject(sb), sb); err != nil {
			return false, "", err
		}
		return sb.Status.LastCompletedBackup != "", fmt.Sprintf("last backup %q, last completed %q", sb.Status.LastBackup, sb.Status.LastCompletedBackup), nil
	})
	var base kvapi.Backup
	if err := e.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: sb.Status.LastCompletedBackup}, &base); err != nil {
		t.Fatal(err)
	}
	if err := bk.AwaitTransfers(ctx, bk.Transfers()+30, 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	target := time.Now().UTC() // between two transfers: they keep running
	before := bk.Transfers()
	if err := bk.AwaitTransfers(ctx, before+30, 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	ts := uint64(target.UnixNano())
	want := scanAll(ctx, t, c, ts)
	if sum := bankSum(t, want); sum != cfg.Total() {
		t.Fatalf("the ledger read at T sums to %d, not %d", sum, cfg.Total())
	}
	if uint64(base.Status.TS) >= ts {
		t.Fatalf("the backup's timestamp %d is not before T %d: the restore would not replay the archive", base.Status.TS, ts)
	}
	eventually(t, 2*time.Minute, "the WAL archive to reach T", func(ctx context.Context) (bool, string, error) {
		out, err := e.try("kubectl", "exec", "-n", ns, ledgerName+"-0", "--", "/bellows", "backup", "window", "--bucket", ledger.Spec.Bucket.URL, "-o", "json")
		if err != nil {
			return false, out, nil
		}
		var w struct{ To uint64 }
		if err := json.Unmarshal([]byte(out), &w); err != nil {
			return false, out, nil
		}
		return w.To >= ts, strings.TrimSpace(out), nil
	})

	// The volume of ledger-1 is lost, and its pod with it (a lost node),
	// while the bank runs: ledger-0's balancer fences ledger-1's liveness
	// lease and takes its regions over from their WAL streams in the bucket
	// (docs/failover.md), so transfers go on without a person acting; the
	// StatefulSet replaces the pod on a new volume, which joins empty.
	pvc := "wal-" + ledgerName + "-1"
	// Plain writes beside the transfers, every acknowledged one read back
	// at the end.
	acked := map[string]string{}
	var ackedMu sync.Mutex
	writeCtx, stopWrites := context.WithCancel(ctx)
	writesDone := make(chan error, 1)
	go func() {
		for i := 0; writeCtx.Err() == nil; i++ {
			k, v := fmt.Sprintf("%c/plain-%05d", 'a'+i%4, i), fmt.Sprint(i)
			pctx, pcancel := context.WithTimeout(writeCtx, time.Minute)
			_, err := c.Put(pctx, []byte(k), []byte(v))
			pcancel()
			if err != nil {
				if writeCtx.Err() == nil {
					writesDone <- fmt.Errorf("put %s: %w", k, err)
					return
				}
				break
			}
			ackedMu.Lock()
			acked[k] = v
			ackedMu.Unlock()
		}
		writesDone <- nil
	}()
	e.run(t, "kubectl", "delete", "pod", "-n", ns, ledgerName+"-1", "--grace-period=0", "--force", "--wait=false")
	e.run(t, "kubectl", "delete", "pvc", "-n", ns, pvc, "--wait=false")
	lost := time.Now()
	if err := bk.AwaitTransfers(ctx, bk.Transfers()+30, 2*time.Minute); err != nil {
		t.Fatalf("transfers after %s-1 and its volume were lost: %v", ledgerName, err)
	}
	t.Logf("30 more transfers committed %s after %s-1 and its volume were deleted", time.Since(lost).Round(100*time.Millisecond), ledgerName)
	e.waitClusterReady(t, ledgerName, 5*time.Minute)
	if err := bk.AwaitTransfers(ctx, bk.Transfers()+30, 2*time.Minute); err != nil {
		t.Fatalf("transfers after the replacement of %s-1 joined: %v", ledgerName, err)
	}
	stopWrites()
	if err := <-writesDone; err != nil {
		t.Fatalf("a plain write failed across the lost node (a failover must cost only retries): %v", err)
	}
	for k, v := range acked {
		got, found, err := c.Get(ctx, []byte(k))
		if err != nil || !found || string(got) != v {
			t.Fatalf("acknowledged %s reads %q, %v, %v after the lost node", k, got, found, err)
		}
	}
	t.Logf("%d plain writes acknowledged across the lost node read back", len(acked))
	bk.Stop()
	stopped = true
	if err := bk.Final(ctx); err != nil {
		t.Fatalf("the bank after the lost node: %v", err)
	}
	for _, v := range bk.Result().Violations {
		t.Error(v)
	}

	pitr := &kvapi.KVCluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: pitrName}, Spec: *ledger.Spec.DeepCopy()}
	pitr.Spec.Replicas = 1
	pitr.Spec.Bucket.URL = otherBucket(t, demo.Spec.Bucket.URL, "bellows-e2e-pitr")
	pitr.Spec.Bootstrap = &kvapi.BootstrapSpec{Recovery: &kvapi.RecoverySpec{TargetTime: target.Format(time.RFC3339Nano), SourceBucketURL: ledger.Spec.Bucket.URL}}
	if err := e.c.Create(ctx, pitr); err != nil {
		t.Fatal(err)
	}
	defer e.deleteCluster(t, pitrName)
	e.waitClusterReady(t, pitrName, 5*time.Minute)
	rc, err := bellowsclient.New(ctx, e.storeAddrs(t, pitrName), e.clientOptions(t, pitrName, "admin"))
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	got := scanAll(ctx, t, rc, 0)
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("restored to T, the cluster (%d keys) differs from the ledger read at T (%d keys):\ngot  %v\nwant %v", len(got), len(want), got, want)
	}
	if sum := bankSum(t, got); sum != cfg.Total() {
		t.Fatalf("the restored bank sums to %d, not %d", sum, cfg.Total())
	}
	t.Logf("backup %s at ts %d under the bank; T = %s after %d transfers; restored %d accounts at T after %s's volume was deleted",
		base.Name, base.Status.TS, target.Format(time.RFC3339Nano), before, len(got), pvc)
}

// otherBucket is demo's bucket URL with the bucket renamed: another bucket
// on the same S3 server, with the same credentials.
func otherBucket(t *testing.T, demoURL, name string) string {
	t.Helper()
	u := strings.Replace(demoURL, "s3://bellows-e2e?", "s3://"+name+"?", 1)
	if u == demoURL {
		t.Fatalf("demo's bucket URL %q is not the overlay's: cannot name another bucket", demoURL)
	}
	return u
}

// storeAddrs are the gRPC addresses of name's storage pods.
func (e *env) storeAddrs(t *testing.T, name string) []string {
	t.Helper()
	var pods corev1.PodList
	if err := e.c.List(context.Background(), &pods, client.InNamespace(ns), client.MatchingLabels{
		contract.LabelInstance: name, contract.LabelComponent: contract.ComponentStore,
	}); err != nil {
		t.Fatal(err)
	}
	var addrs []string
	for i := range pods.Items {
		if p := &pods.Items[i]; podReady(p) {
			addrs = append(addrs, fmt.Sprintf("%s:%d", p.Status.PodIP, contract.StoreGRPCPort))
		}
	}
	if len(addrs) == 0 {
		t.Fatalf("no storage pod of %s is Ready", name)
	}
	return addrs
}

// scanAll reads the whole key space, at ts when ts > 0.
func scanAll(ctx context.Context, t *testing.T, c *bellowsclient.Client, ts uint64) map[string]string {
	t.Helper()
	var opts bellowsclient.ScanOptions
	if ts > 0 {
		opts.ReadTS = &ts
	}
	kvs, err := c.ScanAll(ctx, nil, nil, opts)
	if err != nil {
		t.Fatal(err)
	}
	out := make(map[string]string, len(kvs))
	for _, p := range kvs {
		out[string(p.Key)] = string(p.Value)
	}
	return out
}

func bankSum(t *testing.T, state map[string]string) int {
	t.Helper()
	sum, err := bank.Sum(state)
	if err != nil {
		t.Fatal(err)
	}
	return sum
}

// waitClusterReady waits until KVCluster name is Ready.
func (e *env) waitClusterReady(t *testing.T, name string, timeout time.Duration) {
	t.Helper()
	eventually(t, timeout, "KVCluster "+name+" to be Ready", func(ctx context.Context) (bool, string, error) {
		var c kvapi.KVCluster
		if err := e.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &c); err != nil {
			return false, "", err
		}
		var st []string
		for _, cond := range c.Status.Conditions {
			st = append(st, fmt.Sprintf("%s=%s %s: %s", cond.Type, cond.Status, cond.Reason, cond.Message))
		}
		return meta.IsStatusConditionTrue(c.Status.Conditions, kvapi.ConditionReady), strings.Join(st, "; "), nil
	})
}

// deleteCluster deletes KVCluster name and waits until its pods are gone,
// so the scenarios after run on the node's CPU as before.
func (e *env) deleteCluster(t *testing.T, name string) {
	ctx := context.Background()
	err := e.c.Delete(ctx, &kvapi.KVCluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}})
	if err != nil && !apierrors.IsNotFound(err) {
		t.Error(err)
		return
	}
	eventually(t, 2*time.Minute, "KVCluster "+name+"'s pods to be gone", func(ctx context.Context) (bool, string, error) {
		var pods corev1.PodList
		if err := e.c.List(ctx, &pods, client.InNamespace(ns), client.MatchingLabels{contract.LabelInstance: name}); err != nil {
			return false, "", err
		}
		var left []string
		for _, p := range pods.Items {
			left = append(left, p.Name)
		}
		return len(left) == 0, strings.Join(left, " "), nil
	})
}
