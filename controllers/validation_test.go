package controllers

import (
	"context"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

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

// TestValidationRejectsInvalidResources creates each invalid resource against
// the real API server and checks it is refused with a message a user
// understands (CEL x-kubernetes-validations and OpenAPI bounds of the CRDs).
func TestValidationRejectsInvalidResources(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
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
		}, "regions: set exactly one of count or splitKeys"},
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
		}, "engine.blockCacheBytes must be greater than zero"},
		{"minFiles above maxFiles", func() client.Object {
			c := validCluster(ns, "c14")
			c.Spec.Engine.Compaction.MinFiles, c.Spec.Engine.Compaction.MaxFiles = 8, 4
			return c
		}, "engine.compaction.minFiles must be less than or equal to maxFiles"},
		{"minReplicas above maxReplicas", func() client.Object {
			p := validPool(ns, "p1")
			p.Spec.MinReplicas, p.Spec.MaxReplicas = 6, 3
			return p
		}, "minReplicas must be less than or equal to maxReplicas"},
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
		}, "cacheBytes must be greater than zero"},
		{"unknown autoscaling mode", func() client.Object {
			p := validPool(ns, "p5")
			p.Spec.Autoscaling.Mode = "Magic"
			return p
		}, `supported values: "Model", "External", "Disabled"`},
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
		})
	}
}

// TestValidationImmutableFields: the region layout and the storage template
// cannot change after creation; other fields can.
func TestValidationImmutableFields(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	c := validCluster(ns, "immutable")
	c.Annotations = map[string]string{contract.PausedAnnotation: "true"} // keep the operator out of the way
	if err := k8sClient.Create(ctx, c); err != nil {
		t.Fatal(err)
	}
	if c.Spec.Engine.Warmup.Mode != "Incremental" || c.Spec.Storage.Size.String() != "10Gi" || c.Spec.Image == "" {
		t.Fatalf("defaults not applied: %+v", c.Spec)
	}
	for _, tc := range []struct {
		name   string
		mutate func(*kvapi.KVCluster)
		msg    string
	}{
		{"region count", func(c *kvapi.KVCluster) { c.Spec.Regions.Count = ptr.To(int32(8)) }, "regions is immutable: the region layout cannot change after creation"},
		{"region split keys", func(c *kvapi.KVCluster) { c.Spec.Regions = kvapi.RegionsSpec{SplitKeys: []string{"k"}} }, "regions is immutable"},
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
}
