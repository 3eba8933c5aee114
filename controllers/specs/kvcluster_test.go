package specs

import (
	"reflect"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	kvapi "github.com/bellows-kv/bellows/api/v1alpha1"
	"github.com/bellows-kv/bellows/internal/contract"
)

func TestEngineConfig(t *testing.T) {
	got, err := EngineConfig(defaultedCluster())
	if err != nil {
		t.Fatal(err)
	}
	// A KVCluster left at its defaults runs the engine at its defaults: the
	// CRD, SetDefaults and the engine take them from one place.
	if want := contract.DefaultEngineConfig(); got != want {
		t.Errorf("engine.yaml of the defaults:\n got %+v\nwant %+v (contract.DefaultEngineConfig)", got, want)
	}
	got, err = EngineConfig(fullCluster())
	if err != nil {
		t.Fatal(err)
	}
	want := contract.EngineConfig{
		Memstore: contract.Memstore{Policy: contract.MemstoreEager, Bytes: 64 << 20, MaxWALBytes: 96 << 20,
			MaxWALAge: contract.Duration{Duration: 30 * time.Minute}, MaxStoreWALBytes: 1 << 30,
			ActiveFraction: contract.DefaultMemstoreActiveFraction, PipelineSegments: contract.DefaultMemstorePipelineSegments,
			RedundancyThreshold: contract.DefaultMemstoreRedundancyThreshold},
		Retention:       contract.Retention{GCTTL: contract.Duration{Duration: 2 * time.Minute}, MaxVersions: 1},
		BlockCacheBytes: 3 << 30,
		Compaction:      contract.Compaction{MinFiles: 4, MaxFiles: 12, Ratio: 1.5, MaxBytes: 2 << 30},
		Offload:         contract.OffloadDisabled,
		Warmup:          contract.Warmup{Mode: contract.WarmupThrottledIncremental, RateBytesPerSecond: 50_000_000},
		SyncMode:        contract.SyncModeAsync,
	}
	if got != want {
		t.Errorf("engine.yaml of every setting:\n got %+v\nwant %+v", got, want)
	}

	// The ConfigMap holds exactly that file, and it reads back the same.
	cm, err := BuildStoreConfigMap(fullCluster())
	if err != nil {
		t.Fatal(err)
	}
	if len(cm.Data) != 1 {
		t.Fatalf("ConfigMap data keys %v, want only %s", cm.Data, contract.EngineConfigFile)
	}
	back, err := contract.UnmarshalEngineConfig([]byte(cm.Data[contract.EngineConfigFile]))
	if err != nil || back != want {
		t.Errorf("engine.yaml reads back as %+v (%v), want %+v", back, err, want)
	}

	c := defaultedCluster()
	c.Spec.Engine.Compaction.Ratio = "1.2.3"
	if _, err := EngineConfig(c); err == nil {
		t.Error("a ratio that is not a number must be an error")
	}
	if _, err := BuildStoreConfigMap(c); err == nil {
		t.Error("BuildStoreConfigMap must return EngineConfig's error")
	}
}

