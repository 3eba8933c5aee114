package controllers

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	kvapi "github.com/bellows-kv/bellows/api/v1alpha1"
	"github.com/bellows-kv/bellows/internal/contract"
)

func validCluster(ns, name string) *kvapi.KVCluster {
	return &kvapi.KVCluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: kvapi.KVClusterSpec{
			Replicas: 3,
			Bucket:   kvapi.BucketSpec{URL: "s3://bucket"},
			Regions:  kvapi.RegionsSpec{Count: ptr.To(int32(4))},
		},
	}
}

func validPool(ns, name string) *kvapi.CompactionPool {
	return &kvapi.CompactionPool{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       kvapi.CompactionPoolSpec{MinReplicas: 1, MaxReplicas: 5},
	}
}

// crdRules serializes the tests that rely on the CRDs' validation rules with
// TestInvalidStoredPoolIsReportedOnItself, which takes a rule out of the API
// server for a moment: they take it for reading, that test for writing. The
// package's tests do not call t.Parallel today; this keeps it safe if one
// does.
var crdRules sync.RWMutex

// fromYAML is an object of kind (KVCluster or CompactionPool) with spec
// written as YAML: values the typed API cannot hold, such as a duration of
// "ten minutes" or a quantity of "six gigs", as a user could write them.
func fromYAML(t *testing.T, kind, ns, name, spec string) *unstructured.Unstructured {
	t.Helper()
	m := map[string]any{}
	if err := yaml.Unmarshal([]byte(spec), &m); err != nil {
		t.Fatal(err)
	}
	u := &unstructured.Unstructured{Object: map[string]any{"spec": m}}
	u.SetAPIVersion(kvapi.GroupVersion.String())
	u.SetKind(kind)
	u.SetNamespace(ns)
	u.SetName(name)
	return u
}

