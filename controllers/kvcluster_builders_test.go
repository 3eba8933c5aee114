package controllers

import (
	"reflect"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	kvapi "github.com/bellows-kv/bellows/api/v1alpha1"
	"github.com/bellows-kv/bellows/internal/engineconfig"
)

func defaultedCluster() *kvapi.KVCluster {
	c := &kvapi.KVCluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "kv", UID: "uid-1"},
		Spec: kvapi.KVClusterSpec{
			Bucket:            kvapi.BucketSpec{URL: "file:///bucket"},
			Regions:           kvapi.RegionsSpec{Count: ptr.To(int32(7))},
			CompactionPoolRef: &kvapi.CompactionPoolReference{Name: "pool"},
		},
	}
	c.SetDefaults()
	return c
}

func TestStoreBuilders(t *testing.T) {
	c := defaultedCluster()
	cm, err := BuildStoreConfigMap(c)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := engineconfig.Unmarshal([]byte(cm.Data[engineconfig.FileName]))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Memstore.Policy != "Adaptive" || cfg.Compaction.Ratio != 1.2 || cfg.BlockCacheBytes != 1<<30 || cfg.SyncMode != "sync" {
		t.Fatalf("engine.yaml: %+v", cfg)
	}
	sts := BuildStoreStatefulSet(c, cm)
	args := strings.Join(sts.Spec.Template.Spec.Containers[0].Args, " ")
	for _, want := range []string{"store", "--listen=:7400", "--metrics-listen=:9090", "--bucket=file:///bucket", "--regions=7",
		"--region-owner=$(POD_INDEX)/3", "--compactor-service=ns/pool-compactor", "--config=/etc/bellows/engine.yaml", "--wal-dir=",
		"--peer-service=ns/kv-headless"} {
		if !strings.Contains(args, want) {
			t.Errorf("store args %q lack %q", args, want)
		}
	}
	if ref := metav1.GetControllerOf(sts); ref == nil || ref.UID != "uid-1" || ref.Kind != "KVCluster" {
		t.Errorf("owner reference: %+v", ref)
	}
	if sts.Spec.Template.Annotations[configHashAnnotation] != specHash(cm) {
		t.Error("pod template must carry the engine config hash so config changes roll the pods")
	}
	if sa := sts.Spec.Template.Spec.ServiceAccountName; sa != "kv-store" {
		t.Errorf("storage pods run as %q, want kv-store", sa)
	}
	if sts.Spec.UpdateStrategy.RollingUpdate.MaxUnavailable.IntValue() != 1 || sts.Spec.PodManagementPolicy != "OrderedReady" {
		t.Error("storage pods must roll one at a time")
	}

	// Same input, same hash; a change anywhere in the spec, a new hash.
	if h := specHash(BuildStoreStatefulSet(defaultedCluster(), cm)); h != specHash(sts) {
		t.Error("hash is not deterministic")
	}
	c2 := defaultedCluster()
	c2.Spec.Image = "other"
	if specHash(BuildStoreStatefulSet(c2, cm)) == specHash(sts) {
		t.Error("image change must change the spec hash")
	}
	c2 = defaultedCluster()
	c2.Spec.Engine.Memstore.Policy = "Eager"
	cm2, _ := BuildStoreConfigMap(c2)
	if specHash(cm2) == specHash(cm) || specHash(BuildStoreStatefulSet(c2, cm2)) == specHash(sts) {
		t.Error("engine change must change the ConfigMap and StatefulSet hashes")
	}

	// Offload disabled: no compactor service. Split keys: --split-keys.
	c3 := defaultedCluster()
	c3.Spec.Engine.Offload = "Disabled"
	c3.Spec.Regions = kvapi.RegionsSpec{SplitKeys: []string{"g", "p"}}
	args = strings.Join(storeArgs(c3), " ")
	if strings.Contains(args, "--compactor-service") || !strings.Contains(args, "--split-keys=g,p") || !strings.Contains(args, "--peer-service=ns/kv-headless") {
		t.Errorf("args %q", args)
	}
	// --peer-service names the headless Service's port "grpc".
	if h := BuildStoreHeadlessService(c); h.Spec.ClusterIP != "None" || len(h.Spec.Ports) != 2 || h.Spec.Ports[0].Name != "grpc" {
		t.Errorf("headless service: %+v", h.Spec)
	}
	if s := BuildStoreClientService(c); len(s.Spec.Ports) != 1 || s.Spec.Ports[0].Port != 7400 {
		t.Errorf("client service: %+v", s.Spec)
	}
	if p := BuildStorePDB(c); p.Spec.MaxUnavailable.IntValue() != 1 {
		t.Errorf("pdb: %+v", p.Spec)
	}
}

// TestStoreIdentityBuilders: the storage pods' ServiceAccount, and the Role
// and RoleBinding that let it (and only it) read EndpointSlices.
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
		if specHash(o) == "" {
			t.Errorf("%T has no spec hash", o)
		}
		if !reflect.DeepEqual(o.GetLabels(), commonLabels("kv", kvapi.ComponentStore)) {
			t.Errorf("%T labels %v", o, o.GetLabels())
		}
	}
	wantRules := []rbacv1.PolicyRule{{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: []string{"get", "list", "watch"}}}
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
	if specHash(BuildStoreRole(defaultedCluster())) != specHash(role) || specHash(BuildStoreRoleBinding(defaultedCluster())) != specHash(rb) ||
		specHash(BuildStoreServiceAccount(defaultedCluster())) != specHash(sa) {
		t.Error("identity builders are not deterministic")
	}
	// The binding follows the cluster's namespace and name.
	c2 := defaultedCluster()
	c2.Namespace, c2.Name = "other", "kv2"
	if b := BuildStoreRoleBinding(c2); b.Subjects[0].Namespace != "other" || b.Subjects[0].Name != "kv2-store" || b.RoleRef.Name != "kv2-store" ||
		specHash(b) == specHash(rb) {
		t.Errorf("binding of other/kv2: %+v", b)
	}
}

func TestRegionAssignments(t *testing.T) {
	c := defaultedCluster() // 7 regions, 3 pods
	got := RegionAssignments(c)
	want := []kvapi.RegionAssignment{{Pod: "kv-0", Regions: "0,3,6", Count: 3}, {Pod: "kv-1", Regions: "1,4", Count: 2}, {Pod: "kv-2", Regions: "2,5", Count: 2}}
	if len(got) != len(want) {
		t.Fatalf("got %+v", got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("pod %d: got %+v, want %+v", i, got[i], want[i])
		}
	}
}

// The image runs as a non-root user: the WAL volume must be writable by it.
func TestStorePodsRunNonRootWithWritableVolume(t *testing.T) {
	c := defaultedCluster()
	cm, err := BuildStoreConfigMap(c)
	if err != nil {
		t.Fatal(err)
	}
	checkNonRoot(t, BuildStoreStatefulSet(c, cm).Spec.Template.Spec)
}