// TestStoreArgs compares the whole flag list: a substring match would let
// --regions=70 pass for --regions=7.
func TestStoreArgs(t *testing.T) {
	for _, tc := range []struct {
		name string
		c    *kvapi.KVCluster
		pool *kvapi.CompactionPool
		want []string
	}{
		// The pool's m = 6Gi: regions split at 3Gi.
		{"region count and a pool", defaultedCluster(), referencedPool(), []string{
			"store", "--listen=:7400", "--metrics-listen=:9090", "--bucket=file:///bucket",
			"--wal-dir=/var/lib/bellows/wal", "--config=/etc/bellows/engine.yaml",
			"--regions=7", "--split-bytes=3221225472", "--merge-bytes=805306368", "--max-moves-in-flight=2", "--recut-tolerance=0.2", "--balance-min-bytes=67108864", "--split-qps=0", "--max-clock-offset=250ms", "--wal-archive-interval=5s", "--durability=Bucket",
			"--region-owner=$(POD_INDEX)", "--replicas-from=ns/kv", "--peer-service=ns/kv-headless",
			"--compactor-service=ns/pool-compactor", "--tls-dir=/etc/bellows-tls", "--tokens-file=/etc/bellows-tokens/tokens",
		}},
		// Split keys instead of a count, the split settings written;
		// offload Disabled: no compactor Service even though a pool is
		// referenced; TLS Disabled: no --tls-dir.
		{"split keys, offload disabled", fullCluster(), referencedPool(), []string{
			"store", "--listen=:7400", "--metrics-listen=:9090", "--bucket=s3://bucket/prefix",
			"--wal-dir=/var/lib/bellows/wal", "--config=/etc/bellows/engine.yaml",
			"--split-keys=g,p", "--split-bytes=1073741824", "--merge-bytes=268435456", "--max-moves-in-flight=2", "--recut-tolerance=0.35", "--balance-min-bytes=67108864", "--split-qps=2500", "--max-clock-offset=50ms", "--wal-archive-interval=1s", "--durability=Bucket",
			"--region-owner=$(POD_INDEX)", "--replicas-from=prod/big", "--peer-service=prod/big-headless",
		}},
		{"no pool", func() *kvapi.KVCluster {
			c := defaultedCluster()
			c.Spec.CompactionPoolRef = nil
			c.Spec.Regions.Count = ptr.To(int32(70))
			return c
		}(), nil, []string{
			"store", "--listen=:7400", "--metrics-listen=:9090", "--bucket=file:///bucket",
			"--wal-dir=/var/lib/bellows/wal", "--config=/etc/bellows/engine.yaml",
			"--regions=70", "--split-bytes=536870912", "--merge-bytes=134217728", "--max-moves-in-flight=2", "--recut-tolerance=0.2", "--balance-min-bytes=67108864", "--split-qps=0", "--max-clock-offset=250ms", "--wal-archive-interval=5s", "--durability=Bucket",
			"--region-owner=$(POD_INDEX)", "--replicas-from=ns/kv", "--peer-service=ns/kv-headless", "--tls-dir=/etc/bellows-tls", "--tokens-file=/etc/bellows-tokens/tokens",
		}},
		// The pool named does not exist (yet): the default without a pool.
		{"pool not found", defaultedCluster(), nil, []string{
			"store", "--listen=:7400", "--metrics-listen=:9090", "--bucket=file:///bucket",
			"--wal-dir=/var/lib/bellows/wal", "--config=/etc/bellows/engine.yaml",
			"--regions=7", "--split-bytes=536870912", "--merge-bytes=134217728", "--max-moves-in-flight=2", "--recut-tolerance=0.2", "--balance-min-bytes=67108864", "--split-qps=0", "--max-clock-offset=250ms", "--wal-archive-interval=5s", "--durability=Bucket",
			"--region-owner=$(POD_INDEX)", "--replicas-from=ns/kv", "--peer-service=ns/kv-headless",
			"--compactor-service=ns/pool-compactor", "--tls-dir=/etc/bellows-tls", "--tokens-file=/etc/bellows-tokens/tokens",
		}},
		// 0 never splits, and is passed as 0 (not the store's default).
		{"never split", func() *kvapi.KVCluster {
			c := defaultedCluster()
			c.Spec.Regions.SplitBytes = ptr.To(resource.MustParse("0"))
			return c
		}(), referencedPool(), []string{
			"store", "--listen=:7400", "--metrics-listen=:9090", "--bucket=file:///bucket",
			"--wal-dir=/var/lib/bellows/wal", "--config=/etc/bellows/engine.yaml",
			"--regions=7", "--split-bytes=0", "--merge-bytes=0", "--max-moves-in-flight=2", "--recut-tolerance=0.2", "--balance-min-bytes=67108864", "--split-qps=0", "--max-clock-offset=250ms", "--wal-archive-interval=5s", "--durability=Bucket",
			"--region-owner=$(POD_INDEX)", "--replicas-from=ns/kv", "--peer-service=ns/kv-headless",
			"--compactor-service=ns/pool-compactor", "--tls-dir=/etc/bellows-tls", "--tokens-file=/etc/bellows-tokens/tokens",
		}},
		// 0 turns the clock checks off, and is passed as 0s (not the
		// store's default); a bound written in another form is passed in
		// one form, so rewriting it rolls nothing.
		{"clock checks off", func() *kvapi.KVCluster {
			c := defaultedCluster()
			c.Spec.Clock.MaxOffset = "0"
			return c
		}(), referencedPool(), []string{
			"store", "--listen=:7400", "--metrics-listen=:9090", "--bucket=file:///bucket",
			"--wal-dir=/var/lib/bellows/wal", "--config=/etc/bellows/engine.yaml",
			"--regions=7", "--split-bytes=3221225472", "--merge-bytes=805306368", "--max-moves-in-flight=2", "--recut-tolerance=0.2", "--balance-min-bytes=67108864", "--split-qps=0", "--max-clock-offset=0s", "--wal-archive-interval=5s", "--durability=Bucket",
			"--region-owner=$(POD_INDEX)", "--replicas-from=ns/kv", "--peer-service=ns/kv-headless",
			"--compactor-service=ns/pool-compactor", "--tls-dir=/etc/bellows-tls", "--tokens-file=/etc/bellows-tokens/tokens",
		}},
		{"clock bound in seconds", func() *kvapi.KVCluster {
			c := defaultedCluster()
			c.Spec.Clock.MaxOffset = "0.25s"
			return c
		}(), referencedPool(), []string{
			"store", "--listen=:7400", "--metrics-listen=:9090", "--bucket=file:///bucket",
			"--wal-dir=/var/lib/bellows/wal", "--config=/etc/bellows/engine.yaml",
			"--regions=7", "--split-bytes=3221225472", "--merge-bytes=805306368", "--max-moves-in-flight=2", "--recut-tolerance=0.2", "--balance-min-bytes=67108864", "--split-qps=0", "--max-clock-offset=250ms", "--wal-archive-interval=5s", "--durability=Bucket",
			"--region-owner=$(POD_INDEX)", "--replicas-from=ns/kv", "--peer-service=ns/kv-headless",
			"--compactor-service=ns/pool-compactor", "--tls-dir=/etc/bellows-tls", "--tokens-file=/etc/bellows-tokens/tokens",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := StoreArgs(tc.c, tc.pool); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("args\n got %q\nwant %q", got, tc.want)
			}
			cm, err := BuildStoreConfigMap(tc.c)
			if err != nil {
				t.Fatal(err)
			}
			if got := BuildStoreStatefulSet(tc.c, cm, tc.pool).Spec.Template.Spec.Containers[0].Args; !reflect.DeepEqual(got, tc.want) {
				t.Errorf("the StatefulSet's container args\n got %q\nwant %q", got, tc.want)
			}
		})
	}
}