// TestValidationRejectsInvalidResources creates each invalid resource against
// the real API server and checks it is refused with a message a user
// understands (CEL x-kubernetes-validations and OpenAPI bounds of the CRDs).
//
// Every message names the field and the value, and none is a regular
// expression: neither controller-gen's pattern for quantities (dropped by
// hack/crdschema) nor the error of a quantity rule that failed to evaluate
// on a value that is not a quantity, which came with `Invalid value: ""`
// (each quantity rule now tests isQuantity first).
func TestValidationRejectsInvalidResources(t *testing.T) {
	crdRules.RLock()
	defer crdRules.RUnlock()
	ctx := context.Background()
	ns := newNamespace(t)
	pool := func(name, spec string) func() client.Object {
		return func() client.Object { return fromYAML(t, "CompactionPool", ns, name, spec) }
	}
	cluster := func(name, spec string) func() client.Object {
		return func() client.Object {
			return fromYAML(t, "KVCluster", ns, name, "{bucket: {url: 's3://bucket'}, regions: {count: 4}, "+spec+"}")
		}
	}
	long := func(n int) string { return "n" + strings.Repeat("x", n-1) }
	tests := []struct {
		name string
		obj  func() client.Object
		msg  string
	}{
		{"zero storage replicas", func() client.Object {
			c := validCluster(ns, "c1")
			c.Spec.Replicas = -1
			return c
		}, "spec.replicas: Invalid value: -1: spec.replicas in body should be greater than or equal to 1"},
		{"too many storage replicas", func() client.Object {
			c := validCluster(ns, "c2")
			c.Spec.Replicas = 101
			return c
		}, "should be less than or equal to 100"},
		{"unsupported bucket scheme", func() client.Object {
			c := validCluster(ns, "c3")
			c.Spec.Bucket.URL = "ftp://bucket"
			return c
		}, "bucket.url must start with one of the supported schemes file://, s3://, gs:// or azblob://"},
		{"bucket without a URL", func() client.Object {
			c := validCluster(ns, "c4")
			c.Spec.Bucket.URL = ""
			return c
		}, "spec.bucket.url"},
		{"throttled warmup without a rate", func() client.Object {
			c := validCluster(ns, "c5")
			c.Spec.Engine.Warmup.Mode = "ThrottledIncremental"
			return c
		}, "engine.warmup.rateBytesPerSecond must be a positive rate when mode is ThrottledIncremental"},
		{"throttled warmup with a zero rate", func() client.Object {
			c := validCluster(ns, "c6")
			c.Spec.Engine.Warmup = kvapi.WarmupSpec{Mode: "ThrottledIncremental", RateBytesPerSecond: ptr.To(int64(0))}
			return c
		}, "engine.warmup.rateBytesPerSecond must be a positive rate"},
		{"unknown warmup mode", func() client.Object {
			c := validCluster(ns, "c7")
			c.Spec.Engine.Warmup.Mode = "Lukewarm"
			return c
		}, `supported values: "None", "Offload", "RemoteCache", "PreSwitch", "Incremental", "ThrottledIncremental"`},
		{"both region count and split keys", func() client.Object {
			c := validCluster(ns, "c8")
			c.Spec.Regions.SplitKeys = []string{"m"}
			return c
		}, "regions: count and splitKeys are both set; set one: remove count to cut the key space at splitKeys, or remove splitKeys to cut it into count even ranges"},
		{"split keys out of order", func() client.Object {
			c := validCluster(ns, "c9")
			c.Spec.Regions = kvapi.RegionsSpec{SplitKeys: []string{"m", "c"}}
			return c
		}, "regions.splitKeys must be strictly increasing"},
		{"zero regions", func() client.Object {
			c := validCluster(ns, "c10")
			c.Spec.Regions.Count = ptr.To(int32(0))
			return c
		}, "spec.regions.count in body should be greater than or equal to 1"},
		{"pool reference that names no pool", func() client.Object {
			c := validCluster(ns, "c11")
			c.Spec.CompactionPoolRef = &kvapi.CompactionPoolReference{Name: "Not A Pool!"}
			return c
		}, "compactionPoolRef.name must name a CompactionPool"},
		{"offload required without a pool", func() client.Object {
			c := validCluster(ns, "c12")
			c.Spec.Engine.Offload = "Required"
			return c
		}, "engine.offload: Required needs a compactionPoolRef"},
		{"zero block cache", func() client.Object {
			c := validCluster(ns, "c13")
			c.Spec.Engine.BlockCacheBytes = resource.MustParse("-1")
			return c
		}, "engine.blockCacheBytes: -1 must be greater than zero"},
		{"minFiles above maxFiles", func() client.Object {
			c := validCluster(ns, "c14")
			c.Spec.Engine.Compaction.MinFiles, c.Spec.Engine.Compaction.MaxFiles = 8, 4
			return c
		}, "spec.engine.compaction.minFiles: Invalid value: engine.compaction.minFiles 8 is greater than maxFiles 4: lower minFiles, or set maxFiles to at least 8"},
		{"default minFiles above maxFiles", cluster("c15", "engine: {compaction: {maxFiles: 2}}"),
			"engine.compaction.minFiles 3 (the default) is greater than maxFiles 2: lower minFiles, or set maxFiles to at least 3"},
		{"minReplicas above maxReplicas", func() client.Object {
			p := validPool(ns, "p1")
			p.Spec.MinReplicas, p.Spec.MaxReplicas = 6, 3
			return p
		}, "spec.minReplicas: Invalid value: minReplicas 6 is greater than maxReplicas 3: lower minReplicas, or set maxReplicas to at least 6"},
		{"minReplicas above the default maxReplicas", pool("p6", "{minReplicas: 12}"),
			"minReplicas 12 is greater than maxReplicas 10 (the default): lower minReplicas, or set maxReplicas to at least 12"},
		{"negative pool replicas", func() client.Object {
			p := validPool(ns, "p2")
			p.Spec.Replicas = ptr.To(int32(-2))
			return p
		}, "spec.replicas in body should be greater than or equal to 0"},
		{"pool larger than 1000", func() client.Object {
			p := validPool(ns, "p3")
			p.Spec.MaxReplicas = 5000
			return p
		}, "spec.maxReplicas in body should be less than or equal to 1000"},
		{"zero cache", func() client.Object {
			p := validPool(ns, "p4")
			p.Spec.CacheBytes = resource.MustParse("-6Gi")
			return p
		}, "cacheBytes: -6Gi must be greater than zero"},
		{"unknown autoscaling mode", func() client.Object {
			p := validPool(ns, "p5")
			p.Spec.Autoscaling.Mode = "Magic"
			return p
		}, `supported values: "Model", "External", "Disabled"`},

		// Durations: Go's syntax, no negative values, a minimum where zero
		// cannot work.
		{"drain timeout in words", pool("d1", "{drainTimeout: ten minutes}"),
			`spec.drainTimeout: Invalid value: "ten minutes": drainTimeout: "ten minutes" is not a duration; write a number with a unit (h, m, s), e.g. 10m or 1h30m`},
		{"negative drain timeout", pool("d2", "{drainTimeout: -5m}"), "drainTimeout: -5m is below the minimum 1s"},
		{"interval in days", pool("d3", "{autoscaling: {interval: 1d}}"), `autoscaling.interval: "1d" is not a duration; use hours, e.g. 24h for a day`},
		{"zero sync period", pool("d4", "{autoscaling: {syncPeriod: 0s}}"), "autoscaling.syncPeriod: 0s is below the minimum 1s"},
		{"negative scale-down window", pool("d5", "{autoscaling: {scaleDownStabilizationWindow: -1m}}"),
			"autoscaling.scaleDownStabilizationWindow: -1m is negative; write 0s for no window"},
		{"scale-up window in words", pool("d6", "{autoscaling: {scaleUpStabilizationWindow: soon}}"),
			`autoscaling.scaleUpStabilizationWindow: "soon" is not a duration`},

		// Quantities: what was written, and how to write one.
		{"cache in words", pool("q1", "{cacheBytes: six gigs}"),
			`spec.cacheBytes: Invalid value: "six gigs": cacheBytes: "six gigs" is not a quantity; write bytes with a unit, e.g. 6Gi or 512Mi`},
		{"storage size in words", cluster("q2", "storage: {size: big}"), `storage.size: "big" is not a quantity; write bytes with a unit, e.g. 10Gi`},
		{"block cache in words", cluster("q3", "engine: {blockCacheBytes: lots}"), `engine.blockCacheBytes: "lots" is not a quantity`},
		{"memstore in words", cluster("q4", "engine: {memstore: {bytes: 64 megs}}"), `engine.memstore.bytes: "64 megs" is not a quantity`},
		{"memstore below its minimum", cluster("q5", "engine: {memstore: {bytes: 1Ki}}"), "engine.memstore.bytes: 1Ki is below the minimum 1Mi"},
		{"compaction maxBytes in words", cluster("q6", "engine: {compaction: {maxBytes: 4 gigs}}"), `engine.compaction.maxBytes: "4 gigs" is not a quantity`},

		{"empty credentials Secret name", func() client.Object {
			p := validPool(ns, "s1")
			p.Spec.Bucket.CredentialsSecretRef = &corev1.LocalObjectReference{}
			return p
		}, "bucket.credentialsSecretRef.name is empty: name the Secret with the bucket credentials"},
		{"cluster credentials Secret without a name", cluster("s2", "bucket: {url: 's3://bucket', credentialsSecretRef: {name: ''}}"),
			"bucket.credentialsSecretRef.name is empty"},
		{"credentials Secret name that names no Secret", cluster("s3", "bucket: {url: 's3://bucket', credentialsSecretRef: {name: S3_Creds}}"),
			`bucket.credentialsSecretRef.name: "S3_Creds" is not a Secret name`},
		{"empty split key", cluster("k1", "regions: {splitKeys: ['', m]}"),
			`regions.splitKeys[0]: "" (an empty key) is not a boundary, as every key sorts after it; remove it`},
		// Split settings: the field, the value and the fix.
		{"split size in words", cluster("sb1", "regions: {count: 4, splitBytes: three gigs}"),
			`regions.splitBytes: "three gigs" is not a quantity; write bytes with a unit, e.g. 3Gi (at most half the cacheBytes of the CompactionPool), or 0 to never split`},
		{"negative split size", cluster("sb2", "regions: {count: 4, splitBytes: -1Gi}"),
			"regions.splitBytes: -1Gi is negative; write a size such as 3Gi"},
		{"split size below the default memstore", cluster("sb3", "regions: {count: 4, splitBytes: 64Mi}"),
			"spec.regions.splitBytes: Invalid value: regions.splitBytes: 64Mi is below engine.memstore.bytes 128Mi (the default), so a region would split at every flush of its memstore: set splitBytes to at least 128Mi"},
		{"split size below the memstore set", cluster("sb4", "regions: {count: 4, splitBytes: 200Mi}, engine: {memstore: {bytes: 256Mi}}"),
			"regions.splitBytes: 200Mi is below engine.memstore.bytes 256Mi, so a region would split at every flush of its memstore: set splitBytes to at least 256Mi"},
		{"split size in plain bytes below the memstore", cluster("sb5", "regions: {count: 4, splitBytes: 1048576}"),
			"regions.splitBytes: 1048576 is below engine.memstore.bytes 128Mi (the default)"},
		{"negative split rate", cluster("sq1", "regions: {count: 4, splitQPS: -5}"),
			"regions.splitQPS: -5 is negative; write requests per second, e.g. 3000, or 0 to never split by load"},
		{"merge size not a quantity", cluster("mb1", "regions: {count: 4, mergeBytes: small}"),
			`regions.mergeBytes: "small" is not a quantity; write bytes with a unit, e.g. 128Mi (a quarter of splitBytes is the default), or 0 to never merge`},
		{"negative merge size", cluster("mb2", "regions: {count: 4, mergeBytes: -1Mi}"),
			"regions.mergeBytes: -1Mi is negative; write a size such as 128Mi, or 0 to never merge"},
		{"no moves in flight", cluster("mm1", "regions: {count: 4, maxMovesInFlight: 0}"),
			"regions.maxMovesInFlight: 0 is out of range; write 1 to 64 (2 is the default)"},
		{"re-cut tolerance of 100%", cluster("rt1", "regions: {count: 4, recutTolerancePercent: 100}"),
			"regions.recutTolerancePercent: 100 is out of range; write 0 to 99 (20 is the default; 0 never re-cuts)"},
		{"negative balance floor", cluster("bm1", "regions: {count: 4, balanceMinBytes: -64Mi}"),
			"regions.balanceMinBytes: -64Mi is negative; write a size such as 64Mi, or 0 to balance any gap"},
		// The clock bound: the field, the value and the fix.
		{"negative clock offset", cluster("ck1", "clock: {maxOffset: -100ms}"),
			`spec.clock.maxOffset: Invalid value: "-100ms": clock.maxOffset: -100ms is negative; write the largest offset between the clocks of two stores, e.g. 250ms, or 0s to turn the clock checks off`},
		{"clock offset above the maximum", cluster("ck2", "clock: {maxOffset: 11s}"),
			"clock.maxOffset: 11s is above the maximum 10s: every region move or store restart would wait that long before its first write"},
		{"clock offset in minutes", cluster("ck3", "clock: {maxOffset: 1m}"), "clock.maxOffset: 1m is above the maximum 10s"},
		{"clock offset without a unit", cluster("ck4", "clock: {maxOffset: '250'}"),
			`clock.maxOffset: "250" is not a duration; write a number with a unit (ms, s), e.g. 250ms, or 0s to turn the clock checks off`},
		// The WAL archive's interval and the recovery's one source.
		{"negative archive interval", cluster("wa1", "walArchive: {interval: -5s}"),
			"walArchive.interval: -5s is negative; write how often to ship the WAL, e.g. 5s, or 0s to turn the archive off"},
		{"archive interval above the maximum", cluster("wa2", "walArchive: {interval: 2h}"),
			"walArchive.interval: 2h is above the maximum 1h: a lost volume would take up to that much of acknowledged writes with it"},
		// The default durability keeps the WAL in the bucket, whose stream
		// frontier the archive interval records: turning the archive off
		// needs durability Local.
		{"archive off with the WAL in the bucket", cluster("wa3", "walArchive: {interval: 0s}"),
			"durability.mode: Bucket keeps the WAL in the bucket, which needs walArchive.interval above 0s"},
		{"an unknown durability mode", cluster("du1", "durability: {mode: Remote}"), `spec.durability.mode: Unsupported value: "Remote"`},
		{"recovery with a backup and a time", cluster("rc1", "bootstrap: {recovery: {backup: b1, targetTime: '2026-11-27T10:42:00Z', sourceBucketURL: 's3://old'}}"),
			"bootstrap.recovery: give exactly one of backup (a backup's ID, to restore its state) and targetTime"},
		{"recovery with neither", cluster("rc2", "bootstrap: {recovery: {sourceBucketURL: 's3://old'}}"),
			"bootstrap.recovery: give exactly one of backup"},
		{"recovery to a time that is not one", cluster("rc3", "bootstrap: {recovery: {targetTime: 'yesterday', sourceBucketURL: 's3://old'}}"),
			"targetTime"},
		{"zero compaction ratio", cluster("r1", "engine: {compaction: {ratio: '0'}}"), `engine.compaction.ratio: "0" must be greater than 0, e.g. "1.2"`},
		{"compaction ratio with a comma", cluster("r2", "engine: {compaction: {ratio: '1,2'}}"), `engine.compaction.ratio: "1,2" is not a decimal number`},

		{"replicas above maxReplicas", func() client.Object {
			p := validPool(ns, "m1")
			p.Spec.Replicas = ptr.To(int32(6))
			return p
		}, "spec.replicas: Invalid value: replicas 6 is greater than maxReplicas 5: scale to at most 5, or raise maxReplicas first"},
		{"replicas above the default maxReplicas", pool("m2", "{replicas: 12}"), "replicas 12 is greater than maxReplicas 10 (the default)"},
		{"memory limit below cacheBytes", pool("m3", "{resources: {limits: {memory: 4Gi}}}"),
			"resources.limits.memory 4Gi must be greater than cacheBytes 6Gi (the default)"},
		{"memory limit equal to cacheBytes", pool("m4", "{cacheBytes: 2Gi, resources: {limits: {memory: 2048Mi}}}"),
			"resources.limits.memory 2048Mi must be greater than cacheBytes 2Gi: a worker keeps up to cacheBytes of compaction output in memory"},

		// Names: the children's names and labels must stay valid.
		{"cluster name too long", func() client.Object { return validCluster(ns, long(kvapi.MaxKVClusterNameLength+1)) },
			fmt.Sprintf(`metadata.name: "%s" has 53 characters; a KVCluster name may have at most 52`, long(kvapi.MaxKVClusterNameLength+1))},
		{"pool name too long", func() client.Object { return validPool(ns, long(kvapi.MaxCompactionPoolNameLength+1)) },
			fmt.Sprintf(`metadata.name: "%s" has 54 characters; a CompactionPool name may have at most 53`, long(kvapi.MaxCompactionPoolNameLength+1))},
		{"cluster name starting with a digit", func() client.Object { return validCluster(ns, "1st") },
			`metadata.name: "1st" cannot name the Services of the cluster: use lowercase letters, digits and -, starting with a letter`},
		{"pool name with a dot", func() client.Object { return validPool(ns, "workers.eu") },
			`metadata.name: "workers.eu" cannot name the Service <name>-compactor of the pool`},
		{"pool reference longer than a pool name", func() client.Object {
			c := validCluster(ns, "c16")
			c.Spec.CompactionPoolRef = &kvapi.CompactionPoolReference{Name: long(kvapi.MaxCompactionPoolNameLength + 1)}
			return c
		}, fmt.Sprintf(`compactionPoolRef.name must name a CompactionPool: "%s" is not a pool name`, long(kvapi.MaxCompactionPoolNameLength+1))},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := k8sClient.Create(ctx, tc.obj())
			if !apierrors.IsInvalid(err) {
				t.Fatalf("want the API server to reject it as Invalid, got %v", err)
			}
			if !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("message %q\n does not contain %q", err.Error(), tc.msg)
			}
			for _, cryptic := range []string{"should match", "quantities must match the regular expression", "evaluating rule"} {
				if strings.Contains(err.Error(), cryptic) {
					t.Errorf("message %q\n contains %q", err.Error(), cryptic)
				}
			}
		})
	}
}

