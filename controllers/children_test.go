package controllers

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	kvapi "github.com/bellows-kv/bellows/api/v1alpha1"
	"github.com/bellows-kv/bellows/autoscaler"
	"github.com/bellows-kv/bellows/controllers/specs"
)

func fakeScheme(t *testing.T) *runtime.Scheme {
	t.Helper()
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	if err := kvapi.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	return s
}

func drain(rec *events.FakeRecorder) []string {
	var out []string
	for {
		select {
		case e := <-rec.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

// TestEnsure: create, leave alone on the same hash, update on a new hash
// (keeping what the API server assigned), adopt an object another owner
// controls; an event for each write and none otherwise.
func TestEnsure(t *testing.T) {
	ctx := context.Background()
	c := fake.NewClientBuilder().WithScheme(fakeScheme(t)).Build()
	rec := events.NewFakeRecorder(10)
	ch := children{client: c, recorder: rec}
	cluster := &kvapi.KVCluster{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "kv", UID: "uid-1"}}
	cluster.Spec.Regions.Count = ptr.To(int32(4))
	cluster.SetDefaults()

	desired := specs.BuildStoreClientService(cluster)
	got, err := ensure(ctx, ch, cluster, desired, updateService)
	if err != nil || got != desired {
		t.Fatalf("create: %v (returned %p, want desired %p)", err, got, desired)
	}
	if e := drain(rec); !reflect.DeepEqual(e, []string{"Normal Created Created Service kv"}) {
		t.Errorf("create events %q", e)
	}

	// The API server assigns a clusterIP.
	live := &corev1.Service{}
	key := client.ObjectKeyFromObject(desired)
	if err := c.Get(ctx, key, live); err != nil {
		t.Fatal(err)
	}
	live.Spec.ClusterIP, live.Spec.ClusterIPs = "10.0.0.7", []string{"10.0.0.7"}
	if err := c.Update(ctx, live); err != nil {
		t.Fatal(err)
	}
	rv := live.ResourceVersion

	// Same hash, same owner: nothing is written.
	got, err = ensure(ctx, ch, cluster, specs.BuildStoreClientService(cluster), updateService)
	if err != nil || got.ResourceVersion != rv {
		t.Fatalf("unchanged: %v, resourceVersion %s, want %s", err, got.ResourceVersion, rv)
	}
	if e := drain(rec); len(e) != 0 {
		t.Errorf("unchanged, yet events %q", e)
	}

	// A new hash: the spec is replaced, the clusterIP stays.
	desired = specs.BuildStoreClientService(cluster)
	desired.Spec.Ports[0].Port = 7401
	specs.StampHash(desired, desired.Spec)
	got, err = ensure(ctx, ch, cluster, desired, updateService)
	if err != nil || got.Spec.Ports[0].Port != 7401 || got.Spec.ClusterIP != "10.0.0.7" || specs.SpecHash(got) != specs.SpecHash(desired) {
		t.Fatalf("update: %v, ports %+v, clusterIP %q", err, got.Spec.Ports, got.Spec.ClusterIP)
	}
	if e := drain(rec); !reflect.DeepEqual(e, []string{"Normal Updated Updated Service kv"}) {
		t.Errorf("update events %q", e)
	}

	// Controlled by someone else (same hash): adopted.
	got.OwnerReferences[0].UID = "someone-else"
	if err := c.Update(ctx, got); err != nil {
		t.Fatal(err)
	}
	got, err = ensure(ctx, ch, cluster, desired, updateService)
	if err != nil || !metav1.IsControlledBy(got, cluster) {
		t.Fatalf("adopt: %v, owners %+v", err, got.OwnerReferences)
	}
	if e := drain(rec); len(e) != 1 {
		t.Errorf("adopt events %q", e)
	}

	// Errors name the kind and the object, and wrap the client's.
	refused := errors.New("refused")
	failing := interceptor.NewClient(fake.NewClientBuilder().WithScheme(fakeScheme(t)).Build(), interceptor.Funcs{
		Create: func(context.Context, client.WithWatch, client.Object, ...client.CreateOption) error { return refused },
	})
	_, err = ensure(ctx, children{client: failing, recorder: rec}, cluster, specs.BuildStorePDB(cluster), updatePDB)
	if !errors.Is(err, refused) || err.Error() != "create PodDisruptionBudget kv: refused" {
		t.Errorf("create error %v", err)
	}
}

// poolWithWorker is a pool in Model mode whose model recommends 2 workers
// (spec.replicas 1), a KVCluster of 10 regions that references it, and one
// worker with 3 jobs in flight.
func poolWithWorker() (*kvapi.CompactionPool, []client.Object, autoscaler.Source) {
	pool := &kvapi.CompactionPool{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "workers", UID: "pool-uid", Generation: 1}}
	pool.Spec.MinReplicas, pool.Spec.MaxReplicas = 1, 8
	pool.Spec.CacheBytes = resource.MustParse("6G")
	pool.Spec.Autoscaling.ScaleUpStabilizationWindow = "0s"
	pool.Spec.Autoscaling.ScaleDownStabilizationWindow = "0s"
	pool.SetDefaults()
	cluster := &kvapi.KVCluster{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "store"}}
	cluster.Spec.Regions.Count = ptr.To(int32(10))
	cluster.Spec.CompactionPoolRef = &kvapi.CompactionPoolReference{Name: pool.Name}
	worker := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "busy", Labels: specs.PoolSelectorLabels(pool)},
		Status:     corev1.PodStatus{PodIP: "10.0.0.1"},
	}
	obs := paperObservation(10, 1)
	obs.InflightJobs = map[string]float64{"busy": 3}
	src := autoscaler.SourceFunc(func(context.Context, autoscaler.Targets) (autoscaler.Observation, error) { return obs, nil })
	return pool, []client.Object{pool, cluster, worker}, src
}