// TestStoreLabels: every object carries the full label set, pods are
// selected by the immutable subset, and the Services are told apart.
func TestStoreLabels(t *testing.T) {
	c := defaultedCluster()
	common := map[string]string{
		"app.kubernetes.io/name": "bellows", "app.kubernetes.io/instance": "kv", "app.kubernetes.io/component": "store",
		"app.kubernetes.io/managed-by": "bellows-operator", "app.kubernetes.io/part-of": "bellows",
	}
	selector := map[string]string{"app.kubernetes.io/name": "bellows", "app.kubernetes.io/instance": "kv", "app.kubernetes.io/component": "store"}
	withService := func(l map[string]string, svc string) map[string]string {
		out := map[string]string{contract.LabelService: svc}
		for k, v := range l {
			out[k] = v
		}
		return out
	}
	cm, err := BuildStoreConfigMap(c)
	if err != nil {
		t.Fatal(err)
	}
	sts := BuildStoreStatefulSet(c, cm, nil)
	for _, o := range []metav1.Object{cm, sts, BuildStorePDB(c), BuildStoreServiceAccount(c), BuildStoreRole(c), BuildStoreRoleBinding(c), BuildStoreServiceMonitor(c)} {
		if !reflect.DeepEqual(o.GetLabels(), common) {
			t.Errorf("%T labels %v, want %v", o, o.GetLabels(), common)
		}
	}
	if h := BuildStoreHeadlessService(c); !reflect.DeepEqual(h.Labels, withService(common, "headless")) || !reflect.DeepEqual(h.Spec.Selector, selector) {
		t.Errorf("headless Service labels %v selector %v", h.Labels, h.Spec.Selector)
	}
	if s := BuildStoreClientService(c); !reflect.DeepEqual(s.Labels, withService(common, "client")) || !reflect.DeepEqual(s.Spec.Selector, selector) {
		t.Errorf("client Service labels %v selector %v", s.Labels, s.Spec.Selector)
	}
	if !reflect.DeepEqual(sts.Spec.Selector.MatchLabels, selector) || !reflect.DeepEqual(sts.Spec.Template.Labels, common) ||
		!reflect.DeepEqual(sts.Spec.VolumeClaimTemplates[0].Labels, selector) {
		t.Errorf("StatefulSet selector %v, pod labels %v, claim labels %v", sts.Spec.Selector.MatchLabels, sts.Spec.Template.Labels, sts.Spec.VolumeClaimTemplates[0].Labels)
	}
	if pdb := BuildStorePDB(c); !reflect.DeepEqual(pdb.Spec.Selector.MatchLabels, selector) {
		t.Errorf("PDB selector %v", pdb.Spec.Selector.MatchLabels)
	}
	sm := BuildStoreServiceMonitor(c)
	wantSel := map[string]any{}
	for k, v := range withService(selector, "headless") {
		wantSel[k] = v
	}
	if got := sm.Object["spec"].(map[string]any)["selector"]; !reflect.DeepEqual(got, map[string]any{"matchLabels": wantSel}) {
		t.Errorf("ServiceMonitor selector %v, want the headless Service's labels %v", got, wantSel)
	}
}