// TestValidationAcceptsEdgeCases: the values at the edge of each rule are
// accepted (dry runs: the API server validates them in full, and stores
// nothing).
func TestValidationAcceptsEdgeCases(t *testing.T) {
	crdRules.RLock()
	defer crdRules.RUnlock()
	ctx := context.Background()
	ns := newNamespace(t)
	long := func(n int) string { return "n" + strings.Repeat("x", n-1) }
	for _, tc := range []struct {
		name string
		obj  client.Object
	}{
		{"durations in minutes and mixed units", fromYAML(t, "CompactionPool", ns, "e1",
			"{drainTimeout: 90m, autoscaling: {interval: 1h30m, syncPeriod: 1s, scaleUpStabilizationWindow: 0s, scaleDownStabilizationWindow: 2m30s}}")},
		{"fractional and millisecond durations", fromYAML(t, "CompactionPool", ns, "e2", "{drainTimeout: 1.5s, autoscaling: {syncPeriod: 1500ms}}")},
		{"replicas equal to maxReplicas", fromYAML(t, "CompactionPool", ns, "e3", "{replicas: 5, maxReplicas: 5, minReplicas: 5}")},
		{"replicas equal to the default maxReplicas", fromYAML(t, "CompactionPool", ns, "e4", "{replicas: 10}")},
		{"memory limit above cacheBytes", fromYAML(t, "CompactionPool", ns, "e5", "{cacheBytes: 6Gi, resources: {limits: {memory: 6145Mi}}}")},
		{"memory limit in plain bytes", fromYAML(t, "CompactionPool", ns, "e6", "{cacheBytes: 1Gi, resources: {limits: {memory: 1073741825}}}")},
		{"cache in plain bytes", fromYAML(t, "CompactionPool", ns, "e7", "{cacheBytes: 6442450944}")},
		{"credentials Secret with a dotted name", fromYAML(t, "CompactionPool", ns, "e8", "{bucket: {credentialsSecretRef: {name: s3.credentials}}}")},
		{"small ratio and minimum memstore", fromYAML(t, "KVCluster", ns, "e9",
			"{bucket: {url: 's3://bucket'}, engine: {compaction: {ratio: '0.5', minFiles: 10}, memstore: {bytes: 1Mi}}}")},
		{"split keys", fromYAML(t, "KVCluster", ns, "e10", "{bucket: {url: 's3://bucket'}, regions: {splitKeys: [a, m]}}")},
		// Split settings alone: the first layout is one region.
		{"split settings without a layout", fromYAML(t, "KVCluster", ns, "e11", "{bucket: {url: 's3://bucket'}, regions: {splitBytes: 3Gi, splitQPS: 3000}}")},
		{"never split", fromYAML(t, "KVCluster", ns, "e12", "{bucket: {url: 's3://bucket'}, regions: {count: 2, splitBytes: 0, splitQPS: 0}}")},
		{"merge and balance settings", fromYAML(t, "KVCluster", ns, "e13", "{bucket: {url: 's3://bucket'}, regions: {mergeBytes: 0, maxMovesInFlight: 4, balanceMinBytes: 0, recutTolerancePercent: 0}}")},
		{"split size equal to the memstore", fromYAML(t, "KVCluster", ns, "e13", "{bucket: {url: 's3://bucket'}, regions: {splitBytes: 128Mi}}")},
		{"split size equal to a small memstore", fromYAML(t, "KVCluster", ns, "e14",
			"{bucket: {url: 's3://bucket'}, regions: {splitKeys: [m], splitBytes: '1048576'}, engine: {memstore: {bytes: 1Mi}}}")},
		// 0 turns the clock checks off (the operator warns with several
		// stores); the maximum itself is allowed.
		{"clock checks off", fromYAML(t, "KVCluster", ns, "e15", "{bucket: {url: 's3://bucket'}, clock: {maxOffset: '0'}}")},
		{"clock offset of the maximum", fromYAML(t, "KVCluster", ns, "e16", "{bucket: {url: 's3://bucket'}, clock: {maxOffset: 10s}}")},
		{"clock offset in fractional seconds", fromYAML(t, "KVCluster", ns, "e17", "{bucket: {url: 's3://bucket'}, clock: {maxOffset: 0.05s}}")},
		{"archive off", fromYAML(t, "KVCluster", ns, "e18", "{bucket: {url: 's3://bucket'}, walArchive: {interval: 0s}, durability: {mode: Local}}")},
		{"archive interval of the maximum", fromYAML(t, "KVCluster", ns, "e19", "{bucket: {url: 's3://bucket'}, walArchive: {interval: 1h}}")},
		{"recovery to a time", fromYAML(t, "KVCluster", ns, "e20", "{bucket: {url: 's3://bucket'}, bootstrap: {recovery: {targetTime: '2026-11-27T10:42:00Z', sourceBucketURL: 's3://old'}}}")},
		{"cluster name of the maximum length", validCluster(ns, long(kvapi.MaxKVClusterNameLength))},
		{"pool name of the maximum length", validPool(ns, long(kvapi.MaxCompactionPoolNameLength))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := k8sClient.Create(ctx, tc.obj, client.DryRunAll); err != nil {
				t.Fatalf("refused: %v", err)
			}
		})
	}
}

