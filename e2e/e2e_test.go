//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kvapi "github.com/bellows-kv/bellows/api/v1alpha1"
	"github.com/bellows-kv/bellows/internal/contract"
	kvpb "github.com/bellows-kv/bellows/proto/bellows/kv/v1"
)

const (
	operatorNS   = "bellows-system"
	release      = "bellows"
	ns           = "bellows-e2e" // e2e/overlay's namespace
	clusterName  = "demo"        // config/samples' KVCluster
	poolName     = "workers"     // and CompactionPool
	storageClass = "bellows-e2e" // the overlay's storage class
	pvCount      = 13            // demo's up to 3 stores, the restored cluster's one, the ledger's 2 and the one that replaces its lost volume, the pitr cluster's one, and the elastic cluster's up to 5
)

// installImage is the image hack/cluster-images.sh imports and the chart is
// installed with (the operator, and so every pod, runs it); upgradeImage is a
// second tag of it that scenario 9 upgrades the release to, as a user moves
// to a new version. After scenario 9 every pod runs upgradeImage.
var (
	installImage = envOr("E2E_IMAGE", "bellows.test/bellows:e2e")
	upgradeImage = envOr("E2E_UPGRADE_IMAGE", "bellows.test/bellows:e2e-upgrade")
)

// imageRepo and imageTag split an image reference for the chart's values.
// The images are pulled never (image.pullPolicy=Never): the node has them and
// there is no registry.
func imageRepo(image string) string { return image[:strings.LastIndex(image, ":")] }
func imageTag(image string) string  { return image[strings.LastIndex(image, ":")+1:] }

// TestBellows runs the scenarios in order; each builds on the previous one,
// so the first failure stops the rest. A real Prometheus scrapes the
// cluster throughout (prometheus_test.go); scenario 16 checks what it saw.
func TestBellows(t *testing.T) {
	e := newEnv(t)
	p := newProm(t)
	p.loadRules(t, e)
	ctx, stopDiscovery := context.WithCancel(context.Background())
	discovered := make(chan struct{})
	go func() { defer close(discovered); p.discoverTargets(ctx, t, e) }()
	defer func() { stopDiscovery(); <-discovered }()
	e.volumes(t)
	kv := newKVClient(e.c, ns, clusterName)
	defer kv.Close()
	l := newLedger()
	steps := []struct {
		name string
		f    func(t *testing.T)
	}{
		{"1-helm-install", e.helmInstall},
		{"2-samples", e.applySamples},
		{"3-offloaded-compaction-and-warmup", func(t *testing.T) { e.offloadedCompaction(t, kv, l) }},
		{"4-compactor-dies-mid-compaction", func(t *testing.T) { e.compactorDies(t, kv, l) }},
		// Before the autoscaling scenarios, which leave the workers' link
		// throttled to tens of KB/s: its major compaction of every region
		// would take minutes there.
		{"5-kubectl-plugin", func(t *testing.T) { e.kubectlPlugin(t, kv, l) }},
		{"6-security", func(t *testing.T) { e.security(t, kv, l) }},
		{"7-backup-and-restore", func(t *testing.T) { e.backupAndRestore(t, l) }},
		{"8-point-in-time-restore", e.pointInTimeRestore},
		{"9-autoscaling", func(t *testing.T) { e.autoscaling(t, kv, l) }},
		{"10-upgrade", func(t *testing.T) { e.upgrade(t, kv, l) }},
		{"11-bad-image-rollout", func(t *testing.T) { e.badImageRollout(t, kv, l) }},
		{"12-region-moves", func(t *testing.T) { e.regionMoves(t, kv, l) }},
		{"13-elastic-regions", e.elasticRegions},
		{"14-ycsb-through-the-client-service", e.ycsbThroughTheService},
		{"15-hpa-on-scale", func(t *testing.T) { hpaScenario(t, e, kv, l) }},
		{"16-monitoring", func(t *testing.T) { e.monitoring(t, p) }},
		{"17-uninstall", e.uninstall},
	}
	for _, s := range steps {
		ok := t.Run(s.name, func(t *testing.T) {
			start := time.Now()
			defer func() {
				if t.Failed() {
					e.dump(t, operatorNS, ns)
				}
				t.Logf("%s took %s", s.name, time.Since(start).Round(time.Second))
			}()
			s.f(t)
		})
		// Without the operator or the samples nothing else can run; later
		// scenarios leave nothing that stops the next one (and 9 cleans up).
		if !ok && (s.name == "1-helm-install" || s.name == "2-samples") {
			t.Fatalf("%s failed: skipping the rest", s.name)
		}
	}
}

// podSecurityLabels make a namespace enforce the Pod Security Standard
// restricted: the API server refuses a pod that breaks it.
var podSecurityLabels = map[string]string{
	"pod-security.kubernetes.io/enforce":         "restricted",
	"pod-security.kubernetes.io/enforce-version": "latest",
	"pod-security.kubernetes.io/warn":            "restricted",
}

// restrictedNamespace creates namespace name enforcing restricted.
func restrictedNamespace(t *testing.T, e *env, name string) {
	t.Helper()
	nsObj := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: podSecurityLabels}}
	if err := e.c.Create(context.Background(), nsObj); err != nil {
		t.Fatal(err)
	}
}

