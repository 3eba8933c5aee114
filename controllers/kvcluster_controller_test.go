package controllers

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	kvapi "github.com/bellows-kv/bellows/api/v1alpha1"
	"github.com/bellows-kv/bellows/controllers/specs"
	"github.com/bellows-kv/bellows/internal/contract"
)

// loadSample reads a resource from config/samples into obj.
func loadSample(t *testing.T, file string, obj client.Object, ns string) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "config", "samples", file))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(data, obj); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	obj.SetNamespace(ns)
}

func condition(conds []metav1.Condition, typ string) metav1.Condition {
	if c := meta.FindStatusCondition(conds, typ); c != nil {
		return *c
	}
	return metav1.Condition{}
}

// ownedNames lists the names of objects of list's kind in ns controlled by owner.
func ownedNames(g Gomega, ns string, owner metav1.Object, list client.ObjectList) []string {
	g.Expect(k8sClient.List(context.Background(), list, client.InNamespace(ns))).To(Succeed())
	var names []string
	items, err := meta.ExtractList(list)
	g.Expect(err).NotTo(HaveOccurred())
	for _, it := range items {
		o := it.(metav1.Object)
		if metav1.IsControlledBy(o, owner) {
			names = append(names, o.GetName())
		}
	}
	return names
}

// markRolledOut plays the StatefulSet controller and kubelet: once the
// StatefulSet carries the spec with hash wantHash, every pod runs it and is
// Ready. Waiting for wantHash matters: the operator writes the ConfigMap
// before the StatefulSet, and a status stamped on the previous generation
// would leave the new one looking unrolled forever (the rollout gate then
// holds back every later change).
func markRolledOut(g *WithT, key client.ObjectKey, wantHash string) {
	setStoreStatus(g, key, wantHash, "r", "r", allReplicas, allReplicas)
}

// desiredStoreHash is the spec hash the operator gives the StatefulSet for
// the KVCluster's current spec.
func desiredStoreHash(g *WithT, key client.ObjectKey) string {
	c := &kvapi.KVCluster{}
	g.Expect(k8sClient.Get(context.Background(), key, c)).To(Succeed())
	c.SetDefaults()
	if c.Spec.Image == "" {
		c.Spec.Image = suiteDefaultImage // what the reconciler fills in
	}
	cm, err := specs.BuildStoreConfigMap(c)
	g.Expect(err).NotTo(HaveOccurred())
	// The split size follows the referenced pool's cache, when it exists.
	var pool *kvapi.CompactionPool
	if ref := c.Spec.CompactionPoolRef; ref != nil {
		p := &kvapi.CompactionPool{}
		err := k8sClient.Get(context.Background(), client.ObjectKey{Namespace: c.Namespace, Name: ref.Name}, p)
		if err == nil {
			p.SetDefaults()
			pool = p
		} else {
			g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "get the CompactionPool: %v", err)
		}
	}
	return specs.SpecHash(specs.BuildStoreStatefulSet(c, cm, pool))
}