// TestValidationImmutableFields: the region layout and the storage template
// cannot change after creation; other fields can.
func TestValidationImmutableFields(t *testing.T) {
	crdRules.RLock()
	defer crdRules.RUnlock()
	ctx := context.Background()
	ns := newNamespace(t)
	c := validCluster(ns, "immutable")
	c.Annotations = map[string]string{contract.PausedAnnotation: "true"} // keep the operator out of the way
	if err := k8sClient.Create(ctx, c); err != nil {
		t.Fatal(err)
	}
	if c.Spec.Engine.Warmup.Mode != "Incremental" || c.Spec.Storage.Size.String() != "10Gi" || c.Spec.Image != "" {
		t.Fatalf("defaults not applied (or an image defaulted: the operator chooses it): %+v", c.Spec)
	}
	for _, tc := range []struct {
		name   string
		mutate func(*kvapi.KVCluster)
		msg    string
	}{
		{"region count", func(c *kvapi.KVCluster) { c.Spec.Regions.Count = ptr.To(int32(8)) },
			"regions.count and regions.splitKeys are immutable: they made the cluster's first regions, which split from there"},
		{"region split keys", func(c *kvapi.KVCluster) { c.Spec.Regions = kvapi.RegionsSpec{SplitKeys: []string{"k"}} }, "regions.count and regions.splitKeys are immutable"},
		{"region count left out", func(c *kvapi.KVCluster) { c.Spec.Regions.Count = nil }, "regions.count and regions.splitKeys are immutable"},
		{"storage size", func(c *kvapi.KVCluster) { c.Spec.Storage.Size = resource.MustParse("20Gi") }, "storage is immutable"},
		{"storage class", func(c *kvapi.KVCluster) { c.Spec.Storage.StorageClassName = ptr.To("fast") }, "storage is immutable"},
		{"bucket url", func(c *kvapi.KVCluster) { c.Spec.Bucket.URL = "s3://another-bucket" }, "bucket.url is immutable: the stores' regions live in the bucket it names"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// The operator writes status concurrently: retry on conflicts.
			var err error
			for range 50 {
				cur := &kvapi.KVCluster{}
				if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(c), cur); err != nil {
					t.Fatal(err)
				}
				tc.mutate(cur)
				if err = k8sClient.Update(ctx, cur); !apierrors.IsConflict(err) {
					break
				}
			}
			if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("want Invalid with %q, got %v", tc.msg, err)
			}
		})
	}
	// The same size in another unit is not a change.
	var err error
	for range 50 {
		cur := &kvapi.KVCluster{}
		if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(c), cur); err != nil {
			t.Fatal(err)
		}
		cur.Spec.Storage.Size = resource.MustParse("10240Mi")
		if err = k8sClient.Update(ctx, cur); !apierrors.IsConflict(err) {
			break
		}
	}
	if err != nil {
		t.Fatalf("10Gi rewritten as 10240Mi was refused: %v", err)
	}
	for range 50 {
		cur := &kvapi.KVCluster{}
		if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(c), cur); err != nil {
			t.Fatal(err)
		}
		cur.Spec.Replicas = 5
		if err = k8sClient.Update(ctx, cur); !apierrors.IsConflict(err) {
			break
		}
	}
	if err != nil {
		t.Fatalf("replicas must stay mutable: %v", err)
	}
	// The split settings may change: regions split from the first layout.
	err = retryOnConflict(t, func() error {
		cur := &kvapi.KVCluster{}
		if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(c), cur); err != nil {
			return err
		}
		cur.Spec.Regions.SplitBytes = ptr.To(resource.MustParse("2Gi"))
		cur.Spec.Regions.SplitQPS = ptr.To(int32(3000))
		return k8sClient.Update(ctx, cur)
	})
	if err != nil {
		t.Fatalf("regions.splitBytes and regions.splitQPS must stay mutable: %v", err)
	}
}