// assertRestricted fails unless namespace name enforces restricted.
func assertRestricted(t *testing.T, e *env, name string) {
	t.Helper()
	var n corev1.Namespace
	if err := e.c.Get(context.Background(), client.ObjectKey{Name: name}, &n); err != nil {
		t.Fatal(err)
	}
	for k, v := range podSecurityLabels {
		if n.Labels[k] != v {
			t.Fatalf("namespace %s has %s=%q; every scenario runs under the Pod Security Standard restricted", name, k, n.Labels[k])
		}
	}
}

// volumes: the cluster has no dynamic provisioner, so the WAL claims bind
// to static hostPath PVs of the overlay's storage class. The directories are
// world-writable because the store runs as a non-root user and fsGroup does
// not apply to hostPath volumes. Removed when the test ends.
func (e *env) volumes(t *testing.T) {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "bellows-e2e-pv-")
	if err != nil {
		t.Fatal(err)
	}
	sc := &storagev1.StorageClass{
		ObjectMeta:        metav1.ObjectMeta{Name: storageClass},
		Provisioner:       "kubernetes.io/no-provisioner",
		VolumeBindingMode: ptr.To(storagev1.VolumeBindingWaitForFirstConsumer),
	}
	if err := e.c.Create(ctx, sc); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	var pvs []*corev1.PersistentVolume
	for i := range pvCount {
		path := filepath.Join(dir, fmt.Sprintf("pv%d", i))
		if err := os.Mkdir(path, 0o777); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(path, 0o777); err != nil { // umask
			t.Fatal(err)
		}
		pv := &corev1.PersistentVolume{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%d", storageClass, i), Labels: map[string]string{"bellows-e2e": "true"}},
			Spec: corev1.PersistentVolumeSpec{
				Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
				AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
				StorageClassName:              storageClass,
				PersistentVolumeSource:        corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: path, Type: ptr.To(corev1.HostPathDirectory)}},
			},
		}
		if err := e.c.Create(ctx, pv); err != nil {
			t.Fatal(err)
		}
		pvs = append(pvs, pv)
	}
	t.Cleanup(func() {
		for _, pv := range pvs {
			_ = e.c.Delete(ctx, pv)
		}
		_ = e.c.Delete(ctx, sc)
		_ = os.RemoveAll(dir)
	})
}

// 1. helm install the chart: the operator Deployment becomes Available with
// every replica Ready, in a namespace that enforces the Pod Security
// Standard restricted (as the samples' namespace does, e2e/overlay).
func (e *env) helmInstall(t *testing.T) {
	restrictedNamespace(t, e, operatorNS)
	e.run(t, "helm", "install", release, "charts/bellows", "--namespace", operatorNS, "--create-namespace",
		"--set", "image.repository="+imageRepo(installImage), "--set", "image.tag="+imageTag(installImage), "--set", "image.pullPolicy=Never",
		"--set", operatorCPU, "--wait", "--timeout", "3m")
	e.awaitOperator(t, installImage)
	// Leader election: one of them holds the lease.
	eventually(t, time.Minute, "the operator to hold its leader lease", func(ctx context.Context) (bool, string, error) {
		out, err := e.try("kubectl", "get", "leases", "-n", operatorNS, "-o", "jsonpath={.items[*].spec.holderIdentity}")
		return err == nil && strings.TrimSpace(out) != "", out, nil
	})
}

// operatorCPU keeps the operator's request small on the one-node cluster.
const operatorCPU = "operator.resources.requests.cpu=20m"

// awaitOperator waits until the operator Deployment is Available, every
// replica Ready and on image.
func (e *env) awaitOperator(t *testing.T, image string) {
	t.Helper()
	eventually(t, 2*time.Minute, "the operator Deployment to be Available on "+image, func(ctx context.Context) (bool, string, error) {
		var d appsv1.Deployment
		if err := e.c.Get(ctx, client.ObjectKey{Namespace: operatorNS, Name: release + "-operator"}, &d); err != nil {
			return false, "", err
		}
		want := ptr.Deref(d.Spec.Replicas, 1)
		got := d.Spec.Template.Spec.Containers[0].Image
		s := fmt.Sprintf("ready %d/%d, available %d, updated %d, image %s", d.Status.ReadyReplicas, want, d.Status.AvailableReplicas, d.Status.UpdatedReplicas, got)
		return got == image && d.Status.ReadyReplicas == want && d.Status.AvailableReplicas == want && d.Status.UpdatedReplicas == want &&
			d.Status.Replicas == want && d.Status.ObservedGeneration == d.Generation, s, nil
	})
}

