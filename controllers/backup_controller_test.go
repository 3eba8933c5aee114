package controllers

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"regexp"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	kvapi "github.com/bellows-kv/bellows/api/v1alpha1"
	"github.com/bellows-kv/bellows/cmd/bellows/store"
	"github.com/bellows-kv/bellows/internal/contract"
	kvpb "github.com/bellows-kv/bellows/proto/bellows/kv/v1"
)

var storeReady = regexp.MustCompile(`^bellows \S+ ready grpc=(\S+) metrics=`)

// startStore runs a real store (bellows store, in this process) with a
// file bucket and two regions, and returns its gRPC address.
func startStore(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	cfg := store.Default()
	cfg.Listen, cfg.MetricsListen = "127.0.0.1:0", "127.0.0.1:0"
	cfg.Bucket, cfg.CreateBucket, cfg.WALDir = "file://"+dir+"/bucket", true, dir+"/wal"
	cfg.Regions = 2
	cfg.OffloadOverride = contract.OffloadDisabled
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r, w := io.Pipe()
	done := make(chan error, 1)
	go func() { done <- store.Run(ctx, cfg, slog.New(slog.DiscardHandler), w); _ = w.Close() }()
	t.Cleanup(func() { cancel(); <-done })
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		if m := storeReady.FindStringSubmatch(sc.Text()); m != nil {
			go func() { _, _ = io.Copy(io.Discard, r) }()
			return m[1]
		}
	}
	t.Fatalf("the store exited before it was ready: %v", <-done)
	return ""
}