// retryOnConflict runs write until it returns something other than a
// conflict: the operator writes the status of the objects these tests
// change, so a read-modify-write can lose the race.
func retryOnConflict(t *testing.T, write func() error) error {
	t.Helper()
	var err error
	for range 50 {
		if err = write(); !apierrors.IsConflict(err) {
			return err
		}
	}
	return err
}

// TestReplicasAboveMaxReplicas: a write that sets replicas above maxReplicas
// is refused, through /scale too; lowering maxReplicas below replicas is
// accepted, and so are later writes that leave replicas alone.
//
// Finding (Kubernetes 1.36, the envtest API server): a write through the
// /scale subresource is checked by the CRD's CEL rules, transition rules
// included. The API server applies the new spec.replicas to the stored
// object and validates the result as an update of the whole object
// (oldSelf is the object before the write), so kubectl scale, an HPA or
// KEDA get the same message as an edit of spec.replicas.
func TestReplicasAboveMaxReplicas(t *testing.T) {
	crdRules.RLock()
	defer crdRules.RUnlock()
	ctx := context.Background()
	ns := newNamespace(t)
	p := validPool(ns, "bounded")
	p.Spec.Replicas = ptr.To(int32(5)) // == maxReplicas
	p.Spec.Autoscaling.Mode = kvapi.AutoscalingDisabled
	if err := k8sClient.Create(ctx, p); err != nil {
		t.Fatalf("replicas equal to maxReplicas: %v", err)
	}
	key := client.ObjectKeyFromObject(p)
	update := func(edit func(*kvapi.CompactionPool)) error {
		return retryOnConflict(t, func() error {
			cur := &kvapi.CompactionPool{}
			if err := k8sClient.Get(ctx, key, cur); err != nil {
				return err
			}
			edit(cur)
			return k8sClient.Update(ctx, cur)
		})
	}
	scale := func(n int32) error {
		return retryOnConflict(t, func() error {
			cur := &kvapi.CompactionPool{}
			if err := k8sClient.Get(ctx, key, cur); err != nil {
				return err
			}
			s := &autoscalingv1.Scale{}
			if err := k8sClient.SubResource("scale").Get(ctx, cur, s); err != nil {
				return err
			}
			s.Spec.Replicas = n
			return k8sClient.SubResource("scale").Update(ctx, cur, client.WithSubResourceBody(s))
		})
	}
	refused := func(what string, err error, msg string) {
		t.Helper()
		if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), msg) {
			t.Errorf("%s: want Invalid with %q, got %v", what, msg, err)
		}
	}

	refused("spec.replicas 6", update(func(p *kvapi.CompactionPool) { p.Spec.Replicas = ptr.To(int32(6)) }),
		"spec.replicas: Invalid value: replicas 6 is greater than maxReplicas 5: scale to at most 5, or raise maxReplicas first")
	refused("/scale to 6", scale(6), "replicas 6 is greater than maxReplicas 5")

	if err := update(func(p *kvapi.CompactionPool) { p.Spec.MaxReplicas = 3 }); err != nil {
		t.Fatalf("lowering maxReplicas below replicas must stay possible: %v", err)
	}
	if err := update(func(p *kvapi.CompactionPool) { p.Labels = map[string]string{"team": "storage"} }); err != nil {
		t.Errorf("a write that leaves replicas (5) alone above maxReplicas (3): %v", err)
	}
	refused("/scale to 4 after maxReplicas 3", scale(4), "replicas 4 is greater than maxReplicas 3")
	if err := scale(3); err != nil {
		t.Errorf("/scale to maxReplicas: %v", err)
	}
	got := &kvapi.CompactionPool{}
	if err := k8sClient.Get(ctx, key, got); err != nil || *got.Spec.Replicas != 3 {
		t.Errorf("replicas after /scale to 3: %v, %v", got.Spec.Replicas, err)
	}
}