// 2. config/samples through e2e/overlay: the bucket, the pool's workers and
// the storage pods run; KVCluster and CompactionPool are Ready.
func (e *env) applySamples(t *testing.T) {
	e.run(t, "kubectl", "apply", "-k", "e2e/overlay")
	assertRestricted(t, e, ns)
	assertRestricted(t, e, operatorNS)
	eventually(t, 3*time.Minute, "KVCluster and CompactionPool Ready", func(ctx context.Context) (bool, string, error) {
		var kvc kvapi.KVCluster
		var pool kvapi.CompactionPool
		if err := e.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: clusterName}, &kvc); err != nil {
			return false, "", err
		}
		if err := e.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: poolName}, &pool); err != nil {
			return false, "", err
		}
		// The bucket's server: the stores wait for it (a store exits only
		// after contract.BucketStartupWait of refusals), so a timeout
		// here says whether it ran.
		var bucket appsv1.Deployment
		bucketState := "bucket (Deployment s3): "
		if err := e.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "s3"}, &bucket); err != nil {
			bucketState += err.Error()
		} else {
			bucketState += fmt.Sprintf("ready %d/%d", bucket.Status.ReadyReplicas, bucket.Status.Replicas)
			if bucket.Status.ReadyReplicas == 0 {
				// CI keeps only this line for sure: say why the pod is not
				// Ready (unscheduled, its image, its probe, its exits).
				var pods corev1.PodList
				if err := e.c.List(ctx, &pods, client.InNamespace(ns), client.MatchingLabels{"app.kubernetes.io/name": "s3"}); err == nil {
					for _, p := range pods.Items {
						bucketState += "; pod " + podState(&p) + lastWarning(ctx, e, &p)
					}
				}
			}
		}
		kr := meta.FindStatusCondition(kvc.Status.Conditions, kvapi.ConditionReady)
		pr := meta.FindStatusCondition(pool.Status.Conditions, kvapi.ConditionReady)
		s := fmt.Sprintf("KVCluster ready %d/%d %s; pool ready %d/%d %s; %s", kvc.Status.ReadyReplicas, kvc.Spec.Replicas, condString(kr), pool.Status.ReadyReplicas, pool.Status.Replicas, condString(pr), bucketState)
		ok := kr != nil && kr.Status == metav1.ConditionTrue && kr.ObservedGeneration == kvc.Generation &&
			pr != nil && pr.Status == metav1.ConditionTrue &&
			kvc.Status.ReadyReplicas == kvc.Spec.Replicas && pool.Status.ReadyReplicas >= 1
		return ok, s, nil
	})
	stores, workers := e.pods(t, contract.ComponentStore, clusterName), e.pods(t, contract.ComponentCompactor, poolName)
	if len(stores) != 2 || len(workers) < 1 {
		t.Fatalf("%d storage pods (want 2), %d workers (want ≥1)", len(stores), len(workers))
	}
	for _, p := range append(stores, workers...) {
		if !podReady(&p) {
			t.Errorf("pod %s is not Ready", p.Name)
		}
		// The samples name no image: the pods run the operator's own.
		if img := p.Spec.Containers[0].Image; img != installImage {
			t.Errorf("pod %s runs %s, not the operator's image %s", p.Name, img, installImage)
		}
	}
}

// podState is a pod's phase and, for a pod that is not Ready, why: its
// unmet conditions and each container's waiting or last exit.
func podState(p *corev1.Pod) string {
	s := fmt.Sprintf("%s %s", p.Name, p.Status.Phase)
	for _, c := range p.Status.Conditions {
		if c.Status != corev1.ConditionTrue && (c.Reason != "" || c.Message != "") {
			s += fmt.Sprintf(", %s=%s (%s: %s)", c.Type, c.Status, c.Reason, c.Message)
		}
	}
	for _, cs := range p.Status.ContainerStatuses {
		s += fmt.Sprintf(", container %s restarts %d", cs.Name, cs.RestartCount)
		if w := cs.State.Waiting; w != nil {
			s += fmt.Sprintf(" waiting (%s: %s)", w.Reason, w.Message)
		}
		if x := cs.LastTerminationState.Terminated; x != nil {
			s += fmt.Sprintf(" last exit %d (%s: %s)", x.ExitCode, x.Reason, x.Message)
		}
	}
	return s
}

// lastWarning is the newest Warning event of pod p (a failed probe, pull
// or mount), or "".
func lastWarning(ctx context.Context, e *env, p *corev1.Pod) string {
	var evs corev1.EventList
	if err := e.c.List(ctx, &evs, client.InNamespace(p.Namespace)); err != nil {
		return ""
	}
	var last *corev1.Event
	for i := range evs.Items {
		ev := &evs.Items[i]
		if ev.Type == corev1.EventTypeWarning && ev.InvolvedObject.UID == p.UID &&
			(last == nil || ev.LastTimestamp.After(last.LastTimestamp.Time)) {
			last = ev
		}
	}
	if last == nil {
		return ""
	}
	return fmt.Sprintf(", last warning %s ×%d: %s", last.Reason, last.Count, last.Message)
}

func condString(c *metav1.Condition) string {
	if c == nil {
		return "<no Ready condition>"
	}
	return fmt.Sprintf("Ready=%s (%s: %s)", c.Status, c.Reason, c.Message)
}

// pods lists the pods of a component of instance (not being deleted).
func (e *env) pods(t *testing.T, component, instance string) []corev1.Pod {
	t.Helper()
	var pods corev1.PodList
	if err := e.c.List(context.Background(), &pods, client.InNamespace(ns), client.MatchingLabels{
		contract.LabelInstance: instance, contract.LabelComponent: component,
	}); err != nil {
		t.Fatal(err)
	}
	var out []corev1.Pod
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil {
			out = append(out, p)
		}
	}
	return out
}

