package controllers

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"regexp"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlconfig "sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"google.golang.org/grpc"

	kvapi "github.com/bellows-kv/bellows/api/v1alpha1"
	"github.com/bellows-kv/bellows/cmd/bellows/store"
	"github.com/bellows-kv/bellows/controllers/specs"
	"github.com/bellows-kv/bellows/internal/contract"
	"github.com/bellows-kv/bellows/internal/tlsconfig"
	kvpb "github.com/bellows-kv/bellows/proto/bellows/kv/v1"
)

var storeReady = regexp.MustCompile(`^bellows \S+ ready grpc=(\S+) metrics=`)

// startStore runs a real store (bellows store, in this process) with a
// file bucket and two regions, serving mutual TLS with a node certificate
// of namespace ns's CA, which it makes first in the Secret bellows-ca (as
// a user bringing their own CA does). It returns the store's gRPC address
// and a dial option with an admin client certificate of that CA.
func startStore(t *testing.T, ns string) (string, grpc.DialOption) {
	t.Helper()
	dir := t.TempDir()
	ca, err := tlsconfig.NewCA("test CA of "+ns, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	keyPEM, err := ca.KeyPEM()
	if err != nil {
		t.Fatal(err)
	}
	if err := k8sClient.Create(context.Background(), specs.BuildCASecret(ns, ca.PEM, keyPEM)); err != nil {
		t.Fatal(err)
	}
	issue := func(sub string, role tlsconfig.Role) string {
		cert, key, err := ca.Issue(sub, role, nil, time.Now().Add(-time.Minute), time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		if err := tlsconfig.WriteDir(dir+"/"+sub, ca.PEM, cert, key); err != nil {
			t.Fatal(err)
		}
		return dir + "/" + sub
	}
	dial, err := tlsconfig.Dial(issue("admin", tlsconfig.Admin))
	if err != nil {
		t.Fatal(err)
	}
	cfg := store.Default()
	cfg.TLSDir = issue("node", tlsconfig.Node)
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
			return m[1], dial
		}
	}
	t.Fatalf("the store exited before it was ready: %v", <-done)
	return "", nil
}

// startBackupControllers runs the Backup and ScheduledBackup controllers
// in a manager of their own (the suite's has neither), reaching every
// cluster's stores at addr, on clock now (nil: time.Now).
func startBackupControllers(t *testing.T, addr string, now func() time.Time, metrics *ScheduleMetrics) {
	t.Helper()
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{Scheme: testScheme, Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0",
		// One manager per test: the controllers' names repeat.
		Controller: ctrlconfig.Controller{SkipNameValidation: ptr.To(true)}})
	if err != nil {
		t.Fatal(err)
	}
	storeAddr := func(*kvapi.KVCluster) string { return addr }
	rec := mgr.GetEventRecorder("bellows-operator")
	if err := (&BackupReconciler{Client: mgr.GetClient(), Recorder: rec, StoreAddr: storeAddr, Now: now}).SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	if err := (&ScheduledBackupReconciler{Client: mgr.GetClient(), Recorder: rec, StoreAddr: storeAddr, Now: now, Metrics: metrics}).SetupWithManager(mgr); err != nil {
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
	addr, dial := startStore(t, ns)
	startBackupControllers(t, addr, nil, nil)

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
	conn, err := grpc.NewClient(addr, dial)
	g.Expect(err).NotTo(HaveOccurred())
	defer conn.Close()
	kv := kvpb.NewKVClient(conn)
	for _, k := range []string{"apple", "zebra"} {
		_, err := kv.Put(ctx, &kvpb.PutRequest{Key: []byte(k), Value: []byte("v")})
		g.Expect(err).NotTo(HaveOccurred())
	}

	// Without an override the operator dials the client Service's cluster
	// IP: clusters without cluster DNS (the e2e's) reach it too.
	g.Eventually(func(g Gomega) {
		svc := &corev1.Service{}
		g.Expect(k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: "demo"}, svc)).To(Succeed())
		g.Expect(svc.Spec.ClusterIP).NotTo(BeEmpty())
		g.Expect((storeAdmin{reader: k8sClient}).addr(ctx, cluster)).To(Equal(svc.Spec.ClusterIP + ":7400"))
	}).Should(Succeed())

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