// TestMaximumLengthNamesGetValidChildren: a cluster and a pool with the
// longest names the CRDs take get every child the operator writes (the
// API server checks the children's names and labels).
func TestMaximumLengthNamesGetValidChildren(t *testing.T) {
	g := NewWithT(t)
	g.SetDefaultEventuallyTimeout(eventually)
	g.SetDefaultEventuallyPollingInterval(poll)
	ctx := context.Background()
	ns := newNamespace(t)
	p := validPool(ns, "p"+strings.Repeat("o", kvapi.MaxCompactionPoolNameLength-1))
	p.Spec.Autoscaling.Mode = kvapi.AutoscalingDisabled
	c := validCluster(ns, "k"+strings.Repeat("v", kvapi.MaxKVClusterNameLength-1))
	c.Spec.CompactionPoolRef = &kvapi.CompactionPoolReference{Name: p.Name}
	g.Expect(k8sClient.Create(ctx, p)).To(Succeed())
	g.Expect(k8sClient.Create(ctx, c)).To(Succeed())
	g.Eventually(func(g Gomega) {
		for _, o := range []client.Object{&appsv1.Deployment{}, &corev1.Service{}} {
			g.Expect(k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: p.ServiceName()}, o)).To(Succeed())
		}
		for name, o := range map[string]client.Object{
			c.StatefulSetName(): &appsv1.StatefulSet{}, c.HeadlessServiceName(): &corev1.Service{},
			c.ClientServiceName(): &corev1.Service{}, c.EngineConfigMapName(): &corev1.ConfigMap{},
		} {
			g.Expect(k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, o)).To(Succeed())
		}
		got := &kvapi.KVCluster{}
		g.Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(c), got)).To(Succeed())
		g.Expect(condition(got.Status.Conditions, kvapi.ConditionDegraded).Status).To(Equal(metav1.ConditionFalse))
	}).Should(Succeed())
}