// scrapeAll sums a scrape of every pod of a component.
func (e *env) scrapeAll(t *testing.T, ctx context.Context, component, instance string) (series, error) {
	total := series{}
	for _, p := range e.pods(t, component, instance) {
		if p.Status.PodIP == "" {
			continue
		}
		s, err := e.scrape(ctx, &p)
		if err != nil {
			return nil, err
		}
		for k, v := range s {
			total[k] += v
		}
	}
	return total, nil
}

// write puts n keys (prefix-i) with values of size bytes and records the acknowledged ones.
func write(t *testing.T, ctx context.Context, kv *kvClient, l *ledger, prefix string, n, size int) {
	t.Helper()
	for i := range n {
		key := keyFor(prefix, i)
		val := []byte(fmt.Sprintf("%s-%d-%s", prefix, i, strings.Repeat("v", size)))
		if _, err := kv.Put(ctx, key, val); err != nil {
			t.Fatalf("put %q: %v", key, err)
		}
		l.ack(key, val)
	}
}

// flushAll flushes every region's memstore into an SST.
func flushAll(t *testing.T, ctx context.Context, kv *kvClient) []route {
	t.Helper()
	regions, err := kv.Regions(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range regions {
		if err := kv.Admin(ctx, r, func(ctx context.Context, a kvpb.AdminClient) error {
			_, err := a.Flush(ctx, &kvpb.FlushRequest{Region: r.region})
			return err
		}); err != nil {
			t.Fatalf("flush %s: %v", r.region, err)
		}
	}
	return regions
}

func compact(ctx context.Context, kv *kvClient, r route) (*kvpb.CompactResponse, error) {
	var resp *kvpb.CompactResponse
	err := kv.Admin(ctx, r, func(ctx context.Context, a kvpb.AdminClient) error {
		var err error
		resp, err = a.Compact(ctx, &kvpb.CompactRequest{Region: r.region, Major: true})
		return err
	})
	return resp, err
}

func verifyLedger(t *testing.T, ctx context.Context, kv *kvClient, l *ledger) {
	t.Helper()
	checked, bad, err := l.verify(ctx, kv)
	if err != nil {
		t.Fatalf("reading back acknowledged writes: %v", err)
	}
	if len(bad) > 0 {
		t.Fatalf("%d of %d acknowledged writes do not read back, e.g. %v", len(bad), checked, bad[:min(5, len(bad))])
	}
	t.Logf("all %d acknowledged writes read back", checked)
}

// 3. A workload writes and reads; a major compaction of every region runs on
// a compactor (the workers' job counter and the stores' remote compactions
// say so), the stores warm up incrementally from the compactor's memory
// (warmup bytes by source, progress T reaching 1), and every acknowledged
// write reads back.
func (e *env) offloadedCompaction(t *testing.T, kv *kvClient, l *ledger) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	eventually(t, time.Minute, "every region to be served", func(ctx context.Context) (bool, string, error) {
		r, err := kv.Regions(ctx)
		return err == nil && len(r) == 4, fmt.Sprintf("%d regions served", len(r)), nil
	})
	// The client Service is the clients' entry point: it reaches a store.
	var svc corev1.Service
	if err := e.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: clusterName}, &svc); err != nil {
		t.Fatal(err)
	}
	conn, err := kv.conn(ctx, fmt.Sprintf("%s:%d", svc.Spec.ClusterIP, contract.StoreGRPCPort))
	if err != nil {
		t.Fatal(err)
	}
	if r, err := kvpb.NewKVClient(conn).Regions(ctx, &kvpb.RegionsRequest{}); err != nil || len(r.Regions) == 0 {
		t.Fatalf("Regions through the client Service %s: %v %v", svc.Spec.ClusterIP, r, err)
	}
	// Stores forward requests for each other's regions, so the client
	// Service alone serves a key of every region, whichever store it picks.
	routes, err := kv.Regions(ctx)
	if err != nil {
		t.Fatal(err)
	}
	svcKV := kvpb.NewKVClient(conn)
	for _, r := range routes {
		// start + 0x00… sorts right after start, before any end, also
		// for the first region, whose start is empty.
		key := append(append([]byte(nil), r.start...), "\x00via-client-service"...)
		value := []byte("served by any store: " + r.region)
		eventually(t, 30*time.Second, "a put and get of "+r.region+" through the client Service", func(ctx context.Context) (bool, string, error) {
			p, err := svcKV.Put(ctx, &kvpb.PutRequest{Key: key, Value: value})
			if err != nil {
				return false, "", err
			}
			if p.Region != r.region {
				t.Fatalf("put %q through the client Service landed in %s, want %s", key, p.Region, r.region)
			}
			l.ack(key, value)
			g, err := svcKV.Get(ctx, &kvpb.GetRequest{Key: key})
			if err != nil {
				return false, "", err
			}
			return g.Found && bytes.Equal(g.Value, value), fmt.Sprintf("found=%t", g.Found), nil
		})
	}

	before, err := e.scrapeAll(t, ctx, contract.ComponentStore, clusterName)
	if err != nil {
		t.Fatal(err)
	}
	workersBefore, err := e.scrapeAll(t, ctx, contract.ComponentCompactor, poolName)
	if err != nil {
		t.Fatal(err)
	}
	// Two generations of data, each flushed: two SSTs per region, the second
	// overwriting half of the first.
	write(t, ctx, kv, l, "a", 400, 1000)
	flushAll(t, ctx, kv)
	write(t, ctx, kv, l, "a", 200, 1200)
	write(t, ctx, kv, l, "b", 200, 1000)
	regions := flushAll(t, ctx, kv)
	for _, r := range regions {
		resp, err := compact(ctx, kv, r)
		if err != nil {
			t.Fatalf("compact %s: %v", r.region, err)
		}
		if !resp.Compacted || len(resp.Inputs) < 2 {
			t.Fatalf("compact %s: %+v, want a compaction of ≥2 files", r.region, resp)
		}
	}
	n := float64(len(regions))
	eventually(t, time.Minute, "offloaded compactions and incremental warmup in the metrics", func(ctx context.Context) (bool, string, error) {
		s, err := e.scrapeAll(t, ctx, contract.ComponentStore, clusterName)
		if err != nil {
			return false, "", err
		}
		w, err := e.scrapeAll(t, ctx, contract.ComponentCompactor, poolName)
		if err != nil {
			return false, "", err
		}
		remote := s.sum("bellows_compactions_total", "location=remote", "result=success") - before.sum("bellows_compactions_total", "location=remote", "result=success")
		local := s.sum("bellows_compactions_total", "location=local") - before.sum("bellows_compactions_total", "location=local")
		jobs := w.sum("bellows_compactor_jobs_total", "result=success") - workersBefore.sum("bellows_compactor_jobs_total", "result=success")
		fromWorker := s.sum("bellows_warmup_bytes_total", "source=compactor") - before.sum("bellows_warmup_bytes_total", "source=compactor")
		progress := s.sum("bellows_warmup_progress_ratio")
		st := fmt.Sprintf("remote compactions %v, local %v, worker jobs %v, warmup bytes from compactor %v, sum of warmup progress %v (want %v)", remote, local, jobs, fromWorker, progress, n)
		if local > 0 {
			return false, st, fmt.Errorf("compactions ran locally although a worker was free: %s", st)
		}
		return remote >= n && jobs >= n && fromWorker > 0 && progress >= n, st, nil
	})
	verifyLedger(t, ctx, kv, l)
}