func TestStoreStatefulSet(t *testing.T) {
	c := defaultedCluster()
	cm, err := BuildStoreConfigMap(c)
	if err != nil {
		t.Fatal(err)
	}
	sts := BuildStoreStatefulSet(c, cm, nil)
	if want := []metav1.OwnerReference{{APIVersion: "kv.bellows.dev/v1alpha1", Kind: "KVCluster", Name: "kv", UID: "uid-1",
		Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}}; !reflect.DeepEqual(sts.OwnerReferences, want) {
		t.Errorf("owner references %+v, want %+v", sts.OwnerReferences, want)
	}
	if want := map[string]string{contract.ConfigHashAnnotation: SpecHash(cm)}; !reflect.DeepEqual(sts.Spec.Template.Annotations, want) {
		t.Errorf("pod template annotations %v, want %v: config changes must roll the pods", sts.Spec.Template.Annotations, want)
	}
	pod := sts.Spec.Template.Spec
	if pod.ServiceAccountName != "kv-store" || sts.Spec.ServiceName != "kv-headless" || pod.Volumes[0].ConfigMap.Name != "kv-engine" {
		t.Errorf("serviceAccount %q, serviceName %q, config volume %q", pod.ServiceAccountName, sts.Spec.ServiceName, pod.Volumes[0].ConfigMap.Name)
	}
	if sts.Spec.UpdateStrategy.RollingUpdate.MaxUnavailable.IntValue() != 1 || sts.Spec.PodManagementPolicy != "OrderedReady" {
		t.Error("storage pods must roll one at a time")
	}

	// Same input, same hash; a change anywhere in the spec, a new hash.
	if h := SpecHash(BuildStoreStatefulSet(defaultedCluster(), cm, nil)); h != SpecHash(sts) {
		t.Error("hash is not deterministic")
	}
	c2 := defaultedCluster()
	c2.Spec.Image = "other"
	if SpecHash(BuildStoreStatefulSet(c2, cm, nil)) == SpecHash(sts) {
		t.Error("image change must change the spec hash")
	}
	c2 = defaultedCluster()
	c2.Spec.Engine.Memstore.Policy = "Eager"
	cm2, err := BuildStoreConfigMap(c2)
	if err != nil {
		t.Fatal(err)
	}
	if SpecHash(cm2) == SpecHash(cm) || SpecHash(BuildStoreStatefulSet(c2, cm2, nil)) == SpecHash(sts) {
		t.Error("engine change must change the ConfigMap and StatefulSet hashes")
	}
}