// TestInvalidStoredPoolIsReportedOnItself: a CompactionPool stored with a
// drainTimeout the operator cannot parse (as one written before the CRD
// had its rule) is reported on that pool, as Degraded/InvalidSpec and a
// Warning event naming the field and the value, and does not stop the
// operator: a pool created afterwards is reconciled. With metav1.Duration
// in the API types the informer could not decode the list any more.
//
// The API server is made to store the bad pool by taking the drainTimeout
// rule out of the CRD for a moment; crdRules keeps the tests that rely on
// the rules out of that moment.
func TestInvalidStoredPoolIsReportedOnItself(t *testing.T) {
	crdRules.Lock()
	defer crdRules.Unlock()
	g := NewWithT(t)
	g.SetDefaultEventuallyTimeout(eventually)
	g.SetDefaultEventuallyPollingInterval(poll)
	ctx := context.Background()
	ns := newNamespace(t)
	const badSpec = "{drainTimeout: ten minutes, autoscaling: {mode: Disabled}}"
	const rejection = `drainTimeout: "ten minutes" is not a duration`

	crd := &unstructured.Unstructured{}
	crd.SetAPIVersion("apiextensions.k8s.io/v1")
	crd.SetKind("CustomResourceDefinition")
	crdKey := client.ObjectKey{Name: "compactionpools.kv.bellows.dev"}
	g.Expect(k8sClient.Get(ctx, crdKey, crd)).To(Succeed())
	origSpec, _, _ := unstructured.NestedMap(crd.Object, "spec")
	// Where the rule is in spec.versions[0].
	drainRules := []string{"schema", "openAPIV3Schema", "properties", "spec", "properties", "drainTimeout", "x-kubernetes-validations"}
	firstVersion := func(spec map[string]any) map[string]any { return spec["versions"].([]any)[0].(map[string]any) }
	_, found, err := unstructured.NestedSlice(firstVersion(origSpec), drainRules...)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(found).To(BeTrue(), "the CompactionPool CRD has no drainTimeout rule to take out")
	setSpec := func(edit func(spec map[string]any)) error {
		return retryOnConflict(t, func() error {
			cur := crd.DeepCopy()
			if err := k8sClient.Get(ctx, crdKey, cur); err != nil {
				return err
			}
			spec := runtime.DeepCopyJSON(origSpec)
			edit(spec)
			cur.Object["spec"] = spec
			return k8sClient.Update(ctx, cur)
		})
	}
	restored := false
	restore := func() {
		if restored {
			return
		}
		restored = true
		if err := setSpec(func(map[string]any) {}); err != nil {
			t.Errorf("restore the CompactionPool CRD: %v", err)
			return
		}
		// Back only once the API server serves the rule again.
		err := wait.PollUntilContextTimeout(ctx, poll, eventually, true, func(ctx context.Context) (bool, error) {
			err := k8sClient.Create(ctx, fromYAML(t, "CompactionPool", ns, "probe", badSpec), client.DryRunAll)
			return apierrors.IsInvalid(err) && strings.Contains(err.Error(), rejection), nil
		})
		if err != nil {
			t.Errorf("the drainTimeout rule is not back: %v", err)
		}
	}
	defer restore()

	g.Expect(setSpec(func(spec map[string]any) { unstructured.RemoveNestedField(firstVersion(spec), drainRules...) })).To(Succeed())
	// The API server rebuilds its handler for the CRD asynchronously: retry
	// until it stores the pool.
	g.Expect(wait.PollUntilContextTimeout(ctx, poll, eventually, true, func(ctx context.Context) (bool, error) {
		err := k8sClient.Create(ctx, fromYAML(t, "CompactionPool", ns, "stale", badSpec))
		switch {
		case err == nil, apierrors.IsAlreadyExists(err):
			return true, nil
		case apierrors.IsInvalid(err):
			return false, nil
		}
		return false, err
	})).To(Succeed())
	restore()

	// It decodes (a typed read is what the informer does).
	stale := &kvapi.CompactionPool{}
	g.Expect(k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: "stale"}, stale)).To(Succeed())
	g.Expect(stale.Spec.DrainTimeout).To(Equal(kvapi.Duration("ten minutes")))

	const says = `spec.drainTimeout: "ten minutes" is not a duration`
	g.Eventually(func(g Gomega) {
		got := &kvapi.CompactionPool{}
		g.Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(stale), got)).To(Succeed())
		d := condition(got.Status.Conditions, kvapi.ConditionDegraded)
		g.Expect(d.Status).To(Equal(metav1.ConditionTrue))
		g.Expect(d.Reason).To(Equal(kvapi.ReasonInvalidSpec))
		g.Expect(d.Message).To(ContainSubstring(says))
	}).Should(Succeed())
	g.Eventually(func(g Gomega) {
		var list eventsv1.EventList
		g.Expect(k8sClient.List(ctx, &list, client.InNamespace(ns))).To(Succeed())
		var notes []string
		for _, e := range list.Items {
			if e.Regarding.Name == "stale" && e.Type == corev1.EventTypeWarning && e.Reason == kvapi.ReasonInvalidSpec {
				notes = append(notes, e.Note)
			}
		}
		g.Expect(notes).To(ContainElement(ContainSubstring(says)))
	}).Should(Succeed())

	fresh := validPool(ns, "fresh")
	fresh.Spec.Autoscaling.Mode = kvapi.AutoscalingDisabled
	g.Expect(k8sClient.Create(ctx, fresh)).To(Succeed())
	g.Eventually(func() error {
		return k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: fresh.DeploymentName()}, &appsv1.Deployment{})
	}).Should(Succeed())
	g.Expect(k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: stale.DeploymentName()}, &appsv1.Deployment{})).
		To(WithTransform(apierrors.IsNotFound, BeTrue()), "nothing is built from a spec the operator cannot use")
	g.Expect(k8sClient.Delete(ctx, stale)).To(Succeed())
}