// 4. A worker is killed (deleted with no grace period) in the middle of a
// compaction: while it merges (the job then fails on the store and, offload
// being Preferred, runs again on another worker or locally) or while it
// streams the output back for the warmup (the rest of the warmup then reads
// from the bucket). Either way the compaction completes, the metrics say
// where, and every acknowledged write reads back. The pool's transfer rate is
// throttled (20 kB/s) and the data incompressible, so a job lasts long enough
// to be caught.
func (e *env) compactorDies(t *testing.T, kv *kvClient, l *ledger) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	e.patchPool(t, ctx, `{"spec":{"transferRateBytesPerSecond":20000,"replicas":2,"autoscaling":{"mode":"Disabled"}}}`)
	e.awaitWorkers(t, 2)
	for attempt := 1; ; attempt++ {
		if attempt > 4 {
			t.Fatal("never caught a compaction in flight on a worker in 4 attempts")
		}
		writeRandom(t, ctx, kv, l, fmt.Sprintf("c%d", attempt), 300, 4000)
		regions := flushAll(t, ctx, kv)
		before, err := e.scrapeAll(t, ctx, contract.ComponentStore, clusterName)
		if err != nil {
			t.Fatal(err)
		}
		r := regions[attempt%len(regions)]
		done := make(chan error, 1)
		go func() {
			_, err := compact(ctx, kv, r)
			done <- err
		}()
		var victim *corev1.Pod
		phase := ""
		var compactErr error
		finished := false
		deadline := time.Now().Add(30 * time.Second)
		for victim == nil && time.Now().Before(deadline) {
			for _, p := range e.pods(t, contract.ComponentCompactor, poolName) {
				s, err := e.scrape(ctx, &p)
				if err != nil {
					continue
				}
				if s.sum("bellows_compactor_inflight_jobs") > 0 {
					victim, phase = &p, "merging"
				} else if s.sum("bellows_compactor_cache_used_bytes") > 0 {
					victim, phase = &p, "streaming the output back"
				}
				if victim != nil {
					break
				}
			}
			if victim == nil {
				select {
				case compactErr = <-done:
					finished = true
				case <-time.After(50 * time.Millisecond):
				}
			}
			if finished && victim == nil {
				// merged already; the output may still be streaming
				continue
			}
		}
		if victim == nil {
			t.Logf("attempt %d: no worker was seen holding the job (compaction: %v); again", attempt, compactErr)
			if !finished {
				<-done
			}
			continue
		}
		t.Logf("attempt %d: killing worker %s while it is %s (region %s)", attempt, victim.Name, phase, r.region)
		if err := e.c.Delete(ctx, victim, client.GracePeriodSeconds(0)); err != nil {
			t.Fatal(err)
		}
		if !finished {
			compactErr = <-done
		}
		if compactErr != nil {
			t.Fatalf("the compaction of %s failed after its worker died: %v", r.region, compactErr)
		}
		eventually(t, 2*time.Minute, "the compaction and its warmup to complete", func(ctx context.Context) (bool, string, error) {
			s, err := e.scrapeAll(t, ctx, contract.ComponentStore, clusterName)
			if err != nil {
				return false, "", err
			}
			d := func(m string, labels ...string) float64 { return s.sum(m, labels...) - before.sum(m, labels...) }
			// A failed attempt is a try on a worker that did not run the
			// job (the compaction itself succeeded on a retry, so it is
			// not a failure in bellows_compactions_total).
			remoteOK, localOK := d("bellows_compactions_total", "location=remote", "result=success"), d("bellows_compactions_total", "location=local", "result=success")
			remoteFail := d("bellows_compaction_attempts_total", "worker_outcome=unavailable") + d("bellows_compaction_attempts_total", "worker_outcome=failed")
			fromBucket := d("bellows_warmup_bytes_total", "source=bucket")
			progress := s.sum("bellows_warmup_progress_ratio", "region="+r.region)
			st := fmt.Sprintf("remote success %v, failed remote attempts %v, local success %v, warmup bytes from the bucket %v, warmup progress of %s %v",
				remoteOK, remoteFail, localOK, fromBucket, r.region, progress)
			// The worker's in-flight gauge covers the merge and the
			// output's stream, so the guessed phase is only a hint; the
			// metrics say which failure it was. Killed while merging: the
			// attempt failed (unavailable) and the retry succeeded on the
			// other worker or, Preferred, locally (failure case 1). Killed
			// while streaming: the compaction succeeded remotely and the
			// warmup finished from the bucket (case 2).
			merging := remoteFail >= 1 && remoteOK+localOK >= 1
			streaming := remoteOK >= 1 && fromBucket > 0
			return (merging || streaming) && progress >= 1, st, nil
		})
		break
	}
	e.awaitWorkers(t, 2)
	verifyLedger(t, ctx, kv, l)
}