// TestKVClusterSamplePair reconciles config/samples and follows the cluster
// through readiness, a gated rolling change, pause and deletion.
func TestKVClusterSamplePair(t *testing.T) {
	g := NewWithT(t)
	g.SetDefaultEventuallyTimeout(eventually)
	g.SetDefaultEventuallyPollingInterval(poll)
	ctx := context.Background()
	ns := newNamespace(t)

	pool := &kvapi.CompactionPool{}
	loadSample(t, "kv_v1alpha1_compactionpool.yaml", pool, ns)
	pool.Spec.Autoscaling.Mode = kvapi.AutoscalingDisabled // sizing is tested elsewhere
	cluster := &kvapi.KVCluster{}
	loadSample(t, "kv_v1alpha1_kvcluster.yaml", cluster, ns)
	g.Expect(k8sClient.Create(ctx, pool)).To(Succeed())
	g.Expect(k8sClient.Create(ctx, cluster)).To(Succeed())
	key := client.ObjectKeyFromObject(cluster)

	// Exactly the expected children, each controlled by the KVCluster.
	g.Eventually(func(g Gomega) {
		g.Expect(ownedNames(g, ns, cluster, &appsv1.StatefulSetList{})).To(ConsistOf("demo"))
		g.Expect(ownedNames(g, ns, cluster, &corev1.ServiceList{})).To(ConsistOf("demo", "demo-headless"))
		g.Expect(ownedNames(g, ns, cluster, &corev1.ConfigMapList{})).To(ConsistOf("demo-engine"))
		g.Expect(ownedNames(g, ns, cluster, &policyv1.PodDisruptionBudgetList{})).To(ConsistOf("demo"))
		g.Expect(ownedNames(g, ns, cluster, &corev1.ServiceAccountList{})).To(ConsistOf("demo-store"))
		g.Expect(ownedNames(g, ns, cluster, &rbacv1.RoleList{})).To(ConsistOf("demo-store"))
		g.Expect(ownedNames(g, ns, cluster, &rbacv1.RoleBindingList{})).To(ConsistOf("demo-store"))
	}).Should(Succeed())

	// The storage pods run as demo-store, which may list and watch
	// EndpointSlices (compactor and peer discovery) and its own
	// StatefulSet (its replica count, --replicas-from) and nothing else.
	role := &rbacv1.Role{}
	g.Expect(k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: "demo-store"}, role)).To(Succeed())
	g.Expect(role.Rules).To(Equal([]rbacv1.PolicyRule{{
		APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: []string{"list", "watch"},
	}, {
		APIGroups: []string{"apps"}, Resources: []string{"statefulsets"}, ResourceNames: []string{"demo"}, Verbs: []string{"list", "watch"},
	}}))
	rb := &rbacv1.RoleBinding{}
	g.Expect(k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: "demo-store"}, rb)).To(Succeed())
	g.Expect(rb.RoleRef).To(Equal(rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "demo-store"}))
	g.Expect(rb.Subjects).To(Equal([]rbacv1.Subject{{Kind: "ServiceAccount", Name: "demo-store", Namespace: ns}}))
	// Drift in the Role is put back.
	role.Rules[0].Verbs = []string{"get"}
	role.Annotations[contract.SpecHashAnnotation] = "edited"
	g.Expect(k8sClient.Update(ctx, role)).To(Succeed())
	g.Eventually(func(g Gomega) {
		got := &rbacv1.Role{}
		g.Expect(k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: "demo-store"}, got)).To(Succeed())
		g.Expect(got.Rules).To(HaveLen(2))
		g.Expect(got.Rules[0].Verbs).To(ConsistOf("list", "watch"))
	}).Should(Succeed())

	sts := &appsv1.StatefulSet{}
	g.Expect(k8sClient.Get(ctx, key, sts)).To(Succeed())
	g.Expect(sts.Spec.Template.Spec.ServiceAccountName).To(Equal("demo-store"))
	g.Expect(sts.Spec.VolumeClaimTemplates).To(HaveLen(1))
	g.Expect(sts.Spec.VolumeClaimTemplates[0].Spec.Resources.Requests.Storage().String()).To(Equal("20Gi"))
	g.Expect(sts.Spec.Template.Spec.Containers[0].Args).To(ContainElements(
		"--regions=10", "--region-owner=$(POD_INDEX)", "--replicas-from="+ns+"/demo", "--compactor-service="+ns+"/workers-compactor"))
	g.Expect(sts.Annotations).To(HaveKey(contract.SpecHashAnnotation))
	cm := &corev1.ConfigMap{}
	g.Expect(k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: "demo-engine"}, cm)).To(Succeed())
	g.Expect(cm.Data["engine.yaml"]).To(ContainSubstring("policy: Basic"))
	headless := &corev1.Service{}
	g.Expect(k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: "demo-headless"}, headless)).To(Succeed())
	g.Expect(headless.Spec.ClusterIP).To(Equal(corev1.ClusterIPNone))

	// Status follows the children: not Ready until the pods are.
	g.Eventually(func(g Gomega) {
		c := &kvapi.KVCluster{}
		g.Expect(k8sClient.Get(ctx, key, c)).To(Succeed())
		g.Expect(c.Status.ObservedGeneration).To(Equal(c.Generation))
		g.Expect(c.Status.Regions).To(Equal(int32(10)))
		g.Expect(c.Status.RegionAssignment).To(HaveLen(3))
		g.Expect(c.Status.RegionAssignment[0]).To(Equal(kvapi.RegionAssignment{Pod: "demo-0", Regions: "0,3,6,9", Count: 4}))
		g.Expect(condition(c.Status.Conditions, kvapi.ConditionReady).Status).To(Equal(metav1.ConditionFalse))
		g.Expect(condition(c.Status.Conditions, kvapi.ConditionProgressing).Status).To(Equal(metav1.ConditionTrue))
		g.Expect(condition(c.Status.Conditions, kvapi.ConditionDegraded).Status).To(Equal(metav1.ConditionFalse))
	}).Should(Succeed())

	markRolledOut(g, key, specs.SpecHash(sts))
	g.Eventually(func(g Gomega) {
		c := &kvapi.KVCluster{}
		g.Expect(k8sClient.Get(ctx, key, c)).To(Succeed())
		g.Expect(condition(c.Status.Conditions, kvapi.ConditionReady).Status).To(Equal(metav1.ConditionTrue))
		g.Expect(c.Status.ReadyReplicas).To(Equal(int32(3)))
	}).Should(Succeed())

	// A change is applied (rollout complete) and bumps the spec hash.
	update := func(f func(*kvapi.KVCluster)) {
		g.Eventually(func() error {
			c := &kvapi.KVCluster{}
			if err := k8sClient.Get(ctx, key, c); err != nil {
				return err
			}
			f(c)
			return k8sClient.Update(ctx, c)
		}).Should(Succeed())
	}
	oldHash := sts.Annotations[contract.SpecHashAnnotation]
	update(func(c *kvapi.KVCluster) { c.Spec.Image = "bellows:v2" })
	var v2Hash string
	g.Eventually(func(g Gomega) {
		s := &appsv1.StatefulSet{}
		g.Expect(k8sClient.Get(ctx, key, s)).To(Succeed())
		g.Expect(s.Spec.Template.Spec.Containers[0].Image).To(Equal("bellows:v2"))
		g.Expect(s.Annotations[contract.SpecHashAnnotation]).NotTo(Equal(oldHash))
		v2Hash = specs.SpecHash(s)
	}).Should(Succeed())
	g.Expect(v2Hash).To(Equal(desiredStoreHash(g, key)))

	// That rollout is in progress (the StatefulSet controller has not
	// caught up), so the next change waits.
	update(func(c *kvapi.KVCluster) { c.Spec.Engine.BlockCacheBytes = resourceMust("3Gi") })
	g.Eventually(func(g Gomega) {
		c := &kvapi.KVCluster{}
		g.Expect(k8sClient.Get(ctx, key, c)).To(Succeed())
		g.Expect(c.Status.ObservedGeneration).To(Equal(c.Generation))
		g.Expect(condition(c.Status.Conditions, kvapi.ConditionProgressing).Reason).To(Equal(kvapi.ReasonWaitingForRollout))
	}).Should(Succeed())
	g.Expect(k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: "demo-engine"}, cm)).To(Succeed())
	g.Expect(cm.Data["engine.yaml"]).To(ContainSubstring("blockCacheBytes: 2147483648"), "held-back change must not reach the ConfigMap")

	// Finishing the v2 rollout releases the held-back change: the ConfigMap
	// and then the StatefulSet. Mark the rollout of exactly that StatefulSet
	// spec, not whatever is there when the ConfigMap has changed.
	markRolledOut(g, key, v2Hash)
	g.Eventually(func(g Gomega) {
		g.Expect(k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: "demo-engine"}, cm)).To(Succeed())
		g.Expect(cm.Data["engine.yaml"]).To(ContainSubstring("blockCacheBytes: 3221225472"))
	}).Should(Succeed())
	markRolledOut(g, key, desiredStoreHash(g, key))
	g.Eventually(func(g Gomega) {
		c := &kvapi.KVCluster{}
		g.Expect(k8sClient.Get(ctx, key, c)).To(Succeed())
		g.Expect(c.Status.ObservedGeneration).To(Equal(c.Generation))
		g.Expect(condition(c.Status.Conditions, kvapi.ConditionReady).Status).To(Equal(metav1.ConditionTrue))
	}).Should(Succeed())

	// Paused: the operator records it and leaves the children alone.
	update(func(c *kvapi.KVCluster) {
		c.Annotations = map[string]string{contract.PausedAnnotation: "true"}
		c.Spec.Replicas = 5
	})
	g.Eventually(func(g Gomega) {
		c := &kvapi.KVCluster{}
		g.Expect(k8sClient.Get(ctx, key, c)).To(Succeed())
		g.Expect(c.Status.ObservedGeneration).To(Equal(c.Generation))
		g.Expect(condition(c.Status.Conditions, kvapi.ConditionProgressing).Reason).To(Equal(kvapi.ReasonPaused))
	}).Should(Succeed())
	g.Expect(k8sClient.Get(ctx, key, sts)).To(Succeed())
	g.Expect(*sts.Spec.Replicas).To(Equal(int32(3)), "a paused cluster's StatefulSet must not change")
	template := sts.Spec.Template.DeepCopy()
	update(func(c *kvapi.KVCluster) { delete(c.Annotations, contract.PausedAnnotation) })
	g.Eventually(func(g Gomega) {
		g.Expect(k8sClient.Get(ctx, key, sts)).To(Succeed())
		g.Expect(*sts.Spec.Replicas).To(Equal(int32(5)))
	}).Should(Succeed())
	// A replica change leaves the pod template alone: no store restarts.
	g.Expect(sts.Spec.Template).To(Equal(*template), "a replica change must not change the pod template")

	// Deleting the KVCluster removes every child (garbage collection by the
	// real kube-controller-manager, through the owner references).
	g.Expect(k8sClient.Delete(ctx, cluster)).To(Succeed())
	g.Eventually(func(g Gomega) {
		for _, o := range []client.Object{
			&appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "demo"}},
			&corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "demo"}},
			&corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "demo-headless"}},
			&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "demo-engine"}},
			&policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "demo"}},
			&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "demo-store"}},
			&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "demo-store"}},
			&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "demo-store"}},
		} {
			err := k8sClient.Get(ctx, client.ObjectKeyFromObject(o), o)
			g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "%T %s still exists (err %v)", o, o.GetName(), err)
		}
	}).Should(Succeed())
	// The pool is not owned by the cluster and stays.
	g.Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(pool), &kvapi.CompactionPool{})).To(Succeed())
}