func TestStoreServices(t *testing.T) {
	c := defaultedCluster()
	grpc := corev1.ServicePort{Name: "grpc", Port: 7400, TargetPort: intstrName("grpc"), Protocol: corev1.ProtocolTCP}
	metrics := corev1.ServicePort{Name: "metrics", Port: 9090, TargetPort: intstrName("metrics"), Protocol: corev1.ProtocolTCP}
	// --peer-service names the headless Service's port "grpc".
	if h := BuildStoreHeadlessService(c); h.Name != "kv-headless" || h.Spec.ClusterIP != "None" || !h.Spec.PublishNotReadyAddresses ||
		!reflect.DeepEqual(h.Spec.Ports, []corev1.ServicePort{grpc, metrics}) {
		t.Errorf("headless Service %s: %+v", h.Name, h.Spec)
	}
	if s := BuildStoreClientService(c); s.Name != "kv" || s.Spec.Type != corev1.ServiceTypeClusterIP || !reflect.DeepEqual(s.Spec.Ports, []corev1.ServicePort{grpc}) {
		t.Errorf("client Service %s: %+v", s.Name, s.Spec)
	}
	if p := BuildStorePDB(c); p.Name != "kv" || p.Spec.MaxUnavailable.IntValue() != 1 || p.Spec.MinAvailable != nil {
		t.Errorf("PDB %s: %+v", p.Name, p.Spec)
	}
}

// TestStoreIdentityBuilders: the storage pods' ServiceAccount, and the Role
// and RoleBinding that let it (and only it) read EndpointSlices.
// A replica change must not touch the pod template: the StatefulSet would
// restart every store. The stores read the replica count themselves
// (--replicas-from).
func TestReplicaChangeKeepsThePodTemplate(t *testing.T) {
	a, b := defaultedCluster(), defaultedCluster()
	b.Spec.Replicas = a.Spec.Replicas + 2
	cm, err := BuildStoreConfigMap(a)
	if err != nil {
		t.Fatal(err)
	}
	cmB, err := BuildStoreConfigMap(b)
	if err != nil {
		t.Fatal(err)
	}
	if SpecHash(cm) != SpecHash(cmB) {
		t.Error("the engine ConfigMap changes with replicas")
	}
	stsA, stsB := BuildStoreStatefulSet(a, cm, nil), BuildStoreStatefulSet(b, cmB, nil)
	if !reflect.DeepEqual(stsA.Spec.Template, stsB.Spec.Template) {
		t.Errorf("pod templates differ with replicas %d and %d:\n%+v\n%+v", a.Spec.Replicas, b.Spec.Replicas,
			stsA.Spec.Template.Spec.Containers[0].Args, stsB.Spec.Template.Spec.Containers[0].Args)
	}
	if *stsA.Spec.Replicas == *stsB.Spec.Replicas {
		t.Error("spec.replicas does not follow the cluster")
	}
}

// A change of the clock bound changes the pod template, and so rolls the
// stores as any other spec change does: each restarts with the new bound.
func TestClockBoundChangeRollsThePods(t *testing.T) {
	a, b := defaultedCluster(), defaultedCluster()
	b.Spec.Clock.MaxOffset = "100ms"
	cm, err := BuildStoreConfigMap(a)
	if err != nil {
		t.Fatal(err)
	}
	stsA, stsB := BuildStoreStatefulSet(a, cm, nil), BuildStoreStatefulSet(b, cm, nil)
	if reflect.DeepEqual(stsA.Spec.Template, stsB.Spec.Template) || SpecHash(stsA) == SpecHash(stsB) {
		t.Error("the pod template and spec hash do not change with clock.maxOffset")
	}
}