// writeRandom is write with incompressible values.
func writeRandom(t *testing.T, ctx context.Context, kv *kvClient, l *ledger, prefix string, n, size int) {
	t.Helper()
	for i := range n {
		key := keyFor(prefix, i)
		val := make([]byte, size)
		if _, err := rand.Read(val); err != nil {
			t.Fatal(err)
		}
		if _, err := kv.Put(ctx, key, val); err != nil {
			t.Fatalf("put %q: %v", key, err)
		}
		l.ack(key, val)
	}
}

func (e *env) patchPool(t *testing.T, ctx context.Context, patch string) {
	t.Helper()
	pool := &kvapi.CompactionPool{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: poolName}}
	if err := e.c.Patch(ctx, pool, client.RawPatch("application/merge-patch+json", []byte(patch))); err != nil {
		t.Fatalf("patch CompactionPool %s: %v", patch, err)
	}
}

// awaitWorkers waits until the pool's Deployment has exactly n Ready, updated workers.
func (e *env) awaitWorkers(t *testing.T, n int32) {
	t.Helper()
	e.awaitWorkersWhere(t, fmt.Sprintf("%d Ready workers", n), func(spec int32) bool { return spec == n })
}

// awaitWorkersWhere waits until the workers' Deployment has rolled out at a
// size for which ok is true, every worker Ready.
func (e *env) awaitWorkersWhere(t *testing.T, what string, ok func(spec int32) bool) {
	t.Helper()
	eventually(t, 2*time.Minute, what, func(ctx context.Context) (bool, string, error) {
		var d appsv1.Deployment
		if err := e.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: poolName + "-compactor"}, &d); err != nil {
			return false, "", err
		}
		n := ptr.Deref(d.Spec.Replicas, 0)
		s := fmt.Sprintf("spec %d, ready %d, updated %d, total %d", n, d.Status.ReadyReplicas, d.Status.UpdatedReplicas, d.Status.Replicas)
		return ok(n) && d.Status.ReadyReplicas == n && d.Status.UpdatedReplicas == n && d.Status.Replicas == n &&
			d.Status.ObservedGeneration == d.Generation, s, nil
	})
}

// 9. Autoscaling through the capacity model (see autoscaling_test.go).
func (e *env) autoscaling(t *testing.T, kv *kvClient, l *ledger) { autoscalingScenario(t, e, kv, l) }