// TestAutoscalerCannotBlockTheDeployment: a refused pod-deletion-cost patch
// and a refused /scale write (the fake client has no /scale for custom
// resources) are reported as an event and the ScalingActive condition; the
// Deployment, Service and PDB are written anyway, and the pool is not
// Degraded.
func TestAutoscalerCannotBlockTheDeployment(t *testing.T) {
	ctx := context.Background()
	pool, objs, src := poolWithWorker()
	c := fake.NewClientBuilder().WithScheme(fakeScheme(t)).WithObjects(objs...).WithStatusSubresource(&kvapi.CompactionPool{}).
		WithInterceptorFuncs(interceptor.Funcs{
			Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
				if _, ok := obj.(*corev1.Pod); ok {
					return errors.New("pods are read-only today")
				}
				return c.Patch(ctx, obj, patch, opts...)
			},
		}).Build()
	rec := events.NewFakeRecorder(20)
	r := &CompactionPoolReconciler{Client: c, Recorder: rec, Source: src, Clock: clocktesting.NewFakePassiveClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))}

	res, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(pool)})
	if err != nil {
		t.Fatalf("an autoscaler problem must not fail the pass: %v", err)
	}
	if res.RequeueAfter != kvapi.DefaultAutoscalingSync {
		t.Errorf("requeue after %s, want the sync period", res.RequeueAfter)
	}
	d := &appsv1.Deployment{}
	if err := c.Get(ctx, types.NamespacedName{Namespace: "ns", Name: "workers-compactor"}, d); err != nil {
		t.Fatalf("the Deployment must be written: %v", err)
	}
	if *d.Spec.Replicas != 1 {
		t.Errorf("Deployment replicas %d: the /scale write failed, so spec.replicas (1) stands", *d.Spec.Replicas)
	}
	for _, o := range []client.Object{&corev1.Service{}, &policyv1.PodDisruptionBudget{}} {
		if err := c.Get(ctx, types.NamespacedName{Namespace: "ns", Name: "workers-compactor"}, o); err != nil {
			t.Errorf("%T must be written: %v", o, err)
		}
	}
	got := &kvapi.CompactionPool{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(pool), got); err != nil {
		t.Fatal(err)
	}
	if cond := condition(got.Status.Conditions, kvapi.ConditionDegraded); cond.Status != metav1.ConditionFalse {
		t.Errorf("Degraded %+v", cond)
	}
	sa := condition(got.Status.Conditions, kvapi.ConditionScalingActive)
	if sa.Status != metav1.ConditionFalse || sa.Reason != kvapi.ReasonReconcileError || !strings.HasPrefix(sa.Message, "autoscaler: apply the recommendation of 2 workers: get /scale: ") {
		t.Errorf("ScalingActive %+v", sa)
	}
	if got.Status.DesiredReplicas == nil || *got.Status.DesiredReplicas != 2 || got.Status.Autoscaler == nil || got.Status.Autoscaler.Outputs.RecommendedReplicas != 2 {
		t.Errorf("the evaluation must be recorded: desired %v, autoscaler %+v", got.Status.DesiredReplicas, got.Status.Autoscaler)
	}
	var warnings []string
	for _, e := range drain(rec) {
		if strings.HasPrefix(e, "Warning ") {
			warnings = append(warnings, e)
		}
	}
	if len(warnings) != 2 || !strings.HasPrefix(warnings[0], "Warning ReconcileError pod busy deletion cost: pods are read-only today") ||
		!strings.HasPrefix(warnings[1], "Warning ReconcileError apply the recommendation of 2 workers") {
		t.Errorf("warnings %q", warnings)
	}
}