// TestKVClusterMissingPoolIsDegraded: a reference to a pool that does not
// exist is reported, and clears once the pool appears.
func TestKVClusterMissingPoolIsDegraded(t *testing.T) {
	g := NewWithT(t)
	g.SetDefaultEventuallyTimeout(eventually)
	g.SetDefaultEventuallyPollingInterval(poll)
	ctx := context.Background()
	ns := newNamespace(t)
	c := validCluster(ns, "lonely")
	c.Spec.CompactionPoolRef = &kvapi.CompactionPoolReference{Name: "nowhere"}
	g.Expect(k8sClient.Create(ctx, c)).To(Succeed())
	g.Eventually(func(g Gomega) {
		got := &kvapi.KVCluster{}
		g.Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(c), got)).To(Succeed())
		d := condition(got.Status.Conditions, kvapi.ConditionDegraded)
		g.Expect(d.Status).To(Equal(metav1.ConditionTrue))
		g.Expect(d.Reason).To(Equal(kvapi.ReasonCompactionPoolMissing))
	}).Should(Succeed())
	p := validPool(ns, "nowhere")
	p.Spec.Autoscaling.Mode = kvapi.AutoscalingDisabled
	g.Expect(k8sClient.Create(ctx, p)).To(Succeed())
	g.Eventually(func(g Gomega) {
		got := &kvapi.KVCluster{}
		g.Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(c), got)).To(Succeed())
		g.Expect(condition(got.Status.Conditions, kvapi.ConditionDegraded).Status).To(Equal(metav1.ConditionFalse))
	}).Should(Succeed())
}