// 10. The upgrade of docs/guide/operations.md, as a user runs it: the new
// CRDs applied server-side, then `helm upgrade` to a new image. The new
// operator rolls the storage pods one at a time and the workers by their
// Deployment, while a client keeps writing and reading: it may see brief
// UNAVAILABLE (retried), but no operation fails and every acknowledged write
// reads back. A watch of the whole key space through the client Service
// (the Go client seeded with its ClusterIP) runs across the roll and
// delivers every acknowledged write, no commit twice, each key's in commit
// order.
func (e *env) upgrade(t *testing.T, kv *kvClient, l *ledger) {
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	old := map[string]string{}
	for _, p := range e.pods(t, contract.ComponentStore, clusterName) {
		old[p.Name] = string(p.UID)
	}
	oldWorkers := map[types.UID]bool{}
	for _, p := range e.pods(t, contract.ComponentCompactor, poolName) {
		oldWorkers[p.UID] = true
	}
	// A watch of every key through the client Service, as an application
	// in the cluster runs one, across the roll's store restarts: it must
	// deliver each acknowledged write, once.
	isRoll := func(key []byte) bool { return len(key) > 1 && strings.HasPrefix(string(key[1:]), "roll-") }
	sw := e.startServiceWatch(t, ctx, isRoll)
	acked := map[string]string{} // written by the workload's goroutine, read after wg.Wait
	// the workload: writes, each read back at once, until stopped
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var writes, retries, failures atomic.Int64
	var firstFailure atomic.Value
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			key := keyFor("roll", i)
			val := []byte(fmt.Sprintf("roll-%d", i))
			octx, ocancel := context.WithTimeout(ctx, 60*time.Second)
			n, err := kv.Put(octx, key, val)
			retries.Add(int64(n))
			if err == nil {
				l.ack(key, val)
				acked[string(key)] = string(val)
				writes.Add(1)
				var got []byte
				var found bool
				got, found, n, err = kv.Get(octx, key)
				retries.Add(int64(n))
				if err == nil && (!found || string(got) != string(val)) {
					err = fmt.Errorf("read %q back as %q (found %t)", key, got, found)
				}
			}
			ocancel()
			if err != nil {
				failures.Add(1)
				firstFailure.CompareAndSwap(nil, fmt.Sprintf("key %q: %v", key, err))
			}
		}
	}()
	// one pod at a time: never two storage pods unavailable at once
	var maxDown atomic.Int32
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(200 * time.Millisecond):
			}
			var pods corev1.PodList
			if err := e.c.List(ctx, &pods, client.InNamespace(ns), client.MatchingLabels{contract.LabelInstance: clusterName, contract.LabelComponent: contract.ComponentStore}); err != nil {
				continue
			}
			ready := int32(0)
			for i := range pods.Items {
				if podReady(&pods.Items[i]) {
					ready++
				}
			}
			if down := 2 - ready; down > maxDown.Load() {
				maxDown.Store(down)
			}
		}
	}()
	eventually(t, 30*time.Second, "the workload to get going", func(context.Context) (bool, string, error) {
		return writes.Load() >= 20, fmt.Sprintf("%d writes", writes.Load()), nil
	})
	// Helm installs crds/ only on the first install; re-applying the same
	// CRDs server-side over Helm's must not conflict.
	e.run(t, "kubectl", "apply", "--server-side", "-f", "charts/bellows/crds/")
	e.run(t, "helm", "upgrade", release, "charts/bellows", "--namespace", operatorNS,
		"--set", "image.repository="+imageRepo(upgradeImage), "--set", "image.tag="+imageTag(upgradeImage), "--set", "image.pullPolicy=Never",
		"--set", operatorCPU, "--wait", "--timeout", "3m")
	e.awaitOperator(t, upgradeImage)
	kvc := &kvapi.KVCluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: clusterName}}
	eventually(t, 5*time.Minute, "every storage pod replaced on the new image and the KVCluster Ready", func(ctx context.Context) (bool, string, error) {
		if err := e.c.Get(ctx, client.ObjectKeyFromObject(kvc), kvc); err != nil {
			return false, "", err
		}
		pods := e.pods(t, contract.ComponentStore, clusterName)
		replaced := 0
		for _, p := range pods {
			if old[p.Name] != "" && old[p.Name] != string(p.UID) && podReady(&p) && p.Spec.Containers[0].Image == upgradeImage {
				replaced++
			}
		}
		r := meta.FindStatusCondition(kvc.Status.Conditions, kvapi.ConditionReady)
		st := fmt.Sprintf("%d/2 pods replaced, Ready and on %s; %s; updated %d", replaced, upgradeImage, condString(r), kvc.Status.UpdatedReplicas)
		return replaced == 2 && r != nil && r.Status == metav1.ConditionTrue && r.ObservedGeneration == kvc.Generation, st, nil
	})
	// keep going briefly on the new pods, then stop
	target := writes.Load() + 20
	eventually(t, time.Minute, "writes on the new pods", func(context.Context) (bool, string, error) {
		return writes.Load() >= target, fmt.Sprintf("%d writes", writes.Load()), nil
	})
	close(stop)
	wg.Wait()
	t.Logf("during the roll: %d acknowledged writes, %d retried attempts, %d failed operations, at most %d storage pods down at once",
		writes.Load(), retries.Load(), failures.Load(), maxDown.Load())
	if f := failures.Load(); f > 0 {
		t.Errorf("%d operations failed despite retries, first: %v", f, firstFailure.Load())
	}
	if maxDown.Load() > 1 {
		t.Errorf("%d storage pods were down at once: the roll must go one pod at a time", maxDown.Load())
	}
	sw.expect(t, acked, time.Minute)
	// The workers rolled too: none of the old ones is left, every one is
	// Ready on the new image.
	e.awaitWorkersWhere(t, "the workers rolled", func(int32) bool { return true })
	for _, p := range e.pods(t, contract.ComponentCompactor, poolName) {
		if oldWorkers[p.UID] {
			t.Errorf("worker %s predates the upgrade", p.Name)
		}
		if img := p.Spec.Containers[0].Image; img != upgradeImage {
			t.Errorf("worker %s runs %s, not %s", p.Name, img, upgradeImage)
		}
	}
	verifyLedger(t, ctx, kv, l)
}