func TestStoreIdentityBuilders(t *testing.T) {
	c := defaultedCluster()
	sa, role, rb := BuildStoreServiceAccount(c), BuildStoreRole(c), BuildStoreRoleBinding(c)
	for _, o := range []metav1.Object{sa, role, rb} {
		if o.GetName() != "kv-store" || o.GetNamespace() != "ns" {
			t.Errorf("%T is %s/%s, want ns/kv-store", o, o.GetNamespace(), o.GetName())
		}
		if ref := metav1.GetControllerOf(o); ref == nil || ref.UID != "uid-1" || ref.Kind != "KVCluster" {
			t.Errorf("%T owner reference: %+v", o, ref)
		}
		if SpecHash(o) == "" {
			t.Errorf("%T has no spec hash", o)
		}
	}
	wantRules := []rbacv1.PolicyRule{
		{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: []string{"list", "watch"}},
		{APIGroups: []string{"apps"}, Resources: []string{"statefulsets"}, ResourceNames: []string{"kv"}, Verbs: []string{"list", "watch"}},
	}
	if !reflect.DeepEqual(role.Rules, wantRules) {
		t.Errorf("role rules %+v, want %+v", role.Rules, wantRules)
	}
	if want := (rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "kv-store"}); rb.RoleRef != want {
		t.Errorf("roleRef %+v, want %+v", rb.RoleRef, want)
	}
	if want := []rbacv1.Subject{{Kind: "ServiceAccount", Name: "kv-store", Namespace: "ns"}}; !reflect.DeepEqual(rb.Subjects, want) {
		t.Errorf("subjects %+v, want %+v", rb.Subjects, want)
	}
	// Pure: same input, same objects.
	if !reflect.DeepEqual(BuildStoreRole(defaultedCluster()), role) || !reflect.DeepEqual(BuildStoreRoleBinding(defaultedCluster()), rb) ||
		!reflect.DeepEqual(BuildStoreServiceAccount(defaultedCluster()), sa) {
		t.Error("identity builders are not deterministic")
	}
	// The binding follows the cluster's namespace and name.
	c2 := defaultedCluster()
	c2.Namespace, c2.Name = "other", "kv2"
	b := BuildStoreRoleBinding(c2)
	if want := []rbacv1.Subject{{Kind: "ServiceAccount", Name: "kv2-store", Namespace: "other"}}; !reflect.DeepEqual(b.Subjects, want) ||
		b.RoleRef.Name != "kv2-store" || SpecHash(b) == SpecHash(rb) {
		t.Errorf("binding of other/kv2: %+v", b)
	}
}

func TestRegionAssignments(t *testing.T) {
	c := defaultedCluster() // 7 regions, 3 pods
	want := []kvapi.RegionAssignment{{Pod: "kv-0", Regions: "0,3,6", Count: 3}, {Pod: "kv-1", Regions: "1,4", Count: 2}, {Pod: "kv-2", Regions: "2,5", Count: 2}}
	if got := RegionAssignments(c); !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v, want %+v", got, want)
	}
	// Split keys g,p make 3 regions; 5 pods: the last two serve none.
	want = []kvapi.RegionAssignment{{Pod: "big-0", Regions: "0", Count: 1}, {Pod: "big-1", Regions: "1", Count: 1}, {Pod: "big-2", Regions: "2", Count: 1},
		{Pod: "big-3", Count: 0}, {Pod: "big-4", Count: 0}}
	if got := RegionAssignments(fullCluster()); !reflect.DeepEqual(got, want) {
		t.Errorf("split keys: got %+v, want %+v", got, want)
	}
	// A long list is cut at a comma below 200 characters and marked.
	c.Spec.Regions.Count, c.Spec.Replicas = ptr.To(int32(4096)), 1
	got := RegionAssignments(c)
	if len(got) != 1 || got[0].Count != 4096 || len(got[0].Regions) > 200+len(",…") {
		t.Fatalf("got %d entries, count %d, %d characters", len(got), got[0].Count, len(got[0].Regions))
	}
	if r := got[0].Regions; r[:8] != "0,1,2,3," || r[len(r)-len(",…"):] != ",…" {
		t.Errorf("regions %q", r)
	}
}