// serviceMonitorCRDInstalled records that TestServiceMonitorsFollowTheCRD
// installed the ServiceMonitor CRD into the suite's API server.
var serviceMonitorCRDInstalled bool

// TestServiceMonitorsFollowTheCRD: without the Prometheus-operator CRD the
// operator reconciles without error and writes no ServiceMonitor; once the
// CRD (from the prometheus-operator module's example CRDs) is installed,
// both the cluster's and the pool's ServiceMonitors appear.
func TestServiceMonitorsFollowTheCRD(t *testing.T) {
	g := NewWithT(t)
	g.SetDefaultEventuallyTimeout(eventually)
	g.SetDefaultEventuallyPollingInterval(poll)
	ctx := context.Background()
	ns := newNamespace(t)

	ok, err := serviceMonitorsAvailable(k8sClient)
	g.Expect(err).NotTo(HaveOccurred())
	// Only this test installs the CRD, and it cannot take it away again: the
	// manager's REST mapper never forgets a kind it has seen served. So a
	// repeated run in the same process (go test -count=N) starts with the
	// CRD present and checks the "installed" half only.
	g.Expect(ok).To(Equal(serviceMonitorCRDInstalled), "the ServiceMonitor CRD must be absent until this test installs it")

	p := validPool(ns, "mon")
	p.Spec.Autoscaling.Mode = kvapi.AutoscalingDisabled
	c := validCluster(ns, "mon")
	c.Spec.CompactionPoolRef = &kvapi.CompactionPoolReference{Name: "mon"}
	g.Expect(k8sClient.Create(ctx, p)).To(Succeed())
	g.Expect(k8sClient.Create(ctx, c)).To(Succeed())
	g.Eventually(func(g Gomega) {
		got := &kvapi.KVCluster{}
		g.Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(c), got)).To(Succeed())
		g.Expect(got.Status.ObservedGeneration).To(Equal(got.Generation))
		g.Expect(condition(got.Status.Conditions, kvapi.ConditionDegraded).Status).To(Equal(metav1.ConditionFalse))
		gotPool := &kvapi.CompactionPool{}
		g.Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(p), gotPool)).To(Succeed())
		g.Expect(condition(gotPool.Status.Conditions, kvapi.ConditionDegraded).Status).To(Equal(metav1.ConditionFalse))
	}).Should(Succeed())

	if !serviceMonitorCRDInstalled {
		_, err = envtest.InstallCRDs(cfg, envtest.CRDInstallOptions{Paths: []string{filepath.Join(assetsDir, "crd")}, ErrorIfPathMissing: true})
		g.Expect(err).NotTo(HaveOccurred())
		serviceMonitorCRDInstalled = true
		// Nudge both objects (no watch on a kind that did not exist at start-up).
		for _, o := range []client.Object{&kvapi.KVCluster{}, &kvapi.CompactionPool{}} {
			key := client.ObjectKey{Namespace: ns, Name: "mon"}
			g.Eventually(func() error {
				if err := k8sClient.Get(ctx, key, o); err != nil {
					return err
				}
				o.SetLabels(map[string]string{"nudge": "1"})
				return k8sClient.Update(ctx, o)
			}).Should(Succeed())
		}
	}
	for _, name := range []string{"mon-store", "mon-compactor"} {
		g.Eventually(func(g Gomega) {
			sm := &unstructured.Unstructured{}
			sm.SetGroupVersionKind(specs.ServiceMonitorGVK)
			g.Expect(k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, sm)).To(Succeed())
			g.Expect(metav1.GetControllerOf(sm)).NotTo(BeNil())
			eps, _, _ := unstructured.NestedSlice(sm.Object, "spec", "endpoints")
			g.Expect(eps).To(HaveLen(1))
		}).Should(Succeed())
	}
}

var _ = ptr.To[int32]