// A ScheduledBackup with immediate takes a Backup at once; at its next
// time it takes another, and with keepLast 1 retention then deletes the
// first, from the bucket and as an object. A schedule that is not cron
// says so.
func TestAScheduledBackupTakesBackupsAndKeepsTheLast(t *testing.T) {
	g := NewWithT(t)
	g.SetDefaultEventuallyTimeout(eventually)
	g.SetDefaultEventuallyPollingInterval(poll)
	ctx := context.Background()
	ns := newNamespace(t)
	addr, dial := startStore(t, ns)
	var clock atomic.Pointer[time.Time]
	// Ahead of the ScheduledBackup's creation time (whole seconds), from
	// which an immediate schedule is due.
	start := time.Now().Add(5 * time.Second).Truncate(time.Second)
	clock.Store(&start)
	now := func() time.Time { return *clock.Load() }
	metrics := NewScheduleMetrics(prometheus.NewRegistry())
	startBackupControllers(t, addr, now, metrics)

	pool := &kvapi.CompactionPool{}
	loadSample(t, "kv_v1alpha1_compactionpool.yaml", pool, ns)
	pool.Spec.Autoscaling.Mode = kvapi.AutoscalingDisabled
	cluster := &kvapi.KVCluster{}
	loadSample(t, "kv_v1alpha1_kvcluster.yaml", cluster, ns)
	g.Expect(k8sClient.Create(ctx, pool)).To(Succeed())
	g.Expect(k8sClient.Create(ctx, cluster)).To(Succeed())
	key := client.ObjectKeyFromObject(cluster)
	markRolledOut(g, key, desiredStoreHash(g, key))

	sb := &kvapi.ScheduledBackup{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "nightly"},
		Spec: kvapi.ScheduledBackupSpec{Cluster: kvapi.BackupClusterRef{Name: "demo"}, Schedule: "0 3 * * *", Immediate: true, KeepLast: 1}}
	g.Expect(k8sClient.Create(ctx, sb)).To(Succeed())
	getSB := func(g Gomega) *kvapi.ScheduledBackup {
		out := &kvapi.ScheduledBackup{}
		g.Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(sb), out)).To(Succeed())
		return out
	}
	completed := func(g Gomega) []string {
		var list kvapi.BackupList
		g.Expect(k8sClient.List(ctx, &list, client.InNamespace(ns))).To(Succeed())
		var names []string
		for _, b := range list.Items {
			if b.Status.Phase == kvapi.BackupCompleted {
				names = append(names, b.Name)
			}
		}
		return names
	}
	first := scheduledBackupName("nightly", start)
	g.Eventually(completed).Should(ConsistOf(first))
	var next time.Time
	g.Eventually(func(g Gomega) {
		s := getSB(g)
		g.Expect(s.Status.LastBackup).To(Equal(first))
		g.Expect(s.Status.LastCompletedBackup).To(Equal(first))
		g.Expect(s.Status.NextScheduleTime).NotTo(BeNil())
		next = s.Status.NextScheduleTime.Time
		g.Expect(next.UTC().Hour()).To(Equal(3))
		g.Expect(next.After(start)).To(BeTrue())
	}).Should(Succeed())

	// The alert's inputs: the newest completion and the daily period.
	labels := prometheus.Labels{"scheduled_backup": ns + "/nightly", "cluster": "demo"}
	g.Eventually(func() float64 { return testutil.ToFloat64(metrics.LastCompleted.With(labels)) }).Should(BeNumerically("==", start.Unix()))
	g.Expect(testutil.ToFloat64(metrics.Period.With(labels))).To(Equal(float64(24 * 3600)))

	// The next time comes; a touch makes the controller look now (in a
	// running operator, its requeue at that time does).
	later := next.Add(time.Second)
	clock.Store(&later)
	s := getSB(g)
	s.Annotations = map[string]string{"test/poke": "1"}
	g.Expect(k8sClient.Update(ctx, s)).To(Succeed())
	second := scheduledBackupName("nightly", later)
	g.Eventually(completed).Should(ConsistOf(second))

	conn, err := grpc.NewClient(addr, dial)
	g.Expect(err).NotTo(HaveOccurred())
	defer conn.Close()
	list, err := kvpb.NewAdminClient(conn).ListBackups(ctx, &kvpb.ListBackupsRequest{})
	g.Expect(err).NotTo(HaveOccurred())
	var recs []backupRecord
	g.Expect(json.Unmarshal(list.BackupsJson, &recs)).To(Succeed())
	g.Expect(recs).To(HaveLen(1), "the bucket still holds the pruned backup")
	g.Expect(recs[0].ID).To(Equal(second))

	bad := &kvapi.ScheduledBackup{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "bad"},
		Spec: kvapi.ScheduledBackupSpec{Cluster: kvapi.BackupClusterRef{Name: "demo"}, Schedule: "every day"}}
	g.Expect(k8sClient.Create(ctx, bad)).To(Succeed())
	g.Eventually(func(g Gomega) {
		out := &kvapi.ScheduledBackup{}
		g.Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(bad), out)).To(Succeed())
		c := condition(out.Status.Conditions, kvapi.ConditionReady)
		g.Expect(c.Reason).To(Equal(kvapi.ReasonInvalidSchedule))
		g.Expect(c.Message).To(ContainSubstring(`spec.schedule "every day" is not a cron schedule`))
	}).Should(Succeed())
}