// startBackupController runs the Backup controller in a manager of its
// own (the suite's has none), reaching every cluster's stores at addr.
func startBackupController(t *testing.T, addr string) {
	t.Helper()
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{Scheme: testScheme, Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0"})
	if err != nil {
		t.Fatal(err)
	}
	r := &BackupReconciler{Client: mgr.GetClient(), Recorder: mgr.GetEventRecorder("bellows-operator"),
		StoreAddr: func(*kvapi.KVCluster) string { return addr }}
	if err := r.SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
}

func newBackup(ns, name, cluster string) *kvapi.Backup {
	return &kvapi.Backup{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: kvapi.BackupSpec{Cluster: kvapi.BackupClusterRef{Name: cluster}}}
}

// A Backup waits (Pending, saying why) while its KVCluster is missing or
// not Ready, then a real store takes it: Completed, with the record's
// timestamp, regions, files and bytes in its status and events. A Backup
// whose ID the bucket already holds (an attempt the operator did not see
// finish) adopts that record. Names that cannot be an ID are refused.
func TestABackupWaitsForItsClusterAndAStoreTakesIt(t *testing.T) {
	g := NewWithT(t)
	g.SetDefaultEventuallyTimeout(eventually)
	g.SetDefaultEventuallyPollingInterval(poll)
	ctx := context.Background()
	ns := newNamespace(t)
	addr := startStore(t)
	startBackupController(t, addr)

	get := func(g Gomega, name string) *kvapi.Backup {
		b := &kvapi.Backup{}
		g.Expect(k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, b)).To(Succeed())
		return b
	}
	err := k8sClient.Create(ctx, newBackup(ns, "has.dots", "demo"))
	g.Expect(err).To(MatchError(ContainSubstring("metadata.name is the backup's ID")))

	g.Expect(k8sClient.Create(ctx, newBackup(ns, "nightly", "demo"))).To(Succeed())
	g.Eventually(func(g Gomega) {
		b := get(g, "nightly")
		g.Expect(b.Status.Phase).To(Equal(kvapi.BackupPending))
		g.Expect(condition(b.Status.Conditions, kvapi.ConditionCompleted).Reason).To(Equal(kvapi.ReasonClusterNotFound))
		g.Expect(b.Status.Message).To(ContainSubstring(`no KVCluster "demo"`))
	}).Should(Succeed())

	pool := &kvapi.CompactionPool{}
	loadSample(t, "kv_v1alpha1_compactionpool.yaml", pool, ns)
	pool.Spec.Autoscaling.Mode = kvapi.AutoscalingDisabled
	cluster := &kvapi.KVCluster{}
	loadSample(t, "kv_v1alpha1_kvcluster.yaml", cluster, ns)
	g.Expect(k8sClient.Create(ctx, pool)).To(Succeed())
	g.Expect(k8sClient.Create(ctx, cluster)).To(Succeed())
	key := client.ObjectKeyFromObject(cluster)
	g.Eventually(func(g Gomega) {
		b := get(g, "nightly")
		g.Expect(b.Status.Phase).To(Equal(kvapi.BackupPending))
		g.Expect(condition(b.Status.Conditions, kvapi.ConditionCompleted).Reason).To(Equal(kvapi.ReasonClusterNotReady))
	}).Should(Succeed())

	// Data in the store, so the backup has files to copy.
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	g.Expect(err).NotTo(HaveOccurred())
	defer conn.Close()
	kv := kvpb.NewKVClient(conn)
	for _, k := range []string{"apple", "zebra"} {
		_, err := kv.Put(ctx, &kvpb.PutRequest{Key: []byte(k), Value: []byte("v")})
		g.Expect(err).NotTo(HaveOccurred())
	}

	markRolledOut(g, key, desiredStoreHash(g, key))
	g.Eventually(func(g Gomega) {
		b := get(g, "nightly")
		g.Expect(b.Status.Phase).To(Equal(kvapi.BackupCompleted), "message: %s", b.Status.Message)
		g.Expect(b.Status.BackupID).To(Equal("nightly"))
		g.Expect(b.Status.Regions).To(Equal(int32(2)))
		g.Expect(b.Status.Files).To(BeNumerically(">=", 1))
		g.Expect(b.Status.Bytes).To(BeNumerically(">", 0))
		g.Expect(b.Status.TS).To(BeNumerically(">", 0))
		g.Expect(b.Status.Time.Unix()).To(Equal(b.Status.TS / 1e9)) // metav1.Time keeps seconds
		g.Expect(condition(b.Status.Conditions, kvapi.ConditionCompleted).Status).To(Equal(metav1.ConditionTrue))
		g.Expect(hasEvent(eventsFor(g, ns, "nightly"), corev1.EventTypeNormal, kvapi.ReasonBackupCompleted, "backup nightly of demo")).To(BeTrue())
	}).Should(Succeed())

	// The bucket holds it, as the store lists it.
	admin := kvpb.NewAdminClient(conn)
	list, err := admin.ListBackups(ctx, &kvpb.ListBackupsRequest{})
	g.Expect(err).NotTo(HaveOccurred())
	var recs []backupRecord
	g.Expect(json.Unmarshal(list.BackupsJson, &recs)).To(Succeed())
	g.Expect(recs).To(HaveLen(1))
	g.Expect(recs[0].ID).To(Equal("nightly"))
	g.Expect(recs[0].TS).To(Equal(get(g, "nightly").Status.TS))

	// Taken before its Backup object was seen through: adopted, not
	// failed, and not taken again.
	earlier, err := admin.Backup(ctx, &kvpb.BackupRequest{Id: "interrupted"})
	g.Expect(err).NotTo(HaveOccurred())
	var rec backupRecord
	g.Expect(json.Unmarshal(earlier.BackupJson, &rec)).To(Succeed())
	g.Expect(k8sClient.Create(ctx, newBackup(ns, "interrupted", "demo"))).To(Succeed())
	g.Eventually(func(g Gomega) {
		b := get(g, "interrupted")
		g.Expect(b.Status.Phase).To(Equal(kvapi.BackupCompleted), "message: %s", b.Status.Message)
		g.Expect(b.Status.TS).To(Equal(rec.TS))
	}).Should(Succeed())
}