// The image runs as a non-root user: the WAL volume must be writable by it.
func TestStorePodsRunNonRootWithWritableVolume(t *testing.T) {
	c := defaultedCluster()
	cm, err := BuildStoreConfigMap(c)
	if err != nil {
		t.Fatal(err)
	}
	checkNonRoot(t, BuildStoreStatefulSet(c, cm, nil).Spec.Template.Spec)
}

func checkNonRoot(t *testing.T, spec corev1.PodSpec) {
	t.Helper()
	wantPod := &corev1.PodSecurityContext{
		RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To(int64(65532)), RunAsGroup: ptr.To(int64(65532)), FSGroup: ptr.To(int64(65532)),
		FSGroupChangePolicy: ptr.To(corev1.FSGroupChangeOnRootMismatch),
		SeccompProfile:      &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
	if !reflect.DeepEqual(spec.SecurityContext, wantPod) {
		t.Errorf("pod security context %+v, want %+v", spec.SecurityContext, wantPod)
	}
	wantContainer := &corev1.SecurityContext{
		AllowPrivilegeEscalation: ptr.To(false), ReadOnlyRootFilesystem: ptr.To(true),
		Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
	}
	for _, c := range spec.Containers {
		if !reflect.DeepEqual(c.SecurityContext, wantContainer) {
			t.Errorf("container %s security context %+v, want %+v", c.Name, c.SecurityContext, wantContainer)
		}
	}
}

// TestEngineConfigRefusesWhatTheStoresWould: settings stored before a CRD
// rule existed (a ratio of 0) are refused by the builder, naming the key,
// instead of being rolled out to stores that would not start.
func TestEngineConfigRefusesWhatTheStoresWould(t *testing.T) {
	c := defaultedCluster()
	c.Spec.Engine.Compaction.Ratio = "0"
	if _, err := BuildStoreConfigMap(c); err == nil || !strings.Contains(err.Error(), "compaction.ratio") {
		t.Fatalf("ratio 0: %v, want an error naming compaction.ratio", err)
	}
}

// MarkDraining keeps the current replicas, marks the cluster's replicas as
// serving since the given time, and restamps the hash: the mark is a
// change to write, and the same mark the same hash.
func TestMarkDraining(t *testing.T) {
	c := defaultedCluster()
	c.Spec.Replicas = 3
	cm, err := BuildStoreConfigMap(c)
	if err != nil {
		t.Fatal(err)
	}
	plain := BuildStoreStatefulSet(c, cm, nil)
	since := time.Date(2026, 5, 1, 12, 0, 0, 0, time.FixedZone("x", 3600))
	marked := plain.DeepCopy()
	MarkDraining(marked, 5, since)
	if *marked.Spec.Replicas != 5 {
		t.Errorf("replicas %d, want the current 5", *marked.Spec.Replicas)
	}
	want := map[string]string{contract.ServingReplicasAnnotation: "3", contract.DrainingSinceAnnotation: "2026-05-01T11:00:00Z",
		contract.SpecHashAnnotation: SpecHash(marked)}
	if !reflect.DeepEqual(marked.Annotations, want) {
		t.Errorf("annotations %v, want %v", marked.Annotations, want)
	}
	if SpecHash(marked) == SpecHash(plain) {
		t.Error("the mark did not change the spec hash: it would never be written")
	}
	again := plain.DeepCopy()
	MarkDraining(again, 5, since)
	if SpecHash(again) != SpecHash(marked) {
		t.Error("the same mark gave another hash: each pass would write it again")
	}
	later := plain.DeepCopy()
	MarkDraining(later, 5, since.Add(time.Second))
	if SpecHash(later) == SpecHash(marked) {
		t.Error("a mark with another start has the same hash")
	}
}
