package specs

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	kvapi "github.com/bellows-kv/bellows/api/v1alpha1"
	"github.com/bellows-kv/bellows/internal/contract"
)

// -update rewrites the golden files in testdata/ from the builders; review
// the diff like any other change of what the operator writes.
var update = flag.Bool("update", false, "rewrite testdata/*.yaml from the builders")

// defaultedCluster is a KVCluster with only the required fields, a region
// count and a pool, defaulted as the API server would.
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
	c.Spec.Image = operatorDefaultImage
	return c
}

// operatorDefaultImage stands for the image the reconcilers fill in when
// spec.image is empty (the operator's --default-image).
var operatorDefaultImage = contract.Image("v1.0.0")

// fullCluster sets every optional field the builders read.
func fullCluster() *kvapi.KVCluster {
	c := &kvapi.KVCluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: "prod", Name: "big", UID: "uid-2"},
		Spec: kvapi.KVClusterSpec{
			Replicas:        5,
			Image:           "registry.example/bellows:v9",
			ImagePullPolicy: corev1.PullAlways,
			Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("8Gi")},
			},
			Storage: kvapi.StorageSpec{Size: resource.MustParse("100Gi"), StorageClassName: ptr.To("fast")},
			Bucket:  kvapi.BucketSpec{URL: "s3://bucket/prefix", CredentialsSecretRef: &corev1.LocalObjectReference{Name: "s3-creds"}},
			Regions: kvapi.RegionsSpec{SplitKeys: []string{"g", "p"}, SplitBytes: ptr.To(resource.MustParse("1Gi")), SplitQPS: ptr.To(int32(2500)), RecutTolerancePercent: ptr.To(int32(35))},
			Engine: kvapi.EngineSpec{
				Memstore: kvapi.MemstoreSpec{Policy: "Eager", Bytes: resource.MustParse("64Mi"), MaxWALBytes: resource.MustParse("96Mi"),
					MaxWALAge: "30m", MaxStoreWALBytes: resource.MustParse("1Gi")},
				Retention:       kvapi.RetentionSpec{GCTTL: "2m", MaxVersions: 1},
				BlockCacheBytes: resource.MustParse("3Gi"),
				Compaction:      kvapi.CompactionPolicySpec{MinFiles: 4, MaxFiles: 12, Ratio: "1.5", MaxBytes: resource.MustParse("2Gi")},
				Offload:         "Disabled",
				Warmup:          kvapi.WarmupSpec{Mode: "ThrottledIncremental", RateBytesPerSecond: ptr.To(int64(50_000_000))},
				SyncMode:        "async",
			},
			CompactionPoolRef: &kvapi.CompactionPoolReference{Name: "pool"},
			Clock:             kvapi.ClockSpec{MaxOffset: "50ms"},
			WALArchive:        kvapi.WALArchiveSpec{Interval: "1s"},
			// Plaintext: no certificate volume, no --tls-dir, HTTP probes.
			TLS: kvapi.TLSSpec{Mode: kvapi.TLSDisabled},
			// A hard spread over nodes replaces the default preference.
			Scheduling: kvapi.SchedulingSpec{TopologySpreadConstraints: []corev1.TopologySpreadConstraint{{
				MaxSkew: 1, TopologyKey: "kubernetes.io/hostname", WhenUnsatisfiable: corev1.DoNotSchedule,
				LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app.kubernetes.io/instance": "big"}},
			}}},
		},
	}
	c.SetDefaults()
	return c
}

func defaultedPool() *kvapi.CompactionPool {
	p := &kvapi.CompactionPool{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "w", UID: "u"}}
	p.SetDefaults()
	p.Spec.Image = operatorDefaultImage
	return p
}