// 17. Deleting the resources and uninstalling the chart leaves nothing
// behind: no KVCluster, CompactionPool or namespace of the test, no PVC, no
// operator Deployment, ServiceAccount, ClusterRole(Binding) or release
// Secret, no pod anywhere, no container running in the node's containerd.
// CRDs stay after `helm uninstall` by Helm's design (crds/ is never
// deleted); the test deletes them and checks that too.
func (e *env) uninstall(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	// The cluster first, while its bucket still serves: the stores flush
	// and release their regions on the way down (a bucket outlives the
	// clusters that use it). Then the rest of the overlay (the bucket).
	began := time.Now()
	e.run(t, "kubectl", "delete", "--namespace", ns, "kvclusters.kv.bellows.dev,compactionpools.kv.bellows.dev", "--all", "--wait=true", "--timeout=3m")
	eventually(t, 2*time.Minute, "the storage and compactor pods to be gone", func(ctx context.Context) (bool, string, error) {
		var pods corev1.PodList
		if err := e.c.List(ctx, &pods, client.InNamespace(ns), client.HasLabels{contract.LabelComponent}); err != nil {
			return false, "", err
		}
		var left []string
		for _, p := range pods.Items {
			if c := p.Labels[contract.LabelComponent]; c == contract.ComponentStore || c == contract.ComponentCompactor {
				left = append(left, p.Name)
			}
		}
		return len(left) == 0, strings.Join(left, " "), nil
	})
	t.Logf("the cluster's pods were gone %s after its deletion", time.Since(began).Round(time.Second))
	e.run(t, "kubectl", "delete", "-k", "e2e/overlay", "--ignore-not-found", "--wait=true", "--timeout=3m")
	e.run(t, "helm", "uninstall", release, "--namespace", operatorNS, "--wait", "--timeout", "2m")
	e.run(t, "kubectl", "delete", "namespace", operatorNS, "--wait=true", "--timeout=2m")
	for _, crd := range []string{"kvclusters.kv.bellows.dev", "compactionpools.kv.bellows.dev", "backups.kv.bellows.dev", "scheduledbackups.kv.bellows.dev"} {
		out, err := e.try("kubectl", "get", "crd", crd, "-o", "name")
		if err != nil {
			t.Errorf("CRD %s is gone after helm uninstall (Helm keeps crds/): %v %s", crd, err, out)
			continue
		}
		e.run(t, "kubectl", "delete", "crd", crd, "--wait=true", "--timeout=1m")
	}
	eventually(t, 2*time.Minute, "nothing left behind", func(ctx context.Context) (bool, string, error) {
		var left []string
		check := func(what string, list client.ObjectList, opts ...client.ListOption) {
			if err := e.c.List(ctx, list, opts...); err != nil && !meta.IsNoMatchError(err) {
				left = append(left, what+": "+err.Error())
				return
			}
			if n := meta.LenList(list); n > 0 {
				left = append(left, fmt.Sprintf("%d %s", n, what))
			}
		}
		check("pods", &corev1.PodList{})
		check("PVCs", &corev1.PersistentVolumeClaimList{})
		check("bellows-labelled ClusterRoles", &rbacv1.ClusterRoleList{}, client.MatchingLabels{"app.kubernetes.io/name": "bellows"})
		check("bellows-labelled ClusterRoleBindings", &rbacv1.ClusterRoleBindingList{}, client.MatchingLabels{"app.kubernetes.io/name": "bellows"})
		for _, n := range []string{ns, operatorNS} {
			var nsObj corev1.Namespace
			if err := e.c.Get(ctx, client.ObjectKey{Name: n}, &nsObj); err == nil {
				left = append(left, "namespace "+n+" ("+string(nsObj.Status.Phase)+")")
			}
		}
		if out, err := e.try("kubectl", "get", "crd", "-o", "name"); err == nil && strings.Contains(out, "bellows.dev") {
			left = append(left, "CRDs: "+out)
		}
		if sock := os.Getenv("CONTAINERD_SOCK"); sock != "" {
			out, err := e.try("ctr", "-a", sock, "-n", "k8s.io", "tasks", "ls", "-q")
			if err != nil {
				left = append(left, "ctr: "+err.Error())
			} else if strings.TrimSpace(out) != "" {
				left = append(left, "running containers: "+strings.Join(strings.Fields(out), " "))
			}
		}
		return len(left) == 0, strings.Join(left, "; "), nil
	})
	// the volumes were released: the claims are gone (reclaim policy Retain keeps the data)
	var pvs corev1.PersistentVolumeList
	if err := e.c.List(ctx, &pvs, client.MatchingLabels{"bellows-e2e": "true"}); err != nil {
		t.Fatal(err)
	}
	for _, pv := range pvs.Items {
		if pv.Status.Phase == corev1.VolumeBound {
			t.Errorf("PV %s is still Bound to %v", pv.Name, pv.Spec.ClaimRef)
		}
	}
}