func fullPool() *kvapi.CompactionPool {
	p := &kvapi.CompactionPool{
		ObjectMeta: metav1.ObjectMeta{Namespace: "prod", Name: "workers", UID: "uid-3"},
		Spec: kvapi.CompactionPoolSpec{
			Replicas: ptr.To(int32(4)), MinReplicas: 2, MaxReplicas: 20,
			Image: "registry.example/bellows:v9", ImagePullPolicy: corev1.PullIfNotPresent,
			Resources: corev1.ResourceRequirements{
				Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("2Gi")},
			},
			CacheBytes:                 resource.MustParse("1536Mi"),
			TransferRateBytesPerSecond: 8_500_000,
			Bucket:                     kvapi.PoolBucketSpec{CredentialsSecretRef: &corev1.LocalObjectReference{Name: "s3-creds"}},
			TLS:                        kvapi.TLSSpec{Mode: kvapi.TLSDisabled},
			DrainTimeout:               "90s",
			// Opted out of the default spread, on dedicated nodes.
			Scheduling: kvapi.SchedulingSpec{
				Affinity:                  &corev1.Affinity{},
				TopologySpreadConstraints: []corev1.TopologySpreadConstraint{},
				NodeSelector:              map[string]string{"bellows.dev/role": "compaction"},
				Tolerations:               []corev1.Toleration{{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "compaction", Effect: corev1.TaintEffectNoSchedule}},
			},
		},
	}
	p.SetDefaults()
	return p
}

// referencedPool is the pool defaultedCluster references, at its defaults
// (m = 6Gi: the cluster's regions split at 3Gi).
func referencedPool() *kvapi.CompactionPool {
	p := defaultedPool()
	p.Name = "pool"
	return p
}

// chartPeers are the NetworkPolicies' peers of an operator the chart
// installed in bellows-system with its defaults.
var chartPeers = NetworkPolicyPeers{OperatorNamespace: "bellows-system", MonitoringNamespaces: []string{contract.DefaultMonitoringNamespace}}

// otherPeers: an operator that does not know its namespace, and two
// monitoring namespaces given out of order and twice.
var otherPeers = NetworkPolicyPeers{MonitoringNamespaces: []string{"prometheus", "monitoring", "prometheus"}}

// clusterObjects is every object the operator writes for c, whose
// compactionPoolRef names pool (nil: none, or it does not exist), with
// NetworkPolicies that admit peers, in the order of the golden file.
func clusterObjects(t *testing.T, c *kvapi.KVCluster, pool *kvapi.CompactionPool, peers NetworkPolicyPeers) []client.Object {
	t.Helper()
	cm, err := BuildStoreConfigMap(c)
	if err != nil {
		t.Fatal(err)
	}
	return []client.Object{
		BuildStoreServiceAccount(c), BuildStoreRole(c), BuildStoreRoleBinding(c), BuildStoreNetworkPolicy(c, peers),
		BuildStoreHeadlessService(c), BuildStoreClientService(c), BuildStorePDB(c), BuildStoreServiceMonitor(c),
		cm, BuildStoreStatefulSet(c, cm, pool),
	}
}

func poolObjects(p *kvapi.CompactionPool, peers NetworkPolicyPeers) []client.Object {
	return []client.Object{BuildPoolNetworkPolicy(p, peers), BuildPoolDeployment(p), BuildPoolService(p), BuildPoolPDB(p), BuildPoolServiceMonitor(p)}
}

// checkGolden renders objs as one YAML stream and compares it with
// testdata/name.yaml byte for byte.
func checkGolden(t *testing.T, name string, objs []client.Object) {
	t.Helper()
	var buf bytes.Buffer
	for _, o := range objs {
		data, err := yaml.Marshal(o)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&buf, "---\n# %T %s\n%s", o, o.GetName(), data)
	}
	path := filepath.Join("testdata", name+".yaml")
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./controllers/specs -update to write it)", err)
	}
	if !bytes.Equal(buf.Bytes(), want) {
		t.Errorf("%s differs from what the builders make; if the change is intended, run go test ./controllers/specs -update and review the diff.\ngot:\n%s", path, buf.String())
	}
}

// TestGolden pins every object the builders make, whole, for a minimal and a
// fully specified resource of each kind.
func TestGolden(t *testing.T) {
	checkGolden(t, "kvcluster-default", clusterObjects(t, defaultedCluster(), referencedPool(), chartPeers))
	checkGolden(t, "kvcluster-full", clusterObjects(t, fullCluster(), nil, otherPeers))
	checkGolden(t, "compactionpool-default", poolObjects(defaultedPool(), chartPeers))
	checkGolden(t, "compactionpool-full", poolObjects(fullPool(), otherPeers))
}
